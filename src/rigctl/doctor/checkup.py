"""`rigctl doctor` as one call, the entry point the CLI (and ``fleet doctor`` on a host with rigctl)
calls: find the units, gather facts, audit, and (with ``fix``) rewrite the rigctl-managed units and
prepare patches for the others. Returns a DoctorReport; never prints."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import PurePosixPath
from typing import Any

from rigctl.doctor.audit import audit, serving_units
from rigctl.doctor.discover import local_roots, path_roots
from rigctl.doctor.facts import DoctorFacts, local_facts
from rigctl.doctor.fix import FixPlan, fix_refusal, plan_fixes, rewrite
from rigctl.doctor.model import UnitFinding
from rigctl.errors import InvalidInputError, UsageError
from rigctl.host.managed import is_managed
from rigctl.host.unitdirs import Root, UnitFile, collect
from rigctl.host.unitfile import shared_dropin_dir
from rigctl.host.unitsnapshot import Skipped, Snapshot, local_snapshot


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
    patches: list[FixPlan] = field(default_factory=list)  # proposed, not applied (see ``refused``)
    remaining: list[UnitFinding] | None = None  # findings after the fixes were applied
    skipped: list[Skipped] = field(default_factory=list)  # files doctor did not read, and why
    refused: dict[str, str] = field(default_factory=dict)  # unit -> why --fix left it to a patch
    fix_error: str | None = None  # the fixes were not applied at all (all or none), and why
    canaries: list[dict[str, Any]] = field(default_factory=list)  # `rigctl canary` timers on this host

    @property
    def final(self) -> list[UnitFinding]:
        return self.findings if self.remaining is None else self.remaining

    @property
    def ok(self) -> bool:
        return self.fix_error is None and not any(f.fails for f in self.final)

    def counts(self) -> dict[str, int]:
        out = {"fail": 0, "warn": 0, "info": 0}
        for f in self.final:
            out[f.severity] += 1
        return out

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: facts flattened, counts, the fix as one object
        data: dict[str, Any] = {
            "roots": self.roots,
            "units": self.units,
            "driver_version": self.facts.driver_version,
            "cdi_specs": [s.path for s in self.facts.cdi_specs],
            "findings": [f.model_dump(mode="json") for f in self.findings],
            "counts": self.counts(),
            "skipped": [asdict(s) for s in self.skipped],
            "canaries": self.canaries,
        }
        if self.fix_requested:
            data["fix"] = {
                "applied": [asdict(a) for a in self.applied],
                "patches": [
                    {"unit": p.unit.path, "fixed": list(p.fixed), "patch": p.patch(),
                     "why": self.refused.get(p.unit.path)}
                    for p in self.patches
                ],
                "error": self.fix_error,
                "remaining": [f.model_dump(mode="json") for f in self.final],
            }
        return data


def doctor(paths: Sequence[str] | None = None, *, fix: bool = False, facts: DoctorFacts | None = None,
           roots: Sequence[Root] | None = None) -> DoctorReport:
    for path in paths or ():
        if not os.path.lexists(path):
            raise UsageError(f"--path {path}: no such file or directory")
    chosen = list(roots) if roots is not None else (path_roots(paths) if paths else local_roots())
    with local_snapshot(chosen) as snap:  # a --path directory stays open until the fixes are written
        units = collect(snap.files, chosen)
        serving = serving_units(units)
        host = facts if facts is not None else local_facts(serving)
        findings = audit(serving, host)
        report = DoctorReport([r.path for r in chosen], [u.path for u in serving], host, findings,
                              skipped=snap.skipped)
        if not paths and roots is None:  # this host's own units: its canaries too
            from rigctl.deploy.canary import installed  # noqa: PLC0415 - only for this host's doctor
            from rigctl.deploy.state import search_scopes  # noqa: PLC0415

            report.canaries = installed(search_scopes(None))
        if fix:
            apply_fixes(report, serving, host, snap)
    return report


def _refusal(plan: FixPlan, snap: Snapshot, takers: Mapping[str, Sequence[UnitFile]]) -> str | None:
    """Why a planned fix stays a patch: not rigctl's unit, or a file --fix may not write, or a drop-in
    that also applies to units that are not rigctl's (``takers``: drop-in path -> the units it applies to)."""
    if not plan.managed:
        return ("not managed by rigctl (no Label=rigctl.managed=true in the unit file itself, or a drop-in "
                "takes it back)")
    realm = snap.found[plan.unit.path].root.realm if plan.unit.path in snap.found else None
    for change in plan.changes:
        why = fix_refusal(change.path, snap)
        if why:
            return why if change.path == plan.unit.path else f"{change.path}: {why}"
        if change.path == plan.unit.path:
            continue
        if snap.found[change.path].root.realm != realm:
            return f"{change.path}: applies to other users' units as well; --fix edits only the unit's own files"
        folder = PurePosixPath(change.path).parent.name
        if (folder == "service.d" or folder.endswith(".service.d")) and shared_dropin_dir(folder):
            # systemd applies it to every service (whose name starts so), most of which doctor never reads
            return f"{change.path}: applies to services doctor does not read as well; --fix leaves it to you"
        foreign = [u.path for u in takers.get(change.path, ()) if not is_managed(u.path, u.text, u.dropins)]
        if foreign:
            return f"{change.path}: applies to {foreign[0]} as well, which is not rigctl's; --fix leaves it to you"
    return None


def apply_fixes(report: DoctorReport, units: Sequence[UnitFile], host: DoctorFacts, snap: Snapshot) -> None:
    """Rewrite every fixable managed unit, all of them or none; the others get a patch and a reason."""
    report.fix_requested = True
    chosen: list[FixPlan] = []
    planned: dict[str, tuple[str, str]] = {}  # path -> (unit, new text): a drop-in two units share
    takers: dict[str, list[UnitFile]] = {}
    for unit in units:
        for dropin in unit.dropins:
            takers.setdefault(dropin.path, []).append(unit)
    for plan in plan_fixes(units, host):
        why = _refusal(plan, snap, takers)
        clash = [c.path for c in plan.changes if c.path in planned and planned[c.path][1] != c.after]
        if not why and clash:
            why = f"{clash[0]}: the fix of {planned[clash[0]][0]} changes it differently; run --fix again after it"
        if why:
            report.patches.append(plan)
            report.refused[plan.unit.path] = why
        else:
            chosen.append(plan)
            planned.update({c.path: (plan.unit.path, c.after) for c in plan.changes})
    after: dict[str, UnitFile] = {u.path: u for u in units}
    unique = {c.path: c for plan in chosen for c in plan.changes}  # a shared drop-in is written once
    changes = list(unique.values())
    try:
        backups = rewrite(changes, snap) if changes else {}
    except InvalidInputError as exc:
        report.fix_error = exc.message
        report.remaining = audit(list(after.values()), host)
        return
    for plan in chosen:
        files = [c.path for c in plan.changes]
        report.applied.append(
            AppliedFix(plan.unit.path, files, [backups[f] for f in files], list(plan.fixed), plan.patch())
        )
        after[plan.unit.path] = plan.fixed_unit()
    report.remaining = audit(list(after.values()), host)
