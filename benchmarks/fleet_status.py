"""`fleet status` over 16 hosts against one host: the fan-out must cost at most 1.5x a single host.

Starts real sshd instances on 127.0.0.1 (root, openssh-server installed: .ci/sshd-hosts.sh), runs
`run_fleet("status", ...)` over 1 host and over 16 hosts, cold (new ssh connections: handshake and
key exchange for every host) and warm (shared connections already up, as on a second call within
ControlPersist), and prints the figures. All "hosts" share this machine's CPUs, so the remote work
(podman ps on each) competes here in a way it would not across real boxes: the warm figure is the one
that measures rigctl's own fan-out. `--transport-only` gives the sessions a PATH without podman,
systemctl or nvidia-smi, so the remote side does next to nothing and only ssh + rigctl are timed;
`--remote-latency S` adds a stand-in podman that waits S seconds (a remote box's own time, spent
there, not on our CPUs), which shows whether hosts really overlap.

    uv run python benchmarks/fleet_status.py [--hosts 16] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
TARGET = 1.5


def _helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("sshd_hosts", REPO / "tests" / "fleet" / "sshd_hosts.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["sshd_hosts"] = module
    spec.loader.exec_module(module)
    return module


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--transport-only", action="store_true", help="remote PATH without podman/systemctl")
    parser.add_argument("--remote-latency", type=float, default=0.0, metavar="S",
                        help="with --transport-only: a stand-in podman that takes S seconds of wall time and "
                             "no CPU, like podman on a real remote box")
    args = parser.parse_args()

    from rigctl.fleet.loader import load_inventory
    from rigctl.fleet.pool import run_fleet
    from rigctl.fleet.ssh import OpenSsh

    sshd = _helpers()
    ok, why = sshd.sshd_available()
    if not ok:
        print(f"fleet_status: cannot run: {why}")
        return 2
    root = Path(tempfile.mkdtemp(prefix="rfb-", dir="/tmp"))
    bare = root / "bin"
    bare.mkdir()
    for tool in ("sh", "hostname", "uname", "grep", "sed", "cat", "echo", "sleep"):
        for d in ("/usr/bin", "/bin"):
            if Path(d, tool).exists():
                os.symlink(Path(d, tool), bare / tool)
                break
    if args.remote_latency > 0:
        fake = bare / "podman"
        fake.write_text(f"#!/bin/sh\nsleep {args.remote_latency}\necho '[]'\n")
        fake.chmod(0o755)
    env = f"PATH={bare}" if args.transport_only else ""
    fleet = sshd.start_fleet(root / "hosts", args.hosts, session_env=env)
    os.environ["XDG_RUNTIME_DIR"] = str(root)
    try:
        every = load_inventory(fleet.inventory(include_down=False)).select()
        single = every[:1]

        def timed(hosts: list, fresh: bool) -> float:  # type: ignore[type-arg]
            ssh = OpenSsh.default()
            if fresh:
                ssh.close_all()
            start = time.perf_counter()
            result = run_fleet("status", hosts, parallel=16, timeout=60, transport=ssh)
            elapsed = time.perf_counter() - start
            if not result.ok:
                raise SystemExit(f"fleet status failed: {[h.error for h in result.hosts if not h.ok]}")
            return elapsed

        figures: dict[str, dict[str, float]] = {}
        for mode, fresh in (("cold", True), ("warm", False)):
            if not fresh:
                timed(every, fresh=False)  # bring every shared connection up once
            one = [timed(single, fresh) for _ in range(args.rounds)]
            many = [timed(every, fresh) for _ in range(args.rounds)]
            figures[mode] = {"one": statistics.median(one), "many": statistics.median(many)}
        OpenSsh.default().close_all()
    finally:
        sshd.stop_fleet(fleet)

    what = "full (podman ps on every host)"
    if args.transport_only:
        what = "transport only" + (
            f", remote podman takes {args.remote_latency}s wall" if args.remote_latency else " (no podman on the hosts)"
        )
    print(f"fleet status, {what}; median of {args.rounds} rounds; {os.cpu_count()} CPU(s) shared by every host")
    print(f"{'mode':<6} {'1 host':>9} {f'{args.hosts} hosts':>9} {'ratio':>7}  target <= {TARGET}x")
    verdict = 0
    for mode, f in figures.items():
        ratio = f["many"] / f["one"]
        print(f"{mode:<6} {f['one']:>8.3f}s {f['many']:>8.3f}s {ratio:>6.2f}x  {'ok' if ratio <= TARGET else 'over'}")
        if mode == "warm" and ratio > TARGET:
            verdict = 1
    return verdict


if __name__ == "__main__":
    raise SystemExit(main())
