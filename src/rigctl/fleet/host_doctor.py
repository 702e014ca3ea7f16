"""``fleet doctor [--fix]`` on one host: through the remote rigctl when it is installed (``--fix`` rewrites
units only so: its own rules, managed units, all or none, backups kept), else a snapshot of the host's
unit files audited here (``--fix`` then changes nothing there and only proposes patches)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from pydantic import ValidationError

from rigctl.doctor.audit import audit, serving_units
from rigctl.doctor.fix import plan_fixes
from rigctl.doctor.host_state import DoctorFacts, snapshot_facts
from rigctl.fleet.answer import answer_failure, note_version, parse_answer
from rigctl.fleet.doctor_answer import RemoteDoctor, checked_findings, checked_fix, malformed_finding
from rigctl.fleet.inventory import Host
from rigctl.fleet.result import HostResult
from rigctl.fleet.script import run_script, section_rc
from rigctl.fleet.snapshot import (
    OTHER_HOMES_NOTE,
    PATH_REFUSED,
    SNAPSHOT_FILES,
    doctor_script,
    snapshot_files,
    snapshot_meta,
    snapshot_roots,
)
from rigctl.fleet.ssh import Transport
from rigctl.fleet.visible import brief, shown, shown_line, tail
from rigctl.host.cdi import CDI_DIRS, DRIVER_VERSION_FILE
from rigctl.host.unit import Unit
from rigctl.host.unitdirs import collect
from rigctl.recipe.problems import format_validation_error
from rigctl.severity import Severity
from rigctl.util.jsonable import jsonable


def _remote_doctor(result: HostResult, host: Host, sections: dict[str, str], stderr: str, *, fix: bool) -> None:
    """Fill ``result`` from what the remote ``rigctl doctor [--fix] --json`` answered (in ``sections``)."""
    result.via = "rigctl"
    label = "doctor --fix --json" if fix else "doctor --json"
    rc = section_rc(sections, "rc ")
    document, problem = parse_answer(sections.get("via rigctl", ""), rc if rc is not None else -1, command="doctor")
    if problem is None and rc is None:
        problem = "it did not finish"
    if problem is not None:
        result.error = answer_failure(host, label, problem, stderr)
        return
    assert document is not None  # parse_answer returns one when there is no problem
    note_version(result, document)
    try:
        report = RemoteDoctor.model_validate(document)
    except ValidationError as exc:
        result.findings = [malformed_finding(host, "doctor report", format_validation_error("doctor", exc))]
        return
    result.findings = checked_findings(host, report.findings)
    result.data = {"units": report.units, "driver_version": report.driver_version, "counts": report.counts}
    if report.error is not None:
        result.error = report.error.message
    # after --fix, what remains decides; the findings stay what the host found before it
    judged = result.findings
    if fix:
        checked, malformed = checked_fix(host, report.fix)
        result.findings += malformed
        if checked is not None:
            result.data["fix"] = checked
            judged = checked["remaining"] + malformed
        else:
            judged = result.findings
    result.ok = bool(document["ok"]) and not any(f["severity"] == Severity.FAIL for f in judged)


def _no_remote_fix(host: Host, units: Sequence[Unit], facts: DoctorFacts) -> dict[str, Any]:
    """--fix on a host without rigctl: nothing is changed there; the patches rigctl would apply are
    proposed, made here from the files the snapshot shipped."""
    why = (f"rigctl is not installed on {host.name} ({brief(host.program)} not found): --fix rewrites units "
           "only through rigctl on the host itself, so nothing was changed there")
    patches = [{"unit": p.unit.path, "fixed": list(p.fixed), "patch": p.patch(),
                "why": "not changed: rigctl is not installed on the host; apply by hand or install rigctl"}
               for p in plan_fixes(units, facts)]
    return {"applied": [], "patches": patches, "error": why, "restart": False, "remaining": None}


def host_doctor(host: Host, ssh: Transport, timeout: float, *, fix: bool = False) -> HostResult:
    """``rigctl doctor`` on ``host`` (through the remote rigctl, else a snapshot audited here); with
    ``fix``, ``doctor --fix`` through the remote rigctl, and on a host without one nothing changed."""
    result, done, sections = run_script(host, ssh, timeout, "doctor",
                                        lambda b: doctor_script(b, host.program, fix=fix))
    if sections is None:
        return result
    if "via rigctl" in sections:
        _remote_doctor(result, host, sections, done.stderr, fix=fix)
    else:
        if "end" not in sections:
            result.error = f"doctor snapshot did not finish (exit {done.rc}): {tail(done.stderr)}"
            return result
        if "too many" in sections or sum(1 for k in sections if k.startswith("file ")) > SNAPSHOT_FILES:
            result.error = (f"doctor: the host has more than {SNAPSHOT_FILES} unit files and drop-ins to ship; "
                            "not audited (install rigctl there: its own doctor reads them)")
            return result
        files, skipped = snapshot_files(sections)
        refused = [s.path for s in skipped if s.reason == PATH_REFUSED]
        driver_text = files.pop(DRIVER_VERSION_FILE, "")
        cdi = {p: files.pop(p) for p in sorted(files) if p.startswith(tuple(d + "/" for d in CDI_DIRS))}
        units = serving_units(collect(files, snapshot_roots(sections, files)))
        facts = snapshot_facts(driver_text, cdi)
        found = audit(units, facts)
        result.findings = jsonable(found)
        if refused:
            result.findings.append(malformed_finding(host, "snapshot", [
                f"{len(refused)} path(s) that leave their directory (with '..' or '.'), refused: "
                + ", ".join(shown_line(r, 200) for r in refused[:3])]))
        result.data = {"units": [u.path for u in units], "driver_version": facts.driver_version,
                       "skipped": [asdict(s) for s in skipped]}
        result.ok = not any(f.fails for f in found) and not refused
        if fix:
            result.data["fix"] = _no_remote_fix(host, units, facts)
        if snapshot_meta(sections).get("uid") == "0":
            result.summary.append(OTHER_HOMES_NOTE)
        if skipped:
            result.summary.append(f"{len(skipped)} file(s) not read: " + "; ".join(
                shown(f"{s.path}: {s.reason}") for s in skipped[:5]))
    fails = sum(1 for f in result.findings if f.get("severity") == Severity.FAIL)
    warns = sum(1 for f in result.findings if f.get("severity") == Severity.WARN)
    units_seen = result.data.get("units") or []
    fixed = result.data.get("fix")
    result.summary.append(f"{len(units_seen)} serving unit(s); {fails} fail, {warns} warn"
                          + (" (before --fix)" if fixed else ""))
    return result
