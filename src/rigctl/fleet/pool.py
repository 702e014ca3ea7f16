"""Commands on several hosts over ssh: ``fleet status|doctor|preflight|swap``, one room each
(``host_status``, ``host_doctor``, ``host_rigctl``), run here in a bounded pool.

The remote side needs nothing of ours: ``status`` reads podman, systemctl and nvidia-smi; ``doctor``
runs the remote ``rigctl doctor --json`` when rigctl is installed there, and otherwise ships the unit
files of the system's and the login's own directories (never another user's home), CDI specs and driver
version back (one ssh call, files separated by a random boundary) and audits them here with the same
core. ``doctor --fix`` rewrites units only through the remote rigctl (its own rules: managed units, all
or none, backups kept); without one it changes nothing on the host and only proposes patches.
``preflight`` and ``swap`` need rigctl on the host.

Hosts run in a bounded thread pool, one result per host, in inventory order. A host that cannot be
reached, times out, or answers nonsense becomes a result with ``reachable``/``error`` set; it never
stops or hides the others.

What a host answers is hostile input: ssh.capture bounds and decodes it, ``parse_answer`` (answer.py)
is the one place a remote rigctl's answer is judged (exactly one JSON envelope whose ``ok`` agrees with
the exit status), remote findings are checked one by one (doctor_answer.py: a malformed one becomes a
failing finding of its own), and ``shown`` (visible.py) makes terminal control sequences in remote text
visible before a person sees it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict

from rigctl.errors import UsageError
from rigctl.fleet.answer import ANSWER_DEPTH, answer_problem
from rigctl.fleet.host_doctor import host_doctor
from rigctl.fleet.host_rigctl import host_rigctl
from rigctl.fleet.host_status import host_status
from rigctl.fleet.inventory import Host
from rigctl.fleet.result import FleetResult, HostResult
from rigctl.fleet.ssh import OpenSsh, Transport
from rigctl.fleet.visible import shown_line

COMMANDS = ("status", "doctor", "preflight", "swap")
# what each remote-rigctl command needs after its name
_ARGS_NEEDED = {"preflight": ("RECIPE",), "swap": ("FROM", "TO")}


RESULT_DEPTH = ANSWER_DEPTH + 8  # a host's result: its answer, and the few levels HostResult adds around it


def _reportable(result: HostResult) -> HostResult:
    """``result``, or when it is past what can be reported (too deep or large, a number JSON cannot carry;
    checked without recursing) a failure of that host saying so: never the loss of the others' results."""
    try:
        problem = answer_problem(asdict(result), depth=RESULT_DEPTH)
    except RecursionError:
        problem = f"it is nested more than {RESULT_DEPTH} deep"
    if problem is None:
        return result
    return HostResult(result.name, result.destination, reachable=result.reachable, via=result.via,
                      error=f"{result.name}'s result cannot be reported: {problem}")


def run_fleet(command: str, hosts: Sequence[Host], *, parallel: int = 16, timeout: float = 60.0,
              extra: Sequence[str] = (), transport: Transport | None = None, fix: bool = False,
              allow_ssh_options: bool = False) -> FleetResult:
    if command not in COMMANDS:
        raise UsageError(f"unknown fleet command {command!r}; one of {', '.join(COMMANDS)}")
    if fix and command != "doctor":
        raise UsageError(f"--fix goes with fleet doctor, not fleet {command}")
    needed = _ARGS_NEEDED.get(command, ())
    if len(extra) < len(needed):
        raise UsageError(f"fleet {command} needs {' '.join(needed)}")
    ssh = transport or OpenSsh.default(allow_options=allow_ssh_options)
    job: Callable[[Host], HostResult]
    if command == "status":
        def job(h: Host) -> HostResult:
            return host_status(h, ssh, timeout)
    elif command == "doctor":
        def job(h: Host) -> HostResult:
            return host_doctor(h, ssh, timeout, fix=fix)
    else:
        def job(h: Host) -> HostResult:
            return host_rigctl(h, ssh, timeout, [command, *extra])

    def guarded(host: Host) -> HostResult:
        start = time.monotonic()
        try:
            result = job(host)
        except Exception as exc:  # one host's surprise must not hide the others; report it on that host
            result = HostResult(host.name, host.destination, error=f"{type(exc).__name__}: {shown_line(exc, 300)}")
        result = _reportable(result)
        result.elapsed_s = round(time.monotonic() - start, 3)  # as the JSON shows it
        return result

    start = time.monotonic()
    if not hosts:
        return FleetResult(command, [], 0.0)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        results = list(pool.map(guarded, hosts))
    return FleetResult(command, results, time.monotonic() - start)
