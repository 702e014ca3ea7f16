"""rigctl doctor | fleet status|doctor|preflight|swap. Thin: parse, call one core function, render."""

from __future__ import annotations

import typer

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.base import app, finish, hosts_path
from rigctl.cli.output import Outcome
from rigctl.util.options import split_list


@app.command("doctor")
def doctor_cmd(paths: opt.PathOpt = None, fix: opt.FixOpt = False, restart: opt.RestartFixedOpt = False,
               as_json: opt.JsonOpt = False) -> None:
    """Audit every serving unit on this host (quadlet .container files and .service files running
    podman/docker or an engine): restart policy, ipc/shm, start timeouts, digests, exposure, CDI, and what
    systemd runs now (failed, restarting, files changed without a daemon-reload). --fix reloads the manager
    and reads back what it holds; --restart also restarts what needs it."""

    def produce() -> Outcome:
        from rigctl.doctor.checkup import doctor

        report = doctor(paths or None, fix=fix, restart=restart)
        return Outcome("doctor", report.ok, report.to_dict(), view=views.doctor(report))

    finish("doctor", as_json, produce)


# --- several hosts -----------------------------------------------------------------------------------

fleet_app = typer.Typer(
    name="fleet",
    help="Run status, doctor, preflight or swap on every host of an inventory, over ssh.",
    no_args_is_help=True,
    rich_markup_mode=None,
)
app.add_typer(fleet_app, name="fleet")


def _fleet(command: str, *, hosts_file: str | None, tags: list[str] | None, only: list[str] | None,
           parallel: int, timeout: float, as_json: bool, extra: list[str] | None = None, fix: bool = False,
           limit: str | None = None, allow_ssh_commands: bool = False) -> None:
    def produce() -> Outcome:
        from rigctl.fleet.inventory import load_inventory
        from rigctl.fleet.remote import run_fleet

        inventory = load_inventory(hosts_path(hosts_file))  # its own --hosts, else the root's, else the default
        chosen = inventory.select(tags=split_list(tags, option="--tag"), names=split_list(only, option="--only"),
                                  limit=limit, allow_ssh_commands=allow_ssh_commands)
        about = inventory.report(chosen, limit=limit)
        if as_json:  # stdout holds the one JSON object: these go where notes go
            views.inventory_notes(command, about)
        result = run_fleet(command, chosen, parallel=parallel, timeout=timeout, extra=extra or [], fix=fix,
                           allow_ssh_commands=allow_ssh_commands)
        return Outcome(f"fleet {command}", result.ok, result.to_dict(), view=views.fleet(result, about))

    finish(f"fleet {command}", as_json, produce)


@fleet_app.command("status")
def fleet_status_cmd(
    *,
    hosts: opt.HostsOpt = None, tag: opt.TagOpt = None, only: opt.OnlyOpt = None, limit: opt.LimitOpt = None,
    allow_ssh_commands: opt.AllowSshCommandsOpt = False,
    parallel: opt.ParallelOpt = 16, timeout: opt.TimeoutOpt = 30.0, as_json: opt.JsonOpt = False,
) -> None:
    """What each host serves: rigctl units, containers and their state."""
    _fleet("status", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout, as_json=as_json,
           limit=limit, allow_ssh_commands=allow_ssh_commands)


@fleet_app.command("doctor")
def fleet_doctor_cmd(
    *,
    hosts: opt.HostsOpt = None, tag: opt.TagOpt = None, only: opt.OnlyOpt = None, limit: opt.LimitOpt = None,
    allow_ssh_commands: opt.AllowSshCommandsOpt = False,
    parallel: opt.ParallelOpt = 16, timeout: opt.TimeoutOpt = 60.0, fix: opt.FleetFixOpt = False,
    as_json: opt.JsonOpt = False,
) -> None:
    """`rigctl doctor` on every host (remote rigctl when installed, else unit files shipped back by ssh)."""
    _fleet("doctor", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout, as_json=as_json,
           fix=fix, limit=limit, allow_ssh_commands=allow_ssh_commands)


@fleet_app.command("preflight")
def fleet_preflight_cmd(
    recipe: opt.RemoteRecipeArg,
    *,
    hosts: opt.HostsOpt = None, tag: opt.TagOpt = None, only: opt.OnlyOpt = None, limit: opt.LimitOpt = None,
    allow_ssh_commands: opt.AllowSshCommandsOpt = False,
    parallel: opt.ParallelOpt = 16, timeout: opt.TimeoutOpt = 120.0, as_json: opt.JsonOpt = False,
) -> None:
    """`rigctl preflight RECIPE` on every host (needs rigctl installed there)."""
    _fleet("preflight", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout,
           as_json=as_json, extra=[recipe], limit=limit, allow_ssh_commands=allow_ssh_commands)


@fleet_app.command("swap")
def fleet_swap_cmd(
    source: opt.RemoteFromArg,
    target: opt.RemoteToArg,
    *,
    hosts: opt.HostsOpt = None, tag: opt.TagOpt = None, only: opt.OnlyOpt = None, limit: opt.LimitOpt = None,
    allow_ssh_commands: opt.AllowSshCommandsOpt = False,
    parallel: opt.SwapParallelOpt = 1, timeout: opt.TimeoutOpt = 7200.0, as_json: opt.JsonOpt = False,
) -> None:
    """`rigctl swap FROM TO` on every chosen host (needs rigctl there): each rolls back on its own failure."""
    _fleet("swap", hosts_file=hosts, tags=tag, only=only, parallel=parallel, timeout=timeout,
           as_json=as_json, extra=[source, target], limit=limit, allow_ssh_commands=allow_ssh_commands)

