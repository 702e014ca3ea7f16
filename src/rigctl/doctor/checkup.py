"""`rigctl doctor` as one call, the entry point the CLI (and ``fleet doctor`` on a host with rigctl)
calls: find the units, gather facts, audit, and (with ``fix``) rewrite the rigctl-managed units and
prepare patches for the others. Returns a DoctorReport; never prints."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from rigctl.adapters.systemd import SystemctlCli, Systemd
from rigctl.doctor.audit import audit, serving_units
from rigctl.doctor.discover import local_roots, path_roots
from rigctl.doctor.fix import FixPlan, fix_refusal, plan_fixes, rewrite
from rigctl.doctor.host_state import DoctorFacts, live_units, local_facts
from rigctl.doctor.unit_findings import SPOKEN, UnitFinding
from rigctl.errors import CommandError, InvalidInputError, UsageError
from rigctl.host.unit import Unit
from rigctl.host.unitdirs import Root, collect
from rigctl.host.unitfile import parse_timespan, shared_dropin_dir
from rigctl.host.unitsnapshot import Skipped, Snapshot, local_snapshot, login_roots
from rigctl.places import Scope
from rigctl.util.jsonable import jsonable

SystemdFor = Callable[[Scope], Systemd]
# [Service] keys --fix may set, and the property `systemctl show` reads each back as
LIVE_KEYS = {"Restart": "Restart", "RestartSec": "RestartUSec", "TimeoutStartSec": "TimeoutStartUSec"}
# fixes that change [Service] only: in effect for the running service once the manager has reloaded; every
# other fix changes the container's command line, which runs only when the service is started again
SERVICE_ONLY = frozenset({"restart-not-always", "notify-healthy-short-timeout"})


@dataclass
class AppliedFix:
    unit: str
    files: list[str]
    backups: list[str]
    fixed: list[str]
    patch: str
    # what the manager runs after the fix (None: no manager of this login runs the file: --path, another user's)
    service: str | None = None
    scope: str | None = None
    reloaded: bool = False  # doctor reloaded that manager after writing
    expected: dict[str, str] = field(default_factory=dict)  # property -> what the fixed files say
    live: dict[str, str] = field(default_factory=dict)  # property -> what the manager holds, read back
    in_effect: bool | None = None  # the manager holds every fixed value and needs no reload; None: not asked
    needs_restart: bool = False  # a fix changed the container's command line: it runs at the next start
    restarted: bool = False  # restart queued (--restart)
    next_steps: list[str] = field(default_factory=list)  # commands to paste, with the real unit names
    problem: str | None = None  # why the fix is not (all) in effect, in words


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
    restart_requested: bool = False  # --restart

    @property
    def final(self) -> list[UnitFinding]:
        return self.findings if self.remaining is None else self.remaining

    @property
    def ok(self) -> bool:
        not_in_effect = any(a.in_effect is False for a in self.applied)
        return self.fix_error is None and not not_in_effect and not any(f.fails for f in self.final)

    def counts(self) -> dict[str, int]:
        out = {str(severity): 0 for severity in SPOKEN}  # the severities doctor speaks, worst first
        for f in self.final:
            out[f.severity] += 1
        return out

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: facts flattened, counts, the fix as one object
        data: dict[str, Any] = {
            "roots": self.roots,
            "units": self.units,
            "driver_version": self.facts.driver_version,
            "cdi_specs": [s.path for s in self.facts.cdi_specs],
            "findings": jsonable(self.findings),
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
                "restart": self.restart_requested,
                "remaining": jsonable(self.final),
            }
        return data


def doctor(paths: Sequence[str] | None = None, *, fix: bool = False, facts: DoctorFacts | None = None,
           roots: Sequence[Root] | None = None, restart: bool = False,
           systemd_for: SystemdFor | None = None, scope: Scope | None = None) -> DoctorReport:
    """``restart``: with ``fix``, restart each fixed service whose new files need it. ``systemd_for``: the
    manager of a scope (tests pass a fake); with ``facts`` given and no ``systemd_for``, no manager is asked.
    ``scope`` (--user/--system): only that scope's directories, and its canaries; None: both."""
    if restart and not fix:
        raise UsageError("--restart restarts what --fix changed: give --fix too")
    if scope is not None and paths:
        raise UsageError(f"--path audits the files it names; --{scope.value} picks this host's {scope.value} "
                         "directories: give one of them")
    for path in paths or ():
        if not os.path.lexists(path):
            raise UsageError(f"--path {path}: no such file or directory")
    chosen = list(roots) if roots is not None else (path_roots(paths) if paths else local_roots())
    if scope is not None:
        chosen = [r for r in chosen if r.scope == scope.value]
    ask = systemd_for if systemd_for is not None else (None if facts is not None else SystemctlCli)
    with local_snapshot(chosen) as snap:  # a --path directory stays open until the fixes are written
        units = collect(snap.files, chosen)
        serving = serving_units(units)
        targets = live_targets(serving, snap) if ask is not None else {}
        host = facts if facts is not None else local_facts(serving)
        if ask is not None:
            host = replace(host, live={**host.live, **live_units(targets, ask)})
        findings = audit(serving, host)
        report = DoctorReport([r.path for r in chosen], [u.path for u in serving], host, findings,
                              skipped=snap.skipped)
        if not paths and roots is None:  # this host's own units: its canaries too
            from rigctl.deploy.canary import installed  # noqa: PLC0415 - only for this host's doctor
            from rigctl.deploy.state import search_scopes  # noqa: PLC0415

            report.canaries = installed(search_scopes(scope))
        if fix:
            report.restart_requested = restart
            after = apply_fixes(report, serving, host, snap)
            if ask is not None and report.applied:
                take_effect(report, after, host, targets, ask, restart=restart)
    return report


