"""rigctl inventory | preflight."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from rigctl.cli import views
from rigctl.cli.base import (
    ForceOpt,
    GpusOpt,
    InventoryOpt,
    JsonOpt,
    OverlayOpt,
    RecipeArg,
    SetOpt,
    SystemOpt,
    UserOpt,
    app,
    finish,
    scope_hint,
)
from rigctl.cli.output import Outcome
from rigctl.util.options import split_list

if TYPE_CHECKING:
    from rigctl.host.early import PodmanCli

ChecksumsOpt = Annotated[bool, typer.Option("--checksums", help="Also verify the sha256 of every shard (cached).")]
AcceptOpt = Annotated[
    list[str] | None,
    typer.Option("--accept-license", metavar="ID", help="Record that you accept this license id (after review)."),
]
DeepOpt = Annotated[bool, typer.Option("--deep", help="Also run a real NCCL all_reduce on the chosen GPUs (slow).")]


@app.command("inventory")
def inventory_cmd(
    paths: Annotated[list[str] | None, typer.Argument(metavar="[PATH...]", help="Extra paths to probe.")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Gather this host's facts (GPUs, shm, podman, CDI, systemd, ports, disks) as one versioned document."""

    def produce() -> Outcome:
        from rigctl.host.early import start_podman_cli

        podman_cli = start_podman_cli()  # podman answers while pydantic and the facts models load
        try:
            from rigctl.host import gather_facts

            facts = gather_facts(paths or (), podman_cli=podman_cli)
        finally:
            if podman_cli is not None:
                podman_cli.cancel()
        return Outcome("inventory", True, facts.model_dump(mode="json"), view=views.facts(facts))

    finish("inventory", as_json, produce)


@app.command("preflight")
def preflight_cmd(  # noqa: PLR0917 - typer maps each parameter to an option
    recipe: RecipeArg,
    inventory: InventoryOpt = None,
    checksums: ChecksumsOpt = False,
    force: ForceOpt = None,
    gpus: GpusOpt = None,
    accept_license: AcceptOpt = None,
    deep: DeepOpt = False,
    sets: SetOpt = None,
    overlays: OverlayOpt = None,
    user: UserOpt = False,
    system: SystemOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Check that RECIPE can run on this host (or on a captured --inventory) before a long boot, for the
    service manager `up` would use with the same --user/--system (default: system as root, else user)."""

    def produce() -> Outcome:
        from rigctl.host.early import start_podman_cli

        # podman answers while the recipe and the facts models load (it is most of a gather's wait)
        podman_cli = start_podman_cli() if inventory is None else None
        try:
            return check(podman_cli)
        finally:
            if podman_cli is not None:
                podman_cli.cancel()  # reaps the calls if the recipe failed to load before the gather

    def check(podman_cli: PodmanCli | None) -> Outcome:
        from rigctl.places import resolve_scope
        from rigctl.preflight.here import preflight_here
        from rigctl.recipe.load import load

        scope = resolve_scope(user, system)
        forced, accepted = split_list(force, option="--force"), split_list(accept_license, option="--accept-license")
        selection = split_list(gpus, option="--gpus") or None
        r = load(recipe, overlays=overlays or (), sets=sets or ()).recipe
        report = preflight_here(r, inventory=inventory, podman_cli=podman_cli, accept=accepted, force=forced,
                                gpus=selection, checksums=checksums, deep=deep, scope=scope,
                                progress=views.progress.checksum_bar(checksums and not as_json))
        payload: dict[str, Any] = {
            "recipe": r.name,
            "inventory": inventory,
            "findings": [f.model_dump(mode="json") for f in report.findings],
            "gpus": [g.model_dump(mode="json") for g in report.choice.gpus],
            "layout": {"explicit": report.choice.explicit, "reasons": report.choice.reasons,
                       "problems": report.choice.problems},
            "forced": report.forced,
            "scope": str(scope),
        }
        if report.checksums is not None:
            payload["checksums"] = report.checksums
        hint = None if report.ok else scope_hint(scope, inventory, f"rigctl preflight {recipe}")
        payload["scope_hint"] = hint
        return Outcome("preflight", report.ok, payload, view=views.preflight(report, r.name, hint=hint),
                       quiet_view=views.preflight_result(report))

    finish("preflight", as_json, produce)
