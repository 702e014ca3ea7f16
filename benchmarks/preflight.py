"""How long a preflight takes without checksums: the whole `rigctl preflight RECIPE` process (target:
0.25 s median), then inside one process the time to gather the host facts and to run every check.

Prints, for each bundled recipe given (default: glm53-flash, qwen3-8b-vllm): the whole process on this
host (text and --json) and on a replayed inventory, as the median of N runs; then gather, checks and
their total in-process. Usage: python benchmarks/preflight.py [--runs N] [RECIPE...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from processes import header, rigctl, row, time_process

from rigctl.host import gather_facts, load_inventory
from rigctl.preflight import run_preflight
from rigctl.recipe.load import load

FIXTURE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "inventory" / "h200.json"
PROCESS_TARGET_MS = 250.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("recipes", nargs="*", default=["glm53-flash", "qwen3-8b-vllm"])
    args = parser.parse_args()
    exe = rigctl()
    runs = max(args.runs, 15)
    print(header(runs))
    for name in args.recipes:
        variants = (("", []), (" --json", ["--json"]), (" --inventory h200.json", ["--inventory", str(FIXTURE)]))
        for label, extra in variants:
            t = time_process([exe, "preflight", name, *extra], runs)
            note = f"exit {t.returncode}; target <= {PROCESS_TARGET_MS:.0f} ms"
            print(row(f"rigctl preflight {name}{label}", t, note))
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
