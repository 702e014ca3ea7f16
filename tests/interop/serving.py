"""Start a real third-party server on loopback for an interop test, wait for its /health, stop it after."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import httpx
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(argv_for: Callable[[int], list[str]], log: Path, *, what: str, ready_s: float,
            env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run ``argv_for(port)`` with its output in ``log``; yield its base URL once /health answers 200
    (fail the test if it exits or is not ready within ``ready_s``); terminate it afterwards."""
    port = free_port()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv_for(port), stdout=out, stderr=subprocess.STDOUT,
                                env=dict(env) if env is not None else None)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"{what} exited {proc.returncode}: {log.read_text()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.2)
        else:
            pytest.fail(f"{what} not ready in {ready_s:g} s: {log.read_text()[-2000:]}")
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
