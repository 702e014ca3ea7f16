"""The doctor's pure core: read each unit, run every rule of the registry over it, then the host rules.

``audit(units, facts) -> list[UnitFinding]`` reads nothing from the host: unit files (with their
drop-ins) and host facts are gathered at the edge (``discover``, ``host_state``) and handed in. The runner
owns isolation: a rule that crashes is reported as a finding, the others still run, and a unit doctor
cannot read is reported, never hidden.
"""

from __future__ import annotations

import traceback
from collections.abc import Sequence

from rigctl.doctor.edits import Edit
from rigctl.doctor.host_state import DoctorFacts
from rigctl.doctor.rules import HOST_RULES, UNIT_RULES
from rigctl.doctor.rules.context import Hit, RuleContext, UnitRule
from rigctl.doctor.unit_findings import UnitFinding
from rigctl.host.unit import Unit
from rigctl.host.unitfile import UnitParseError
from rigctl.severity import Severity


def read_units(units: Sequence[Unit], facts: DoctorFacts) -> tuple[list[RuleContext], list[UnitFinding]]:
    """A RuleContext for every unit that serves something, and a finding for every unit that cannot be read."""
    contexts: list[RuleContext] = []
    broken: list[UnitFinding] = []
    for unit in units:
        try:
            spec = unit.serving
        except UnitParseError as exc:  # its readers disagree on it or refuse it: reported, never guessed
            broken.append(UnitFinding(
                unit=unit.path, id="unit-unreadable", severity=Severity.FAIL, message=str(exc),
                fix="rewrite the file with one assignment per line and plain spaces and tabs",
            ))
            continue
        except Exception as exc:  # a unit doctor cannot read is reported, never hides the others
            broken.append(_crash(unit.path, "parse", exc))
            continue
        if spec is not None:
            contexts.append(RuleContext(unit, spec, facts))
    return contexts, broken


def _finding(ctx: RuleContext, rule: UnitRule, hit: Hit) -> UnitFinding:
    return UnitFinding(
        unit=ctx.unit.path, id=rule.id, severity=hit.severity or rule.severity, message=hit.message,
        fix=hit.fix, where=hit.entry.file if hit.entry else None, line=hit.entry.first + 1 if hit.entry else None,
        managed=ctx.unit.managed, autofix=bool(hit.edits),
    )


def unit_findings(ctx: RuleContext) -> list[tuple[UnitFinding, tuple[Edit, ...]]]:
    """Every rule over one unit: each finding with the edits that would fix it."""
    found: list[tuple[UnitFinding, tuple[Edit, ...]]] = []
    for rule in UNIT_RULES:
        try:
            found.extend((_finding(ctx, rule, hit), hit.edits) for hit in rule.check(ctx))
        except Exception as exc:
            found.append((_crash(ctx.unit.path, rule.id, exc), ()))
    return found


def host_findings(contexts: Sequence[RuleContext], facts: DoctorFacts) -> list[UnitFinding]:
    found: list[UnitFinding] = []
    for rule in HOST_RULES:
        try:
            found.extend(
                UnitFinding(unit=hit.subject, id=rule.id, severity=hit.severity or rule.severity,
                            message=hit.message, fix=hit.fix)
                for hit in rule.check(contexts, facts)
            )
        except Exception as exc:
            found.append(_crash("(host)", rule.id, exc))
    return found


def _crash(unit: str, what: str, exc: BaseException) -> UnitFinding:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    return UnitFinding(
        unit=unit, id="doctor-internal-error", severity=Severity.FAIL,
        message=f"check {what} crashed on this unit: {type(exc).__name__}: {exc}{at} (a bug in rigctl)",
        fix="report it with the unit file attached",
    )


def serving_units(units: Sequence[Unit]) -> list[Unit]:
    """The units doctor recognizes as serving something (every .container; .service files that run a
    container or a known engine), and those it cannot read: audit() reports them, they never vanish."""
    contexts, broken = read_units(units, DoctorFacts())
    keep = {c.unit.path for c in contexts} | {f.unit for f in broken}
    return [u for u in units if u.path in keep]


def audit(units: Sequence[Unit], facts: DoctorFacts) -> list[UnitFinding]:
    contexts, findings = read_units(units, facts)
    for ctx in contexts:
        findings.extend(finding for finding, _ in unit_findings(ctx))
    findings.extend(host_findings(contexts, facts))
    return findings
