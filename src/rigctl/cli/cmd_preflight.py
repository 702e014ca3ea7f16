"""rigctl inventory | preflight.

Each command starts the early probes (podman, quadlet and NVML run meanwhile), then imports its core:
the facts models, the recipe and the checks (pydantic, PyYAML, most of what it costs to start), which
loads while the probes' programs run; importing it at the top would make the probes wait for it."""

from __future__ import annotations

from typing import Any

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, load_recipe, scope_hint
from rigctl.host.early import EarlyProbes, probes_started
from rigctl.places import Scope, resolve_scope
from rigctl.util.jsonable import jsonable
from rigctl.util.lists import split_list


@app.command("inventory")
def inventory_cmd(paths: opt.ProbePathsArg = None, as_json: opt.JsonOpt = False) -> None:
    """Gather this host's facts (GPUs, shm, podman, CDI, systemd, ports, disks) as one versioned document."""

    def produce() -> Outcome:
        with probes_started() as early:  # podman and NVML answer while pydantic and the facts models load
            from rigctl.host.gather import gather_facts  # noqa: PLC0415 - the core, while the probes run

            facts = gather_facts(paths or (), early=early)
        return Outcome("inventory", True, facts.model_dump(mode="json"), view=views.facts(facts))

    finish("inventory", as_json, produce)


@app.command("preflight")
def preflight_cmd(  # noqa: PLR0917 - typer maps each parameter to an option
    recipe: opt.RecipeArg, inventory: opt.InventoryOpt = None, checksums: opt.ChecksumsOpt = False,
    force: opt.ForceOpt = None, gpus: opt.GpusOpt = None, accept_license: opt.AcceptOpt = None,
    deep: opt.DeepOpt = False, sets: opt.SetOpt = None, overlays: opt.OverlayOpt = None, user: opt.UserOpt = False,
    system: opt.SystemOpt = False, as_json: opt.JsonOpt = False,
) -> None:
    """Check that RECIPE can run on this host (or on a captured --inventory) before a long boot, for the
    service manager `up` would use with the same --user/--system (default: system as root, else user)."""

    def produce() -> Outcome:
        scope = resolve_scope(user, system)
        # podman, quadlet and NVML answer while the recipe and the facts models load (most of a gather's wait)
        with probes_started(inventory is None, scope) as early:
            return check(scope, early)

    def check(scope: Scope, early: EarlyProbes | None) -> Outcome:
        from rigctl.plan.here import preflight_here  # noqa: PLC0415 - the core, while the probes run

        forced, accepted = split_list(force, option="--force"), split_list(accept_license, option="--accept-license")
        selection = split_list(gpus, option="--gpus") or None
        r = load_recipe(recipe, overlays, sets).recipe
        report = preflight_here(r, inventory=inventory, early=early, accept=accepted, force=forced,
                                gpus=selection, checksums=checksums, deep=deep, scope=scope,
                                progress=views.progress.checksum_bar(checksums and not as_json))
        payload: dict[str, Any] = {
            "recipe": r.name,
            "inventory": inventory,
            "findings": jsonable(report.findings),
            "gpus": jsonable(report.choice.gpus),
            "layout": {"explicit": report.choice.explicit, "reasons": report.choice.reasons,
                       "problems": report.choice.problems},
            "forced": report.forced,
            "scope": str(scope),
        }
        if report.checksums is not None:
            payload["checksums"] = report.checksums
        hint = None if report.ok else scope_hint(report.other_scope, inventory, f"rigctl preflight {recipe}")
        payload["scope_hint"] = hint
        return Outcome("preflight", report.ok, payload, view=views.preflight(report, r.name, hint=hint),
                       quiet_view=views.preflight_result(report))

    finish("preflight", as_json, produce)
