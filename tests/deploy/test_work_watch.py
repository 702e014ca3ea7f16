"""Warmup's stall rule sees work that prints nothing (#36 item 2): CPU time of the engine's process tree (a
compile, an autotune) and its cache growing reset the silence clock; an idle process and a still cache do not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from rigctl.adapters.clock import RealClock
from rigctl.deploy import warmup


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(warmup, "WORK_LOOK_S", 0.5)
    monkeypatch.setattr(warmup, "CACHE_LOOK_S", 0.5)


def _watch_for(pid: int | None, cache: Path | None, seconds: float) -> warmup.WorkWatch:
    watch = warmup.WorkWatch(SimpleNamespace(pid=pid), cache, RealClock())  # type: ignore[arg-type]
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        watch.look(time.monotonic())
        time.sleep(0.1)
    return watch


def test_a_busy_silent_engine_is_working(quick: None) -> None:
    busy = subprocess.Popen([sys.executable, "-c", "import time\nend = time.time() + 4\nwhile time.time() < end: pass"])
    try:
        watch = _watch_for(busy.pid, None, 2.0)
        assert watch.last_work > float("-inf") and watch.what == "CPU time"
    finally:
        busy.kill()
        busy.wait(5)


def test_an_idle_process_is_not(quick: None) -> None:
    idle = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        time.sleep(0.5)  # past the interpreter's own start
        watch = _watch_for(idle.pid, None, 2.0)
        assert watch.last_work == float("-inf"), watch.what
    finally:
        idle.kill()
        idle.wait(5)


def test_a_growing_cache_is_work_and_a_still_one_is_not(quick: None, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    still = _watch_for(None, cache, 1.5)
    assert still.last_work == float("-inf")
    watch = warmup.WorkWatch(SimpleNamespace(pid=None), cache, RealClock())  # type: ignore[arg-type]
    watch.look(time.monotonic())
    (cache / "kernel.bin").write_bytes(b"\0" * 4096)
    time.sleep(0.6)
    assert watch.look(time.monotonic()) > float("-inf") and watch.what == "cache growth"
