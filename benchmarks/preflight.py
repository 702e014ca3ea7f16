"""How long a preflight takes without checksums: the whole `rigctl preflight RECIPE` process (target:
0.25 s median), then inside one process the time to gather the host facts and to run every check.

Prints whether PYTHONDONTWRITEBYTECODE was set and whether rigctl's bytecode is cached; then, for each
bundled recipe given (default: glm53-flash, qwen3-8b-vllm), the whole process on this host (text and
--json) and on a replayed inventory, as the median of N runs; then gather, checks and their total
in-process.

``--before TREE`` times a second checkout too (e.g. ``git worktree add /tmp/before HEAD``), the two
taking turns run after run, so that a machine busy with other work weighs on both alike. ``--context``
adds `python -c pass`, the libraries a preflight imports (its floor), `rigctl --help` and `rigctl status
--json` (nothing deployed) to the table.

    uv run python benchmarks/preflight.py [--runs N] [--before TREE] [--context] [RECIPE...]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from processes import Timing, bytecode_note, header, rigctl, row, time_alternately

from rigctl.host.gather import gather_facts, load_inventory
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.load import load

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "inventory" / "h200.json"
PROCESS_TARGET_MS = 250.0
STATUS_TARGET_MS = 200.0
HELP_TARGET = 6.0  # --help may cost this many bare interpreter start-ups
# What a preflight cannot go below with its libraries: the interpreter, typer, pydantic with one model
# validated (its schema machinery loads on the first), PyYAML, and pynvml where the NVML library loads.
LIBRARIES = """
import ctypes, typer, yaml
from pydantic import BaseModel
class M(BaseModel):
    a: int
M(a=1)
try:
    ctypes.CDLL("libnvidia-ml.so.1")
except OSError:
    pass
else:
    import pynvml
"""


def commands(exe: str, recipes: list[str], context: bool, empty: str) -> list[tuple[str, list[str], dict[str, str],
                                                                                 str]]:
    """(name, argv, extra environment, target note) of every command to time."""
    out: list[tuple[str, list[str], dict[str, str], str]] = []
    if context:
        nothing = {"XDG_STATE_HOME": f"{empty}/state", "XDG_CONFIG_HOME": f"{empty}/config",
                   "XDG_RUNTIME_DIR": f"{empty}/run"}
        out += [("python -c pass", [sys.executable, "-c", "pass"], {}, ""),
                ("libraries alone (typer, pydantic, yaml, pynvml)", [sys.executable, "-c", LIBRARIES], {},
                 "the floor under a preflight"),
                ("rigctl --help", [exe, "--help"], {}, f"target <= {HELP_TARGET:g}x python -c pass"),
                ("rigctl status --json (nothing deployed)", [exe, "status", "--json"], nothing,
                 f"target <= {STATUS_TARGET_MS:.0f} ms")]
    for name in recipes:
        for label, extra in (("", []), (" --json", ["--json"]),
                             (" --inventory h200.json --json", ["--inventory", str(FIXTURE), "--json"])):
            out.append((f"rigctl preflight {name}{label}", [exe, "preflight", name, *extra], {},
                        f"target <= {PROCESS_TARGET_MS:.0f} ms"))
    return out


def note(t: Timing, target: str, bare: Timing | None) -> str:
    if bare is not None and target.endswith("python -c pass"):
        return f"exit {t.returncode}; {t.median_ms / bare.median_ms:.1f}x python -c pass; {target}"
    return f"exit {t.returncode}; {target}".rstrip("; ")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--before", metavar="TREE", help="a checkout to time turn about with this one")
    parser.add_argument("--context", action="store_true",
                        help="also python -c pass, the libraries alone, --help and status")
    parser.add_argument("recipes", nargs="*", default=["glm53-flash", "qwen3-8b-vllm"])
    args = parser.parse_args()
    exe = rigctl()
    runs = max(args.runs, 15)
    trees = [str(Path(args.before).resolve() / "src"), None] if args.before else [None]
    with tempfile.TemporaryDirectory() as empty:
        timed = [(name, target, time_alternately(argv, runs, trees, env))
                 for name, argv, env, target in commands(exe, args.recipes, args.context, empty)]
    print(bytecode_note())
    if args.before:
        print(bytecode_note(Path(trees[0] or "") / "rigctl"))
    print(header(runs) + ("; before (--before TREE) and after, taking turns" if args.before else ""))
    bare = {i: t for name, _, ts in timed if name == "python -c pass" for i, t in enumerate(ts)}
    for name, target, ts in timed:
        if args.before:
            print(row(f"{name} [before]", ts[0], note(ts[0], target, bare.get(0))))
            print(row(f"{name} [after]", ts[1], note(ts[1], target, bare.get(1))))
        else:
            print(row(name, ts[0], note(ts[0], target, bare.get(0))))
    print("in one process:")
    for name in args.recipes:
        recipe = load(name).recipe
        gathers, checks, totals = [], [], []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            facts = gather_facts([recipe.checkpoint.path])
            t1 = time.perf_counter()
            run_preflight(recipe, facts)
            t2 = time.perf_counter()
            gathers.append(t1 - t0)
            checks.append(t2 - t1)
            totals.append(t2 - t0)
        print(f"{name}: gather {statistics.median(gathers) * 1000:.0f} ms, checks "
              f"{statistics.median(checks) * 1000:.1f} ms, total median {statistics.median(totals) * 1000:.0f} ms, "
              f"max {max(totals) * 1000:.0f} ms over {args.runs} runs (target < 500 ms)")
        if FIXTURE.exists():
            t0 = time.perf_counter()
            run_preflight(recipe, load_inventory(FIXTURE))
            print(f"{name}: replay of {FIXTURE.name}: {(time.perf_counter() - t0) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
