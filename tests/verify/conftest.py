"""The test engine as a real subprocess on 127.0.0.1 (a free port it picks itself)."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

FAKE = Path(__file__).resolve().parent.parent / "engine" / "fake_vllm.py"
PORT_RE = re.compile(r"listening on 127\.0\.0\.1:(\d+)")


@dataclass
class FakeEngine:
    proc: subprocess.Popen[bytes]
    url: str
    stdout: Path
    stderr: Path
    model: str

    def wait_exit(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout=timeout)


@pytest.fixture
def fake_engine(tmp_path: Path) -> Iterator[Callable[..., FakeEngine]]:
    """``fake_engine("word-salad", "--max-model-len", "4096")``: start the engine, wait for its port."""
    started: list[FakeEngine] = []

    def start(mode: str = "healthy", *args: str, model: str = "fake-model") -> FakeEngine:
        n = len(started)
        out, err = tmp_path / f"engine{n}.out", tmp_path / f"engine{n}.err"
        with out.open("wb") as o, err.open("wb") as e:
            proc = subprocess.Popen(
                [sys.executable, str(FAKE), "--host", "127.0.0.1", "--port", "0", "--mode", mode,
                 "--served-name", model, *args],
                stdout=o, stderr=e,
            )
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            match = PORT_RE.search(out.read_text())
            if match:
                engine = FakeEngine(proc, f"http://127.0.0.1:{match.group(1)}", out, err, model)
                started.append(engine)
                return engine
            if proc.poll() is not None:
                break
            time.sleep(0.05)
        proc.kill()
        raise RuntimeError(f"test engine did not start: {err.read_text()}")

    yield start
    for engine in started:
        if engine.proc.poll() is None:
            engine.proc.terminate()
            try:
                engine.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                engine.proc.kill()
                engine.proc.wait()
