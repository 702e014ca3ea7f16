"""Start-up time of the CLI as whole processes: `rigctl --help` against a bare `python -c pass` (target:
at most 6x), and `rigctl recipes` for a command that loads recipes.

    uv run python benchmarks/startup.py [--runs 30]
"""

from __future__ import annotations

import argparse
import sys

from processes import header, rigctl, row, time_process

HELP_TARGET = 6.0  # --help may cost this many bare interpreter start-ups


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    exe = rigctl()
    bare = time_process([sys.executable, "-c", "pass"], args.runs)
    print(header(args.runs))
    print(row("python -c pass", bare))
    for name, argv in (("rigctl --help", [exe, "--help"]), ("rigctl", [exe]), ("rigctl preflight --help",
                       [exe, "preflight", "--help"]), ("rigctl recipes", [exe, "recipes"]),
                       ("rigctl recipes --json", [exe, "recipes", "--json"])):
        t = time_process(argv, args.runs)
        ratio = t.median_ms / bare.median_ms
        note = f"{ratio:.1f}x bare python" + (f" (target <= {HELP_TARGET:g}x)" if name == "rigctl --help" else "")
        print(row(name, t, note))


if __name__ == "__main__":
    main()
