"""rigctl fleet status|doctor|preflight|swap: a command on every host of an inventory, over ssh."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

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


def _fleet(command: str, *, hosts: str | None, tag: list[str] | None, only: list[str] | None, limit: str | None,
           allow_ssh_options: bool, parallel: int, timeout: float, as_json: bool, fix: bool = False,
           extra: list[str]) -> None:
    def produce() -> Outcome:
        # the fleet's core: the inventory's models and the ssh client, most of what a fleet command costs to start
        from rigctl.fleet.loader import load_inventory  # noqa: PLC0415
        from rigctl.fleet.pool import run_fleet  # noqa: PLC0415

        inventory = load_inventory(hosts_path(hosts))  # its own --hosts, else the root's, else the default
        chosen = inventory.select(tags=split_list(tag, option="--tag"), names=split_list(only, option="--only"),
                                  limit=limit, allow_ssh_options=allow_ssh_options)
        about = inventory.report(chosen, limit=limit)
        if as_json:  # stdout holds the one JSON object: these go where notes go
            views.inventory_notes(command, about)
        result = run_fleet(command, chosen, parallel=parallel, timeout=timeout, extra=extra, fix=fix,
                           allow_ssh_options=allow_ssh_options)
        return Outcome(f"fleet {command}", result.ok, result.to_dict(), view=views.fleet(result, about))

    finish(f"fleet {command}", as_json, produce)


_KW = inspect.Parameter.KEYWORD_ONLY
# what every fleet command takes after its own arguments: which hosts, and how many at once for how long
_CHOICE = [inspect.Parameter(name, _KW, annotation=kind, default=default) for name, kind, default in (
    ("hosts", opt.HostsOpt, None), ("tag", opt.TagOpt, None), ("only", opt.OnlyOpt, None),
    ("limit", opt.LimitOpt, None), ("allow_ssh_options", opt.AllowSshOptionsOpt, False))]


def _command(name: str, *, timeout: float, parallel: tuple[Any, int] = (opt.ParallelOpt, 16),
             fix: bool = False) -> Callable[[Callable[..., list[str]]], Callable[..., None]]:
    """Register `rigctl fleet NAME`: the decorated function takes the command's own arguments and gives the
    words the remote rigctl gets after NAME; the host choice (``_CHOICE``), --parallel, --timeout (``timeout``
    by default), --fix where ``fix``, and --json are added to its signature here, once for all four."""

    def register(words: Callable[..., list[str]]) -> Callable[..., None]:
        own = list(inspect.signature(words, eval_str=True).parameters.values())
        bounds = [inspect.Parameter("parallel", _KW, annotation=parallel[0], default=parallel[1]),
                  inspect.Parameter("timeout", _KW, annotation=opt.TimeoutOpt, default=timeout)]
        if fix:
            bounds.append(inspect.Parameter("fix", _KW, annotation=opt.FleetFixOpt, default=False))
        params = [*own, *_CHOICE, *bounds, inspect.Parameter("as_json", _KW, annotation=opt.JsonOpt, default=False)]

        def command(**given: Any) -> None:
            _fleet(name, extra=words(**{p.name: given.pop(p.name) for p in own}), **given)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]  # what typer reads
        command.__annotations__ = {p.name: p.annotation for p in params}
        command.__name__, command.__doc__ = words.__name__, words.__doc__
        return fleet_app.command(name)(command)

    return register


@_command("status", timeout=30.0)
def fleet_status_cmd() -> list[str]:
    """What each host serves: rigctl units, containers and their state."""
    return []


@_command("doctor", timeout=60.0, fix=True)
def fleet_doctor_cmd() -> list[str]:
    """`rigctl doctor` on every host (remote rigctl when installed, else unit files shipped back by ssh)."""
    return []


@_command("preflight", timeout=120.0)
def fleet_preflight_cmd(recipe: opt.RemoteRecipeArg) -> list[str]:
    """`rigctl preflight RECIPE` on every host (needs rigctl installed there)."""
    return [recipe]


@_command("swap", timeout=7200.0, parallel=(opt.SwapParallelOpt, 1))
def fleet_swap_cmd(source: opt.RemoteFromArg, target: opt.RemoteToArg) -> list[str]:
    """`rigctl swap FROM TO` on every chosen host (needs rigctl there): each rolls back on its own failure."""
    return [source, target]
