"""Start-up time of the CLI: median wall time of `rigctl --help` and `rigctl recipes` beside
`python -c pass`, over N runs each. Target: under 150 ms median on the 2-core dev/CI machine.

    uv run python benchmarks/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def median_ms(argv: list[str], runs: int) -> tuple[float, float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    rigctl = shutil.which("rigctl", path=os.path.dirname(sys.executable)) or "rigctl"
    cases = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "rigctl --help": [rigctl, "--help"],
        "rigctl recipes": [rigctl, "recipes"],
        "rigctl recipes --json": [rigctl, "recipes", "--json"],
    }
    for argv in cases.values():  # warm the page cache and the bytecode cache once
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    print(f"{'command':<24} {'median ms':>10} {'min ms':>8}   ({args.runs} runs, {os.cpu_count()} cores)")
    for name, argv in cases.items():
        med, low = median_ms(argv, args.runs)
        print(f"{name:<24} {med:>10.1f} {low:>8.1f}")


if __name__ == "__main__":
    main()