def live_targets(units: Sequence[Unit], snap: Snapshot) -> dict[str, tuple[str, str]]:
    """{unit file: (scope, service)} for the units a manager of this login runs: the system's, and the
    user manager's for this login's own directories (another user's units run under their manager)."""
    own = {r.path for r in login_roots()}
    targets: dict[str, tuple[str, str]] = {}
    for unit in units:
        found = snap.found.get(unit.path)
        service = unit.service
        if found is None or service is None or unit.scope not in ("system", "user"):
            continue
        if unit.scope == "user" and found.root.path not in own:
            continue
        targets[unit.path] = (unit.scope, service)
    return targets


def _same(prop: str, live: str, want: str) -> bool:
    if prop == "Restart":
        return live == want
    a, b = parse_timespan(live), parse_timespan(want)
    return a is not None and a == b


def take_effect(report: DoctorReport, after: Mapping[str, Unit], host: DoctorFacts,
                targets: Mapping[str, tuple[str, str]], systemd_for: SystemdFor, *, restart: bool) -> None:
    """After the files are written: reload the manager of each fixed unit's scope, read back what it now
    holds, restart (``restart``) what needs it, and audit the live state again. Every applied fix says
    whether it is in effect, and what to paste where it is not."""
    managers: dict[str, Systemd] = {}
    reload_error: dict[str, str] = {}
    for applied in report.applied:
        if applied.unit not in targets:
            continue
        scope, _ = targets[applied.unit]
        if scope not in managers:
            managers[scope] = systemd_for(Scope(scope))
            try:
                managers[scope].daemon_reload()
            except CommandError as exc:
                reload_error[scope] = str(exc)
    for applied in report.applied:
        _read_back(applied, after[applied.unit], targets, managers, reload_error, restart=restart)
    if managers:  # what the managers say now, audited again with the fixed files
        live = live_units({p: t for p, t in targets.items() if t[0] in managers}, systemd_for)
        report.remaining = audit(list(after.values()), replace(host, live={**host.live, **live}))


