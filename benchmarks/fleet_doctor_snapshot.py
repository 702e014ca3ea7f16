"""`fleet doctor` on a host without rigctl: the local CPU spent on the unit files such a host ships back.

Builds a home with N small quadlet units (each with a drop-in, so both kinds of lookup are exercised),
runs the real snapshot script once in a local `sh` (the ssh hop left out), then replays that answer to
``host_doctor`` and times what rigctl does here with it: splitting, collecting units and drop-ins,
auditing. It prints seconds per N, and the ratio between successive sizes (about 2 when the work grows
linearly, about 4 when it grows with the square). No pass/fail: figures only.

    uv run python benchmarks/fleet_doctor_snapshot.py [--sizes 500,1000,2000,4000] [--rounds 1]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PIN = "docker.io/x/y@sha256:" + "0" * 64


def _home(where: Path, count: int) -> Path:
    units = where / ".config/containers/systemd"
    units.mkdir(parents=True)
    for i in range(count // 2):  # half units, half drop-ins: `count` files shipped
        (units / f"u{i}.container").write_text(f"[Container]\nImage={PIN}\n[Service]\nRestart=always\n")
        (units / f"u{i}.container.d").mkdir()
        (units / f"u{i}.container.d" / "10-x.conf").write_text("[Container]\nEnvironment=A=b\n")
    return where


class Shell:
    """The snapshot script run in a local `sh` with HOME at the built home: what the host would answer."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.answers: list[Any] = []

    def run(self, host: Any, command: str, *, timeout: float) -> Any:
        from rigctl.util.proc import Completed

        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin"}
        done = subprocess.run(["sh", "-c", command], capture_output=True, env=env, check=False, timeout=600)
        self.answers.append(Completed(("sh",), done.returncode, done.stdout.decode(errors="replace"),
                                      done.stderr.decode(errors="replace")))
        return self.answers[-1]


class Replay:
    """That answer again, with the boundary of each new run, so only rigctl's own work is timed."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.boundary = answer.stdout.split(" ", 1)[0]

    def run(self, host: Any, command: str, *, timeout: float) -> Any:
        from rigctl.util.proc import Completed

        boundary = command.split("'", 2)[1].split(" ", 1)[0]  # this run's random boundary
        return Completed(("sh",), self.answer.rc, self.answer.stdout.replace(self.boundary, boundary),
                         self.answer.stderr)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="500,1000,2000,4000")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()

    from rigctl.fleet.host_doctor import host_doctor
    from rigctl.fleet.inventory import Host

    host = Host(name="box", ssh="box", rigctl="rigctl-not-installed-here")
    previous = None
    for size in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            shell = Shell(_home(Path(tmp), size))
            host_doctor(host, shell, timeout=600)  # once for real, to capture the answer
            answer = shell.answers[0]
            times = []
            for _ in range(args.rounds):
                start = time.perf_counter()
                result = host_doctor(host, Replay(answer), timeout=600)
                times.append(time.perf_counter() - start)
            best = min(times)
            units = len(result.data.get("units") or [])
            ratio = f"  x{best / previous:.1f} for x2 files" if previous else ""
            print(f"{size:>6} files, {len(answer.stdout.encode()) / 1000:>8.0f} KB answer, {units:>5} units: "
                  f"{best:8.2f} s local CPU{ratio}  ({result.error or 'ok'})")
            previous = best
    return 0


if __name__ == "__main__":
    sys.exit(main())
