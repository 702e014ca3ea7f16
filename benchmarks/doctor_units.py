"""`rigctl doctor --path DIR` over many serving units, beside quadlet's own generator on the same directory.

Builds DIR with N small quadlet units (vLLM-like, each with a drop-in of its own), then times, as whole
processes: `rigctl doctor --path DIR --json`, `rigctl doctor --path DIR --fix --json` over the same units
with one fixable key each (`Restart=on-failure`: every unit file rewritten; the directory is built again
before each round, untimed) and `QUADLET_UNIT_DIRS=DIR quadlet -dryrun` (when the generator is found). It
prints the median seconds per size and the cost per unit beyond the smallest size: (t(N) - t(N0)) / (N - N0).
The issue's target is at most 1.5 ms per unit more at 400 units than at 4. No pass/fail: figures only.

    uv run python benchmarks/doctor_units.py [--sizes 4,100,400] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PIN = "docker.io/vllm/vllm-openai@sha256:" + "0" * 64
UNIT = """[Unit]
Description=vLLM {i}

[Container]
Image={pin}
ContainerName=vllm-{i}
Exec=--model /models/m --port {port}
PublishPort=127.0.0.1:{port}:{port}
Label=rigctl.managed=true

[Service]
Restart=always
"""
DROPIN = "[Container]\nEnvironment=VLLM_LOGGING_LEVEL=INFO\n"
QUADLETS = ("/usr/libexec/podman/quadlet", "/run/systemd/user-generators/podman-user-generator")


def build(where: Path, count: int, *, fixable: bool = False) -> Path:
    units = where / f"units-{count}{'-fix' if fixable else ''}"
    if units.exists():
        shutil.rmtree(units)
    units.mkdir()
    for i in range(count):
        text = UNIT.format(i=i, pin=PIN, port=20000 + i)
        if fixable:
            text = text.replace("Restart=always", "Restart=on-failure")
        (units / f"vllm-{i}.container").write_text(text)
        (units / f"vllm-{i}.container.d").mkdir()
        (units / f"vllm-{i}.container.d" / "10-log.conf").write_text(DROPIN)
    return units


def timed(argv: list[str], env: dict[str, str], rounds: int, prepare: Callable[[], object] | None = None) -> float:
    runs = []
    for _ in range(rounds):
        if prepare is not None:
            prepare()
        start = time.perf_counter()
        subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False, timeout=600)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="4,100,400")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    quadlet = next((q for q in QUADLETS if os.access(q, os.X_OK)), shutil.which("quadlet"))
    with tempfile.TemporaryDirectory() as tmp:
        base = {**os.environ, "HOME": tmp}
        rows = []
        for n in sizes:
            units = build(Path(tmp), n)
            doctor = timed([sys.executable, "-m", "rigctl", "doctor", "--path", str(units), "--json"], base,
                           args.rounds)
            gen = timed([quadlet, "-dryrun", "-user"], {**base, "QUADLET_UNIT_DIRS": str(units)}, args.rounds) \
                if quadlet else float("nan")
            fixed = build(Path(tmp), n, fixable=True)
            fix = timed([sys.executable, "-m", "rigctl", "doctor", "--path", str(fixed), "--fix", "--json"], base,
                        args.rounds, prepare=lambda n=n: build(Path(tmp), n, fixable=True))
            rows.append((n, doctor, gen, fix))
        n0, d0, g0, f0 = rows[0]
        print(f"{'units':>6} {'doctor s':>9} {'quadlet s':>10} {'doctor ms/unit over N0':>23} {'quadlet ms/unit':>16}"
              f" {'--fix s':>8} {'--fix ms/unit over N0':>22}")
        for n, d, g, f in rows:
            per = (d - d0) / (n - n0) * 1000 if n != n0 else 0.0
            gper = (g - g0) / (n - n0) * 1000 if n != n0 and quadlet else 0.0
            fper = (f - f0) / (n - n0) * 1000 if n != n0 else 0.0
            print(f"{n:>6} {d:>9.3f} {g:>10.3f} {per:>23.2f} {gper:>16.2f} {f:>8.3f} {fper:>22.2f}")


if __name__ == "__main__":
    main()