def _read_back(applied: AppliedFix, fixed: Unit, targets: Mapping[str, tuple[str, str]],
               managers: Mapping[str, Systemd], reload_error: Mapping[str, str], *, restart: bool) -> None:
    if applied.unit not in targets:
        applied.problem = ("no manager of this login runs this file (a --path file, or another user's): "
                           "doctor did not reload anything; its owner runs `systemctl --user daemon-reload`")
        return
    scope, service = targets[applied.unit]
    applied.scope, applied.service = scope, service
    systemctl = "systemctl --user" if scope == "user" else "systemctl"
    if scope in reload_error:
        applied.problem = f"`{systemctl} daemon-reload` failed: {reload_error[scope]}"
        applied.in_effect = False
        applied.next_steps = [f"{systemctl} daemon-reload"]
        return
    applied.reloaded = True
    merged = fixed.merged
    applied.expected = {prop: value for key, prop in LIVE_KEYS.items()
                        if (value := merged.value("Service", key)) is not None}
    applied.needs_restart = any(f not in SERVICE_ONLY for f in applied.fixed)
    names = [*applied.expected, "NeedDaemonReload", "ActiveState", "SubState"]
    try:
        applied.live = managers[scope].properties(service, names)
    except CommandError as exc:
        applied.problem = f"`{systemctl} show {service}` failed: {exc}"
        applied.in_effect = False
        return
    wrong = [f"{p}={applied.live.get(p, '?')} (the files say {v})" for p, v in applied.expected.items()
             if not _same(p, applied.live.get(p, ""), v)]
    if applied.live.get("NeedDaemonReload") == "yes":
        wrong.append("NeedDaemonReload=yes")
    applied.in_effect = not wrong
    if wrong:
        applied.problem = f"reloaded, but the {scope} manager still holds {', '.join(wrong)}"
        applied.next_steps = [f"{systemctl} daemon-reload", f"{systemctl} show -p {','.join(names)} -- {service}"]
        return
    running = applied.live.get("ActiveState") in ("active", "activating", "reloading")
    if applied.needs_restart and running:
        if restart:
            try:
                managers[scope].restart(service)
                applied.restarted = True
            except CommandError as exc:
                applied.problem = f"`{systemctl} restart {service}` failed: {exc}"
                applied.in_effect = False
                applied.next_steps = [f"{systemctl} restart {service}"]
        else:
            applied.problem = "the new container command line runs only once the service is started again"
            applied.next_steps = [f"{systemctl} restart {service}"]


def _refusal(plan: FixPlan, snap: Snapshot, takers: Mapping[str, Sequence[Unit]]) -> str | None:
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
        foreign = [u.path for u in takers.get(change.path, ()) if not u.managed]
        if foreign:
            return f"{change.path}: applies to {foreign[0]} as well, which is not rigctl's; --fix leaves it to you"
    return None


def apply_fixes(report: DoctorReport, units: Sequence[Unit], host: DoctorFacts,
                snap: Snapshot) -> dict[str, Unit]:
    """Rewrite every fixable managed unit, all of them or none; the others get a patch and a reason.
    Returns every unit as it now is on disk."""
    report.fix_requested = True
    chosen: list[FixPlan] = []
    planned: dict[str, tuple[str, str]] = {}  # path -> (unit, new text): a drop-in two units share
    takers: dict[str, list[Unit]] = {}
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
    after: dict[str, Unit] = {u.path: u for u in units}
    unique = {c.path: c for plan in chosen for c in plan.changes}  # a shared drop-in is written once
    changes = list(unique.values())
    try:
        backups = rewrite(changes, snap) if changes else {}
    except InvalidInputError as exc:
        report.fix_error = exc.message
        report.remaining = audit(list(after.values()), host)
        return after
    for plan in chosen:
        files = [c.path for c in plan.changes]
        report.applied.append(
            AppliedFix(plan.unit.path, files, [backups[f] for f in files], list(plan.fixed), plan.patch())
        )
        after[plan.unit.path] = plan.fixed_unit()
    report.remaining = audit(list(after.values()), host)
    return after
