"""What `doctor` and `fleet ...` print: findings grouped by unit, what --fix did, one block per host.

Their text comes from unit files and other hosts: every line goes through ``shown`` (fleet.remote), so no
control sequence in it reaches the terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.output import note
from rigctl.cli.views.draw import View
from rigctl.severity import Severity

if TYPE_CHECKING:
    from rigctl.doctor.checkup import AppliedFix, DoctorReport
    from rigctl.doctor.unit_findings import UnitFinding
    from rigctl.fleet.remote import FleetResult

MARK: dict[Severity, str] = {Severity.FAIL: "FAIL", Severity.WARN: "WARN", Severity.INFO: "info"}


def _findings(out: TextIO, findings: Sequence[UnitFinding], indent: str = "", *, source: str | None = None) -> None:
    """Findings grouped by unit. ``source``: the host whose answer they are (fleet): each of their values
    on one line of its own, escaped and capped, and its advice labelled as that host's (``fix (from
    h2):``), never printed as rigctl's own."""
    from rigctl.fleet.remote import one_line, shown

    def line(text: object) -> str:
        return shown(str(text)) if source is None else one_line(text)

    fix_label = "fix" if source is None else f"fix (from {source})"
    by_unit: dict[str, list[UnitFinding]] = {}
    for f in findings:
        by_unit.setdefault(f.unit, []).append(f)
    for unit, items in by_unit.items():
        out.write(f"{indent}{line(unit)}\n")
        for f in items:
            where = ""
            if f.line:
                where = f"  ({'' if f.where in (None, unit) else line(f.where) + ':'}line {f.line})"
            out.write(f"{indent}  {MARK.get(f.severity, f.severity.value)} {line(f.id)}{where}\n")
            out.write(f"{indent}       {line(f.message)}\n")
            out.write(f"{indent}       {fix_label}: {line(f.fix)}\n")


def doctor(report: DoctorReport) -> View:
    from rigctl.fleet.remote import shown

    def view(out: TextIO) -> None:
        counts = report.counts()
        driver = report.facts.driver_version or "none seen (CDI checks skipped)"
        out.write(f"rigctl doctor: {len(report.units)} serving unit(s); driver {driver}; "
                  f"{counts['fail']} fail, {counts['warn']} warn\n")
        if not report.units:
            out.write(f"  no serving units under: {', '.join(report.roots)}\n")
        for skip in report.skipped:
            out.write(f"  not read: {skip.path}: {skip.reason}\n")
        for c in report.canaries:
            lost = "" if c["deployed"] else " (no deployment record: `rigctl canary NAME --off` removes it)"
            out.write(shown(f"  canary of {c['deployment']} ({c['scope']}): {c['timer']}{lost}\n"))
        _findings(out, report.findings)
        if not report.fix_requested:
            if any(f.autofix for f in report.findings):
                out.write("\n`rigctl doctor --fix` rewrites rigctl-managed units and prints a patch for the others.\n")
            return
        if report.fix_error:
            out.write(f"\n--fix changed nothing (all fixes or none): {report.fix_error}\n")
        for applied in report.applied:
            out.write(f"\nfixed {applied.unit} ({', '.join(applied.fixed)}); backup: {', '.join(applied.backups)}\n")
            out.write(applied.patch)
            _live(out, applied)
        for patch in report.patches:
            why = report.refused.get(patch.unit.path, "not applied")
            out.write(f"\nleft untouched: {patch.unit.path} ({why}); proposed patch ({', '.join(patch.fixed)}):\n")
            out.write(patch.patch())
        remaining = [f for f in report.final if f.fails]
        out.write(f"\nafter --fix: {len(remaining)} failing finding(s) remain\n")

    return view


def _live(out: TextIO, applied: AppliedFix) -> None:
    """Whether the fix runs: the manager reloaded, what it holds now, and what to paste where it is not."""
    from rigctl.fleet.remote import shown

    systemctl = "systemctl --user" if applied.scope == "user" else "systemctl"
    if applied.reloaded:
        held = " ".join(f"{k}={v}" for k, v in applied.live.items())
        out.write(f"reloaded the {applied.scope} manager (`{systemctl} daemon-reload`); "
                  f"{applied.service} now holds: {shown(held)}\n")
    if applied.in_effect is True and not applied.next_steps:
        out.write("in effect" + ("; restart queued (--restart)" if applied.restarted else "") + "\n")
    elif applied.problem:
        head = "NOT in effect" if applied.in_effect is False else "not yet in effect"
        out.write(f"{head}: {shown(applied.problem)}\n")
    for step in applied.next_steps:
        out.write(f"  run: {step}\n")


def inventory_lines(about: dict[str, Any]) -> list[str]:
    """Which file was read, as what, how many of its hosts were chosen, and what of it rigctl ignores."""
    limit = f", --limit {about['limit']}" if about["limit"] else ""
    head = f"inventory: {about['path']} ({about['kind']}; {about['chosen']} of {about['hosts']} host(s){limit})"
    return [head, *(f"warning: {w}" for w in about["warnings"])]


def inventory_notes(command: str, about: dict[str, Any]) -> None:
    """With --json, where stdout holds the one JSON object: the inventory lines on stderr."""
    from rigctl.fleet.remote import shown

    for inventory_line in inventory_lines(about):
        note(shown(f"rigctl fleet {command}: {inventory_line}\n"))


def fleet(result: FleetResult, about: dict[str, Any] | None = None) -> View:
    def view(out: TextIO) -> None:
        from rigctl.doctor.unit_findings import UnitFinding
        from rigctl.fleet.remote import fix_lines, one_line  # every line below may hold what a host answered

        for inventory_line in inventory_lines(about) if about else []:
            out.write(f"{'  ' if inventory_line.startswith('warning:') else ''}{one_line(inventory_line)}\n")
        out.write(f"rigctl fleet {result.command}: {len(result.hosts)} host(s), "
                  f"{sum(1 for h in result.hosts if h.ok)} ok, {result.elapsed_s:.1f}s\n")
        for host in result.hosts:
            state = "ok" if host.ok else ("UNREACHABLE" if not host.reachable else "FAIL")
            out.write(f"\n== {host.name} ({host.destination}) {state} via {host.via} in {host.elapsed_s:.1f}s\n")
            if host.error:
                out.write(f"   {one_line(host.error)}\n")
            for summary in host.summary:
                out.write(f"   {one_line(summary)}\n")
            if host.findings:  # checked one by one when the host answered (fleet.remote._findings)
                found = [UnitFinding.model_validate(f) for f in host.findings]
                _findings(out, found, indent="   ", source=host.name)
            fix = host.data.get("fix") if result.command == "doctor" else None
            if isinstance(fix, dict):  # after the findings, as `rigctl doctor --fix` shows them
                out.write(f"   --fix on {host.name}:\n")
                for fix_line in fix_lines(fix):  # each already one line, escaped and capped
                    out.write(f"     {fix_line}\n")

    return view
