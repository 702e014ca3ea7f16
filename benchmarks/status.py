"""`rigctl status` with nothing deployed, as a whole process (target: 0.2 s median).

The state and config directories point at an empty temporary directory, so there are no units and no
records: the figure is what the command costs before it has anything to ask systemd or podman about.

    uv run python benchmarks/status.py [--runs 30]
"""

from __future__ import annotations

import argparse
import tempfile

from processes import header, rigctl, row, time_process

TARGET_MS = 200.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    exe = rigctl()
    with tempfile.TemporaryDirectory() as empty:
        env = {"XDG_STATE_HOME": f"{empty}/state", "XDG_CONFIG_HOME": f"{empty}/config",
               "XDG_RUNTIME_DIR": f"{empty}/run"}
        print(header(args.runs))
        for name, argv in (("rigctl status", [exe, "status"]), ("rigctl status --json", [exe, "status", "--json"])):
            t = time_process(argv, args.runs, env)
            print(row(name, t, f"exit {t.returncode}; target <= {TARGET_MS:.0f} ms"))


if __name__ == "__main__":
    main()
