"""rigctl doctor | fleet status|doctor|preflight|swap. Thin: parse, call one core function, render."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from rigctl.cli.base import JsonOpt, app, finish
from rigctl.cli.output import Outcome

if TYPE_CHECKING:
    from rigctl.doctor.checkup import DoctorReport
    from rigctl.fleet.remote import FleetResult

PathOpt = Annotated[
    list[str] | None,
    typer.Option("--path", metavar="DIR", help="Audit only units under this directory or file (repeatable)."),
]
FixOpt = Annotated[
    bool,
    typer.Option("--fix", help="Rewrite rigctl-managed units atomically (keeping .bak); print a patch for the others."),
]
HostsOpt = Annotated[
    str | None,
    typer.Option("--hosts", metavar="FILE", help="Host inventory (default $XDG_CONFIG_HOME/rigctl/hosts.yaml)."),
]
TagOpt = Annotated[
    list[str] | None, typer.Option("--tag", metavar="TAG", help="Only hosts carrying this tag (repeatable).")
]
OnlyOpt = Annotated[
    list[str] | None, typer.Option("--only", metavar="NAME", help="Only this host (repeatable).")
]
LimitOpt = Annotated[
    str | None,
    typer.Option("--limit", metavar="PATTERN",
                 help="Hosts or groups as Ansible's --limit: a,b (or a:b), !x to leave out, &x to intersect, "
                      "@FILE, * globs."),
]
ParallelOpt = Annotated[int, typer.Option("--parallel", min=1, max=256, help="Hosts contacted at once.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="Seconds allowed per host.")]

_MARK = {"fail": "FAIL", "warn": "WARN", "info": "info"}


def _write_findings(out: TextIO, findings: list[dict[str, Any]], indent: str = "") -> None:
    """Findings grouped by unit. Their text comes from unit files and other hosts: printed through
    ``shown`` so no control sequence in it reaches the terminal."""
    from rigctl.fleet.remote import shown

    by_unit: dict[str, list[dict[str, Any]]] = {}
    for f in findings:
        by_unit.setdefault(str(f.get("unit")), []).append(f)
    for unit, items in by_unit.items():
        out.write(shown(f"{indent}{unit}\n"))
        for f in items:
            where = ""
            if f.get("line"):
                where = f"  ({'' if f.get('where') in (None, unit) else str(f['where']) + ':'}line {f['line']})"
            severity = str(f.get("severity"))
            out.write(shown(f"{indent}  {_MARK.get(severity, severity)} {f.get('id')}{where}\n"))
            out.write(shown(f"{indent}       {f.get('message')}\n"))
            out.write(shown(f"{indent}       fix: {f.get('fix')}\n"))


def _doctor_view(report: DoctorReport) -> Any:
    def view(out: TextIO) -> None:
        counts = report.counts()
        driver = report.facts.driver_version or "none seen (CDI checks skipped)"
        out.write(
            f"rigctl doctor: {len(report.units)} serving unit(s); driver {driver}; "
            f"{counts['fail']} fail, {counts['warn']} warn\n"
        )
        if not report.units:
            out.write(f"  no serving units under: {', '.join(report.roots)}\n")
        for skip in report.skipped:
            out.write(f"  not read: {skip.path}: {skip.reason}\n")
        _write_findings(out, [f.to_dict() for f in report.findings])
        if not report.fix_requested:
            if any(f.autofix for f in report.findings):
                out.write("\n`rigctl doctor --fix` rewrites rigctl-managed units and prints a patch for the others.\n")
            return
        if report.fix_error:
            out.write(f"\n--fix changed nothing (all fixes or none): {report.fix_error}\n")
        for applied in report.applied:
            out.write(f"\nfixed {applied.unit} ({', '.join(applied.fixed)}); backup: {', '.join(applied.backups)}\n")
            out.write(applied.patch)
        if report.applied:
            out.write("\napply with: systemctl [--user] daemon-reload && systemctl [--user] restart <unit>\n")
        for plan in report.patches:
            why = report.refused.get(plan.unit.path, "not applied")
            out.write(f"\nleft untouched: {plan.unit.path} ({why}); proposed patch ({', '.join(plan.fixed)}):\n")
            out.write(plan.patch())
        remaining = [f for f in report.final if f.fails]
        out.write(f"\nafter --fix: {len(remaining)} failing finding(s) remain\n")

    return view


@app.command("doctor")
def doctor_cmd(paths: PathOpt = None, fix: FixOpt = False, as_json: JsonOpt = False) -> None:
    """Audit every serving unit on this host (quadlet .container files and .service files running
    podman/docker or an engine): restart policy, ipc/shm, start timeouts, digests, exposure, CDI."""

    def produce() -> Outcome:
        from rigctl.doctor.checkup import doctor

        report = doctor(paths or None, fix=fix)
        return Outcome("doctor", report.ok, report.to_dict(), view=_doctor_view(report))

    finish("doctor", as_json, produce)


# --- several hosts -----------------------------------------------------------------------------------

fleet_app = typer.Typer(
    name="fleet",
    help="Run status, doctor, preflight or swap on every host of an inventory, over ssh.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(fleet_app, name="fleet")


def _fleet_view(result: FleetResult, about: dict[str, Any] | None = None) -> Any:
    def view(out: TextIO) -> None:
        from rigctl.fleet.remote import fix_lines, shown  # every line below may hold what a host answered

        for line in _inventory_lines(about) if about else []:
            out.write(shown(f"{'  ' if line.startswith('warning:') else ''}{line}\n"))
        out.write(f"rigctl fleet {result.command}: {len(result.hosts)} host(s), "
                  f"{sum(1 for h in result.hosts if h.ok)} ok, {result.elapsed_s:.1f}s\n")
        for host in result.hosts:
            state = "ok" if host.ok else ("UNREACHABLE" if not host.reachable else "FAIL")
            out.write(f"\n== {host.name} ({host.destination}) {state} via {host.via} in {host.elapsed_s:.1f}s\n")
            if host.error:
                out.write(shown(f"   {host.error}\n"))
            for line in host.summary:
                out.write(shown(f"   {line}\n"))
            if host.findings:
                _write_findings(out, host.findings, indent="   ")
            fix = host.data.get("fix") if result.command == "doctor" else None
            if isinstance(fix, dict):  # after the findings, as `rigctl doctor --fix` shows them
                out.write(f"   --fix on {host.name}:\n")
                for line in fix_lines(fix):
                    out.write(shown(f"     {line}\n"))

    return view


def _inventory_lines(about: dict[str, Any]) -> list[str]:
    """Which file was read, as what, how many of its hosts were chosen, and what of it rigctl ignores."""
    limit = f", --limit {about['limit']}" if about["limit"] else ""
    head = f"inventory: {about['path']} ({about['kind']}; {about['chosen']} of {about['hosts']} host(s){limit})"
    return [head, *(f"warning: {w}" for w in about["warnings"])]


def _fleet(command: str, *, hosts_file: str | None, tags: list[str] | None, only: list[str] | None,
           parallel: int, timeout: float, as_json: bool, extra: list[str] | None = None, fix: bool = False,
           limit: str | None = None) -> None:
    def produce() -> Outcome:
        from rigctl.fleet.inventory import load_inventory
        from rigctl.fleet.remote import run_fleet

        inventory = load_inventory(hosts_file)
        chosen = inventory.select(tags=tags or (), names=only or (), limit=limit)
        about = inventory.report(chosen, limit=limit)
        if as_json:  # stdout holds the one JSON object: these go where warnings go
            import sys

            from rigctl.fleet.remote import shown

            for line in _inventory_lines(about):
                sys.stderr.write(shown(f"rigctl fleet {command}: {line}\n"))
        result = run_fleet(command, chosen, parallel=parallel, timeout=timeout, extra=extra or [], fix=fix)
        return Outcome(f"fleet {command}", result.ok, result.to_dict(), view=_fleet_view(result, about))

    finish(f"fleet {command}", as_json, produce)


@fleet_app.command("status")
def fleet_status_cmd(*, hosts: HostsOpt = None, tag: TagOpt = None, only: OnlyOpt = None, limit: LimitOpt = None,
                     parallel: ParallelOpt = 16, timeout: TimeoutOpt = 30.0, as_json: JsonOpt = False) -> None:
    """What each host serves: rigctl units, containers and their state."""
    _fleet("status", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout, as_json=as_json,
           limit=limit)


FleetFixOpt = Annotated[
    bool,
    typer.Option("--fix", help="Run `rigctl doctor --fix` on each host (needs rigctl there; a host without it "
                               "is changed in no way and gets the patches only)."),
]


@fleet_app.command("doctor")
def fleet_doctor_cmd(*, hosts: HostsOpt = None, tag: TagOpt = None, only: OnlyOpt = None, limit: LimitOpt = None,
                     parallel: ParallelOpt = 16, timeout: TimeoutOpt = 60.0, fix: FleetFixOpt = False,
                     as_json: JsonOpt = False) -> None:
    """`rigctl doctor` on every host (remote rigctl when installed, else unit files shipped back by ssh)."""
    _fleet("doctor", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout, as_json=as_json,
           fix=fix, limit=limit)


@fleet_app.command("preflight")
def fleet_preflight_cmd(
    recipe: Annotated[str, typer.Argument(metavar="RECIPE", help="Recipe name known to the remote rigctl.")],
    *,
    hosts: HostsOpt = None, tag: TagOpt = None, only: OnlyOpt = None, limit: LimitOpt = None,
    parallel: ParallelOpt = 16, timeout: TimeoutOpt = 120.0, as_json: JsonOpt = False,
) -> None:
    """`rigctl preflight RECIPE` on every host (needs rigctl installed there)."""
    _fleet("preflight", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout,
           as_json=as_json, extra=[recipe], limit=limit)


@fleet_app.command("swap")
def fleet_swap_cmd(
    source: Annotated[str, typer.Argument(metavar="FROM", help="The deployed recipe to replace on each host.")],
    target: Annotated[str, typer.Argument(metavar="TO", help="The recipe to serve instead.")],
    *,
    hosts: HostsOpt = None, tag: TagOpt = None, only: OnlyOpt = None, limit: LimitOpt = None,
    parallel: Annotated[
        int, typer.Option("--parallel", min=1, help="Hosts swapped at once (default: one by one).")
    ] = 1,
    timeout: TimeoutOpt = 7200.0, as_json: JsonOpt = False,
) -> None:
    """`rigctl swap FROM TO` on every chosen host (needs rigctl there): each rolls back on its own failure."""
    _fleet("swap", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout,
           as_json=as_json, extra=[source, target], limit=limit)

