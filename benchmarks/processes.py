"""Timing whole rigctl processes: what an operator waits for, start-up and imports included.

Each command runs N times in a fresh process and the median wall time is the figure (the minimum beside
it shows the noise on a shared machine). Children get the environment minus PYTHONDONTWRITEBYTECODE, and
every command runs once before timing: an installed rigctl has its bytecode compiled, so a figure that
includes compiling every module on every run would measure the wrong thing. The CPU time the process
used (user + system, median) is printed too: on a machine shared with other work it moves far less
than wall time does. ``RIGCTL`` names the
executable to time (default: the ``rigctl`` beside this Python); PYTHONPATH=OTHER/src times another tree,
and ``time_alternately`` times two trees turn about (a loaded machine then weighs on both alike).

``bytecode_note`` says whether PYTHONDONTWRITEBYTECODE was set here (it is removed for the children) and
how many of rigctl's modules have current bytecode after the untimed runs: a figure taken while modules
are compiled on every start is a figure of the compiler.
"""

from __future__ import annotations

import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

NAME_WIDTH = 68


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
    return time_alternately(argv, runs, [None], env)[0]


def _run_once(argv: Sequence[str], environment: Mapping[str, str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment, check=False)
    wall = (time.perf_counter() - start) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime) * 1000


def time_alternately(argv: Sequence[str], runs: int, trees: Sequence[str | None],
                     env: Mapping[str, str] | None = None) -> list[Timing]:
    """``argv`` with each tree's sources first on PYTHONPATH (None: the installed rigctl), the trees
    taking turns run after run, after one untimed run each. One Timing per tree, in order."""
    environments = [child_env({**(env or {}), **({"PYTHONPATH": tree} if tree else {})}) for tree in trees]
    firsts = [subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=e, check=False)
              for e in environments]
    samples: list[list[tuple[float, float]]] = [[] for _ in trees]
    for _ in range(runs):
        for i, environment in enumerate(environments):
            samples[i].append(_run_once(argv, environment))
    return [Timing(statistics.median(w for w, _ in s), min(w for w, _ in s), statistics.median(c for _, c in s),
                   first.returncode) for s, first in zip(samples, firsts, strict=True)]


def bytecode_note(source: Path | None = None) -> str:
    """Whether PYTHONDONTWRITEBYTECODE is set here, and how many rigctl modules have bytecode matching
    their source (the pyc's recorded mtime and size), to be called after the untimed runs."""
    if source is None:
        spec = importlib.util.find_spec("rigctl")
        origin = spec.origin if spec is not None else None
        if origin is None:
            raise SystemExit("rigctl is not importable here")
        source = Path(origin).parent
    modules = sorted(source.rglob("*.py"))
    current = 0
    for module in modules:
        cached = Path(importlib.util.cache_from_source(str(module)))
        try:
            head = cached.read_bytes()[:16]
        except OSError:
            continue
        st = module.stat()
        flags = int.from_bytes(head[4:8], "little")
        stamp, size = int.from_bytes(head[8:12], "little"), int.from_bytes(head[12:16], "little")
        if flags & 1 or (stamp == int(st.st_mtime) & 0xFFFFFFFF and size == st.st_size & 0xFFFFFFFF):
            current += 1  # a hash-based pyc (flags bit 0) is checked by content: count it as cached
    setting = os.environ.get("PYTHONDONTWRITEBYTECODE")
    said = f"set to {setting!r} here, removed for the timed commands" if setting is not None else "not set"
    return (f"PYTHONDONTWRITEBYTECODE {said}; bytecode current for {current} of {len(modules)} modules in {source} "
            "(a module no timed command loads is compiled when first used)")


def header(runs: int) -> str:
    return (f"{'command':<{NAME_WIDTH}} {'median ms':>10} {'min ms':>8} {'cpu ms':>8}   "
            f"({runs} runs each, {os.cpu_count()} cores)")


def row(name: str, t: Timing, note: str = "") -> str:
    return f"{name:<{NAME_WIDTH}} {t.median_ms:>10.1f} {t.min_ms:>8.1f} {t.cpu_ms:>8.1f}   {note}".rstrip()
