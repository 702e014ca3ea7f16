"""``fleet preflight`` and ``fleet swap`` on one host: the host's own rigctl runs the command; its answer
becomes the host's result, and an ok over failing checks is not believed."""

from __future__ import annotations

from collections.abc import Sequence

from rigctl.errors import HostUnreachableError, RigctlError
from rigctl.fleet.answer import note_version, run_remote_rigctl
from rigctl.fleet.inventory import Host
from rigctl.fleet.result import HostResult
from rigctl.fleet.ssh import Transport
from rigctl.fleet.visible import brief, shown_line
from rigctl.severity import Severity

_SEVERITIES = {s.value: s for s in Severity}


def _mark(item: object) -> str | None:
    """How one remote check or finding counts: None when its severity is one rigctl knows to pass quietly,
    WARN when it warns, else a failing mark: a failing severity, and one rigctl does not know (or none,
    or not a check at all), since a host must not pass by naming its failure in a word of its own."""
    said = item.get("severity") if isinstance(item, dict) else None
    severity = _SEVERITIES.get(said) if isinstance(said, str) else None
    if severity is None:
        return f"FAIL (severity {brief(said)} is not one rigctl knows)"
    if severity.failing:
        return severity.value.upper()
    return "WARN" if severity is Severity.WARN else None


def host_rigctl(host: Host, ssh: Transport, timeout: float, argv: Sequence[str]) -> HostResult:
    """``rigctl ARGV --json`` on the host (needs rigctl installed there): its document, failed or warned
    findings/checks and swap steps as summary lines."""
    label = " ".join(argv)
    result = HostResult(host.name, host.destination, via="rigctl")
    try:
        # "--": a recipe name is never read as an option by the remote rigctl, whatever it starts with
        remote = run_remote_rigctl(host, [argv[0], "--json", "--", *argv[1:]], transport=ssh, timeout=timeout)
    except RigctlError as err:
        result.reachable = not isinstance(err, HostUnreachableError)
        result.error = err.message
        return result
    if remote.document is not None:
        result.data = remote.document  # kept even when it cannot be used: it shows what the host said
    if remote.problem is not None or remote.document is None:
        result.error = remote.failure(host, label)
        return result
    note_version(result, remote.document)
    error = remote.document.get("error")
    if isinstance(error, dict):
        result.error = shown_line(error.get("message"))
    failing = 0
    for key in ("findings", "checks"):
        items = remote.document.get(key)
        if isinstance(items, list):
            for item in items:
                mark = _mark(item)
                if mark is None:
                    continue
                failing += mark != "WARN"
                got = item if isinstance(item, dict) else {"message": item}
                what = f"{shown_line(got.get('id'), 200)}: {shown_line(got.get('message', ''))}"
                result.summary.append(f"{mark} {what}")
    steps = remote.document.get("steps")
    if isinstance(steps, list):
        for step in steps:
            if isinstance(step, dict):
                mark = "ok  " if step.get("ok") is True else "FAIL"  # a swap's history: not its verdict
                said = f"{shown_line(step.get('step'), 200)}: {shown_line(step.get('message', ''))}"
                result.summary.append(f"{mark} {said}")
    # rigctl decides from what the answer lists: an ok:true over failing checks is not believed
    result.ok = remote.ok and failing == 0 and not isinstance(error, dict)
    if remote.ok and not result.ok:
        result.summary.append(f"FAIL {host.name} answered ok but lists {failing} failing check(s)"
                              + (" and an error" if isinstance(error, dict) else "") + ": counted as failed")
    outcome = remote.document.get("outcome")
    verdict = shown_line(outcome, 100) if isinstance(outcome, str) else ("ok" if result.ok else "FAILED")
    result.summary.insert(0, f"{label}: {verdict} (exit {remote.rc})")
    return result
