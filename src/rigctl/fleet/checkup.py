"""`rigctl doctor` as one call: find the units, gather facts, audit, and (with ``fix``) rewrite the
rigctl-managed units and prepare patches for the others. Returns a DoctorReport; never prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rigctl.fleet.discover import (
    Root,
    collect,
    local_facts,
    local_roots,
    local_snapshot,
    path_roots,
    write_atomic,
)
from rigctl.fleet.doctor import DoctorFacts, FixPlan, UnitFile, UnitFinding, audit, plan_fixes, serving_units


@dataclass
class AppliedFix:
    unit: str
    files: list[str]
    backups: list[str]
    fixed: list[str]
    patch: str


@dataclass
class DoctorReport:
    roots: list[str]
    units: list[str]
    facts: DoctorFacts
    findings: list[UnitFinding]
    fix_requested: bool = False
    applied: list[AppliedFix] = field(default_factory=list)
    patches: list[FixPlan] = field(default_factory=list)  # proposed for units rigctl does not manage
    remaining: list[UnitFinding] | None = None  # findings after the fixes were applied

    @property
    def final(self) -> list[UnitFinding]:
        return self.findings if self.remaining is None else self.remaining

    @property
    def ok(self) -> bool:
        return not any(f.fails for f in self.final)

    def counts(self) -> dict[str, int]:
        out = {"fail": 0, "warn": 0, "info": 0}
        for f in self.final:
            out[f.severity] += 1
        return out

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "roots": self.roots,
            "units": self.units,
            "driver_version": self.facts.driver_version,
            "cdi_specs": [s.path for s in self.facts.cdi_specs],
            "findings": [f.to_dict() for f in self.findings],
            "counts": self.counts(),
        }
        if self.fix_requested:
            data["fix"] = {
                "applied": [a.__dict__ for a in self.applied],
                "patches": [{"unit": p.unit.path, "fixed": list(p.fixed), "patch": p.patch()} for p in self.patches],
                "remaining": [f.to_dict() for f in self.final],
            }
        return data


def doctor(paths: Sequence[str] | None = None, *, fix: bool = False, facts: DoctorFacts | None = None,
           roots: Sequence[Root] | None = None) -> DoctorReport:
    chosen = list(roots) if roots is not None else (path_roots(paths) if paths else local_roots())
    units = collect(local_snapshot(chosen), chosen)
    serving = serving_units(units)
    host = facts if facts is not None else local_facts(serving)
    findings = audit(serving, host)
    report = DoctorReport([r.path for r in chosen], [u.path for u in serving], host, findings)
    if fix:
        apply_fixes(report, serving, host)
    return report


def apply_fixes(report: DoctorReport, units: Sequence[UnitFile], host: DoctorFacts) -> None:
    report.fix_requested = True
    after: dict[str, UnitFile] = {u.path: u for u in units}
    for plan in plan_fixes(units, host):
        if not plan.managed:
            report.patches.append(plan)
            continue
        backups = [write_atomic(c.path, c.after) for c in plan.changes]
        report.applied.append(AppliedFix(
            plan.unit.path, [c.path for c in plan.changes], backups, list(plan.fixed), plan.patch()
        ))
        after[plan.unit.path] = plan.fixed_unit()
    report.remaining = audit(list(after.values()), host)
