"""Timing whole rigctl processes: what an operator waits for, start-up and imports included.

Each command runs N times in a fresh process and the median wall time is the figure (the minimum beside
it shows the noise on a shared machine). Children get the environment minus PYTHONDONTWRITEBYTECODE, and
every command runs once before timing: an installed rigctl has its bytecode compiled, so a figure that
includes compiling every module on every run would measure the wrong thing. The CPU time the process
used (user + system, median) is printed too: on a machine shared with other work it moves far less
than wall time does. ``RIGCTL`` names the
executable to time (default: the ``rigctl`` beside this Python); PYTHONPATH=OTHER/src times another tree.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Timing:
    median_ms: float
    min_ms: float
    cpu_ms: float
    returncode: int


def rigctl() -> str:
    return os.environ.get("RIGCTL") or shutil.which("rigctl", path=os.path.dirname(sys.executable)) or "rigctl"


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(extra or {})
    return env


def time_process(argv: Sequence[str], runs: int, env: Mapping[str, str] | None = None) -> Timing:
    """Median and minimum wall time of ``argv`` over ``runs`` runs, after one untimed run."""
    environment = child_env(env)
    first = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment, check=False)
    times, cpu = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment, check=False)
        times.append((time.perf_counter() - start) * 1000)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append((after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000)
    return Timing(statistics.median(times), min(times), statistics.median(cpu), first.returncode)


def header(runs: int) -> str:
    return (f"{'command':<50} {'median ms':>10} {'min ms':>8} {'cpu ms':>8}   "
            f"({runs} runs each, {os.cpu_count()} cores)")


def row(name: str, t: Timing, note: str = "") -> str:
    return f"{name:<50} {t.median_ms:>10.1f} {t.min_ms:>8.1f} {t.cpu_ms:>8.1f}   {note}".rstrip()
