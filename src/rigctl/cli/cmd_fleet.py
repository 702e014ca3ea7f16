"""rigctl fleet status|doctor|preflight|swap: a command on every host of an inventory, over ssh."""

from __future__ import annotations

import typer

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, hosts_path
from rigctl.util.lists import split_list

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
        # the fleet's core: the inventory's models and the ssh client, most of what a fleet command costs to start
        from rigctl.fleet.inventory import load_inventory  # noqa: PLC0415
        from rigctl.fleet.remote import run_fleet  # noqa: PLC0415

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

