"""What `doctor` and `fleet ...` print: findings grouped by unit, what --fix did, one block per host.

Their text comes from unit files and other hosts: every line goes through ``shown`` (fleet.visible), so no
control sequence in it reaches the terminal.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.output import note
from rigctl.cli.views.draw import View, prose
from rigctl.fleet.visible import shown, shown_line
from rigctl.severity import Severity

if TYPE_CHECKING:
    from rigctl.doctor.checkup import AppliedFix, DoctorReport
    from rigctl.doctor.unit_findings import UnitFinding
    from rigctl.fleet.result import FleetResult, HostResult

MARK: dict[Severity, str] = {Severity.FAIL: "FAIL", Severity.WARN: "WARN", Severity.INFO: "info"}


def _findings(out: TextIO, findings: Sequence[UnitFinding], indent: str = "", *, source: str | None = None) -> None:
    """Findings grouped by unit. ``source``: the host whose answer they are (fleet): each of their values
    on one line of its own, escaped and capped, and its advice labelled as that host's (``fix (from
    h2):``), never printed as rigctl's own."""
    def line(text: object) -> str:
        return shown(str(text)) if source is None else shown_line(text)

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
            if source is None:  # this host's own: prose within the width, a command never broken
                prose(out, line(f.message), first=f"{indent}       ")
                prose(out, line(f.fix), first=f"{indent}       {fix_label}: ", rest=f"{indent}         ")
                continue
            out.write(f"{indent}       {line(f.message)}\n")  # another host's: each value one line of its own
            out.write(f"{indent}       {fix_label}: {line(f.fix)}\n")


def doctor(report: DoctorReport) -> View:
    def view(out: TextIO) -> None:
        counts = _counts(report.findings)  # of the findings shown below; --fix's outcome comes after them
        driver = report.facts.driver_version or "none seen (CDI checks skipped)"
        prose(out, f"{len(report.units)} serving unit(s); driver {driver}; {counts['fail']} fail, "
                   f"{counts['warn']} warn", first="rigctl doctor: ", rest="  ")
        if not report.units:
            prose(out, ", ".join(report.roots), first="  no serving units under: ", rest="    ")
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
        after = report.counts()
        out.write(f"\nafter --fix: {len(remaining)} failing finding(s) remain ({after['fail']} fail, "
                  f"{after['warn']} warn)\n")

    return view


def _counts(findings: Sequence[UnitFinding]) -> dict[str, int]:
    """fail and warn among ``findings`` (``DoctorReport.counts`` counts those left after --fix)."""
    return {"fail": sum(1 for f in findings if f.severity == Severity.FAIL),
            "warn": sum(1 for f in findings if f.severity == Severity.WARN)}


def _live(out: TextIO, applied: AppliedFix) -> None:
    """Whether the fix runs: the manager reloaded, what it holds now, and what to paste where it is not."""
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
    for inventory_line in inventory_lines(about):
        note(shown(f"rigctl fleet {command}: {inventory_line}\n"))


def fleet(result: FleetResult, about: dict[str, Any] | None = None) -> View:
    def view(out: TextIO) -> None:
        # every line below may hold what a host answered: each goes through shown_line (or fix_lines)
        for inventory_line in inventory_lines(about) if about else []:
            out.write(f"{'  ' if inventory_line.startswith('warning:') else ''}{shown_line(inventory_line)}\n")
        out.write(f"rigctl fleet {result.command}: {len(result.hosts)} host(s), "
                  f"{sum(1 for h in result.hosts if h.ok)} ok, {result.elapsed_s:.1f}s\n")
        for host in result.hosts:
            state = "ok" if host.ok else ("UNREACHABLE" if not host.reachable else "FAIL")
            out.write(f"\n== {host.name} ({host.destination}) {state} via {host.via} in {host.elapsed_s:.1f}s\n")
            block = io.StringIO()  # one host's block whole, or a line saying it could not be shown
            try:
                _host_block(block, result.command, host)
            except Exception as exc:  # a value no model foresaw costs that host's details, never the others'
                block = io.StringIO()
                block.write(f"   {host.name}'s result could not be shown ({type(exc).__name__}); "
                            "--json has all of it\n")
            out.write(block.getvalue())

    return view


def _host_block(out: TextIO, command: str, host: HostResult) -> None:
    from rigctl.doctor.unit_findings import UnitFinding

    if host.error:
        out.write(f"   {shown_line(host.error)}\n")
    for summary in host.summary:
        out.write(f"   {shown_line(summary)}\n")
    if host.findings:  # checked one by one when the host answered (fleet.doctor_answer.checked_findings)
        _findings(out, [UnitFinding.model_validate(f) for f in host.findings], indent="   ", source=host.name)
    fix = host.data.get("fix") if command == "doctor" else None
    if isinstance(fix, dict):  # after the findings, as `rigctl doctor --fix` shows them
        out.write(f"   --fix on {host.name}:\n")
        for fix_line in fix_lines(fix):  # each already one line, escaped and capped
            out.write(f"     {fix_line}\n")


PATCH_LINES = 400  # lines of one remote patch shown in the text view (the JSON keeps it whole)


def _patch_lines(patch: str) -> list[str]:
    """A remote patch for the text view: split on newlines only (systemd's and diff's line rule, not
    ``str.splitlines``, which also breaks at \\x0b, \\x1c, U+2028...), each line one line, at most
    PATCH_LINES of them."""
    lines = patch.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    shown_lines = ["  " + shown_line(ln) for ln in lines[:PATCH_LINES]]
    if len(lines) > PATCH_LINES:
        shown_lines.append(f"  ... {len(lines) - PATCH_LINES} more line(s) (all of it in --json)")
    return shown_lines


def fix_lines(fix: dict[str, Any]) -> list[str]:
    """What ``doctor --fix`` did on a host (``HostResult.data["fix"]``), as lines for the text view, each
    remote value on one line, escaped and capped (``shown_line``)."""
    lines: list[str] = []
    if fix.get("error"):
        lines.append(f"--fix changed nothing: {shown_line(fix['error'])}")
    for applied in fix["applied"]:
        lines.append(f"fixed {shown_line(applied['unit'])} ({shown_line(', '.join(applied['fixed']))}); "
                     f"backup: {shown_line(', '.join(applied['backups']))}")
        lines += _patch_lines(applied["patch"])
        if applied.get("in_effect") is True:
            lines.append(f"in effect: {shown_line(applied.get('service') or applied['unit'])} reloaded and read back")
        if applied.get("problem"):
            lines.append(f"{'NOT in effect' if applied.get('in_effect') is False else 'note'}: "
                         f"{shown_line(applied['problem'])}")
        lines += [f"run on the host: {shown_line(step)}" for step in applied.get("next_steps") or []]
    for patch in fix["patches"]:
        lines.append(f"left untouched: {shown_line(patch['unit'])} ({shown_line(patch.get('why') or 'not applied')}); "
                     f"proposed patch ({shown_line(', '.join(patch['fixed']))}):")
        lines += _patch_lines(patch["patch"])
    remaining = fix.get("remaining")
    if isinstance(remaining, list):
        lines.append(f"after --fix: {sum(1 for f in remaining if f.get('severity') == 'fail')} failing finding(s) "
                     "remain")
    return lines
