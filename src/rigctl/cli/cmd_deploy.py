"""rigctl up | status | logs | down | swap: deploy a recipe on this host through podman quadlets and systemd.

What `status` loads is imported here at the top (the adapters and the deployment records), so status
with nothing deployed loads no more than it did. A command's core (a recipe and its models, the planner,
the renderer, verify's HTTP client: most of what such a command costs to start, as
``benchmarks/cli_imports.py`` prints) is imported inside it, so that `status`, every command's --help and
shell completion do not pay for it."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rigctl.adapters import real_adapters
from rigctl.adapters.clock import RealClock
from rigctl.adapters.gpu_memory import NvmlGpuMemory
from rigctl.adapters.journal import Journalctl
from rigctl.adapters.podman import PodmanCli
from rigctl.adapters.systemd import SystemctlCli
from rigctl.cli import options as opt
from rigctl.cli import output, views
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, load_recipe, scope_choice, scope_hint
from rigctl.deploy.state import all_records, check_record_name, not_deployed, search_scopes
from rigctl.deploy.status import describe, discover_all
from rigctl.errors import CommandError, DeploymentNotFoundError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.host.early import EarlyProbes, probes_started
from rigctl.places import Dirs, Scope, engine_cache_root, engine_log, resolve_scope, state_dir
from rigctl.recipe.defaults import STOP_TIMEOUT_S
from rigctl.util.lists import split_list
from rigctl.util.text import LINE_LIMIT, printable

if TYPE_CHECKING:
    from rigctl.deploy.lookup import FoundDeployment
    from rigctl.plan.plan import Plan


@app.command("up")
def up_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    recipe: opt.RecipeArg, sets: opt.SetOpt = None, overlays: opt.OverlayOpt = None, force: opt.ForceOpt = None,
    gpus: opt.GpusOpt = None, user: opt.UserOpt = False, system: opt.SystemOpt = False, dry_run: opt.DryRunOpt = False,
    inventory: opt.InventoryOpt = None, no_verify: opt.NoVerifyOpt = False, keep_failed: opt.KeepFailedOpt = False,
    progress: opt.ProgressOpt = "auto", as_json: opt.JsonOpt = False,
) -> None:
    """Deploy RECIPE: preflight, render, install the quadlet, start, wait through warmup, verify."""

    def produce() -> Outcome:
        scope = resolve_scope(user, system)
        with probes_started(inventory is None, scope) as early:  # podman, quadlet and NVML answer meanwhile
            return deploy(scope, early)

    def deploy(scope: Scope, early: EarlyProbes | None) -> Outcome:
        from rigctl.deploy.up import UpOptions, plan_and_up, plan_here  # noqa: PLC0415 - the core, while the probes run

        loaded = load_recipe(recipe, overlays, sets)
        if inventory and not dry_run:
            raise UsageError("--inventory plans another box: it only goes with --dry-run")
        name, chosen = loaded.recipe.name, split_list(gpus, option="--gpus") or None
        forced = split_list(force, option="--force")
        mode = views.progress.progress_mode(progress, as_json=as_json, terminal=sys.stderr.isatty())
        if dry_run:
            plan = plan_here(loaded.recipe, scope, force=forced, gpus=chosen, inventory=inventory, early=early)
            return _dry_run(plan, inventory, f"rigctl up {recipe} --dry-run")
        adapters = real_adapters(scope)
        display = views.progress.LiveDisplay(mode=mode, clock=adapters.clock)
        try:  # plan_and_up holds the deployment's lock over the preflight and the up
            result = plan_and_up(loaded.recipe, scope, recipe_source=str(loaded.source.path), adapters=adapters,
                                 dirs=Dirs.of(scope), options=UpOptions(verify=not no_verify, keep_failed=keep_failed),
                                 force=forced, gpus=chosen, early=early,
                                 around=lambda _plan: _canary_paused(name, scope),
                                 on_progress=display.progress, on_stage=display.stage)
        finally:
            display.close()
            adapters.probe.close()
        payload = result.to_dict()
        hint = None if result.ok else scope_hint(result.other_scope, None, f"rigctl up {recipe}")
        payload["scope_hint"] = hint
        return Outcome("up", result.ok, payload, view=views.up(result, hint=hint), exit_code=result.exit_code)

    finish("up", as_json, produce)


def _dry_run(plan: Plan, inventory: str | None, again: str) -> Outcome:
    """The plan `up` would carry out (preflight, GPU choice, the rendered unit), on this host's facts or a
    captured inventory's; with what to type instead when the other scope could run it here."""
    payload = plan.to_dict()
    payload["scope_hint"] = hint = None if plan.ok else scope_hint(plan.report.other_scope, inventory, again)
    return Outcome("up", plan.ok, payload, view=views.plan(plan, inventory, hint=hint),
                   quiet_view=views.plan_result(plan, hint=hint))


# --- status ---------------------------------------------------------------------------------------


@app.command("status")
def status_cmd(user: opt.UserOpt = False, system: opt.SystemOpt = False, as_json: opt.JsonOpt = False) -> None:
    """Every rigctl-managed service on this host: state, restarts, health, endpoint, model, image, GPU memory.
    Exits 7 (SERVICE_DOWN) when one is failed, restarting, down while deployed (not stopped by `down`), or its
    manager did not answer."""

    def produce() -> Outcome:
        unreadable: list[tuple[str, str]] = []
        found = discover_all(scope_choice(user, system), unreadable)
        rows = []
        if found:  # the adapters (HTTP, podman, NVML) load only when there is a service to ask about
            for scope in dict.fromkeys(item.scope for item in found):
                adapters = real_adapters(scope, probe_timeout=2.0)
                try:
                    rows += [describe(item, systemd=adapters.systemd, podman=adapters.podman, probe=adapters.probe,
                                      gpu=adapters.gpu) for item in found if item.scope == scope]
                finally:
                    adapters.probe.close()
        failing = [row.unit for row in rows if row.failing]  # a dead model fails status: cron and CI act on it
        # a deployment record that cannot be read hides what it deployed: failing too, never silently left out
        damaged = [{"path": path, "why": why} for path, why in unreadable]
        payload: dict[str, Any] = {"services": rows, "failing": failing}
        if damaged:
            payload["unreadable_records"] = damaged
        bad = bool(failing or damaged)
        return Outcome("status", not bad, payload, view=views.status(rows, damaged),
                       exit_code=ExitCode.SERVICE_DOWN if bad else ExitCode.OK)

    finish("status", as_json, produce)


# --- logs and down: the deployment NAME means (rigctl.deploy.lookup: one lookup, one scope rule) -------


@app.command("logs")
def logs_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    recipe: opt.RecipeArg, follow: opt.FollowOpt = False, since: opt.SinceOpt = None, tail: opt.TailOpt = None,
    restart_wait: opt.RestartWaitOpt = 120.0, user: opt.UserOpt = False, system: opt.SystemOpt = False,
    as_json: opt.JsonOpt = False,
) -> None:
    """The engine's output, with the recipe's known crash signatures highlighted and explained.
    With -f: exit 0 once the unit is stopped, 4 when it failed for good or no new container came."""

    def produce() -> Outcome:
        from rigctl.deploy import logs as logmod  # noqa: PLC0415 - the core (recipes, verify's signatures)
        from rigctl.deploy.lookup import find_deployment  # noqa: PLC0415 - the core (a recipe and its models)

        target = find_deployment(recipe, scope_choice(user, system))
        if follow and not as_json:
            return _follow(target, tail=tail, since=since, restart_wait_s=restart_wait)
        lines = logmod.collect(container=target.container, unit=target.unit, podman=PodmanCli(),
                               journal=Journalctl(target.scope), signatures=target.signatures, record=target.record,
                               since=since, tail=tail, engine_log=_engine_log(target))
        hits = [ln.signature for ln in lines if ln.signature is not None]
        return Outcome("logs", True, {"recipe": target.name, "container": target.container, "lines": lines,
                                      "signatures": hits}, view=views.logs(lines))

    finish("logs", as_json, produce)


def _engine_log(target: FoundDeployment) -> Path:
    """Where the target unit's engine log is: as its container named it at `up` (the record), else below
    %S of the manager that runs it (a user manager is asked)."""
    if target.record is not None and target.record.engine_log:  # a record's path is checked when it is read
        return Path(target.record.engine_log)
    env = SystemctlCli(target.scope).manager_environment() if target.scope == Scope.USER else None
    return engine_log(target.scope, target.unit, env)


def _cache_root(target: FoundDeployment) -> Path | None:
    """Where the target's manager keeps engine caches (%C/rigctl/engine-cache), when its record names one."""
    if target.record is None or not target.record.engine_cache:
        return None
    env = SystemctlCli(target.scope).manager_environment() if target.scope == Scope.USER else None
    return engine_cache_root(target.scope, env)


def _follow(target: FoundDeployment, *, tail: int | None, since: str | None, restart_wait_s: float) -> Outcome:
    """``logs -f``: the kept output of the last failed warmup, then the service's output as it comes,
    across restarts (printed as it comes: the stream itself is this command's artefact)."""
    from rigctl.deploy import logs as logmod  # noqa: PLC0415 - the core, as in logs

    if target.recipe is not None:  # the next container comes restart_sec after one exits
        restart_wait_s = max(restart_wait_s, target.recipe.service.restart_sec + 30.0)
    end = logmod.FollowEnd()
    source = views.log_lines(sys.stdout, logmod.last_failure(target.record if since is None else None,
                                                             target.signatures))
    for line in logmod.follow_service(container=target.container, unit=target.unit, podman=PodmanCli(),
                                      journal=Journalctl(target.scope), systemd=SystemctlCli(target.scope),
                                      clock=RealClock(), signatures=target.signatures, tail=tail, since=since,
                                      restart_wait_s=restart_wait_s, end=end):
        source = views.log_lines(sys.stdout, [line], source=source)
    return Outcome("logs", end.ok, {}, view=None, exit_code=ExitCode.OK if end.ok else ExitCode.DEPLOY_FAILED)


@contextlib.contextmanager
def _canary_paused(name: str, scope: Scope) -> Iterator[None]:
    """The deployment's canary (if it has one) stopped while `up` replaces or restarts its engine, started again
    after, whatever `up` did: its runs would otherwise record the restart as failures (and turn a scraped
    rigctl_canary_ok to 0 on every deployment). The first run after comes one interval later."""
    from rigctl.deploy import canary  # noqa: PLC0415 - the core (the canary's recipes and verify)

    units = SystemctlCli(scope)
    try:
        held = canary.pause(name, unit_dir=canary.systemd_dir(scope), state_dir=state_dir(scope), systemd=units)
    except CommandError as err:  # no reason to refuse the deployment: its runs meanwhile may fail, that is all
        output.warn(f"warning: {name}'s canary could not be stopped during up: {err.message}")
        held = None
    try:
        yield
    finally:
        if held is not None:
            try:
                canary.resume(held, systemd=units)
            except CommandError as err:
                output.warn(f"warning: {held.timer} could not be started again after up: {err.message}; "
                            f"`rigctl canary {name} --every SPAN` installs it again")


@app.command("down")
def down_cmd(
    recipe: opt.RecipeArg, remove: opt.RemoveOpt = False, user: opt.UserOpt = False, system: opt.SystemOpt = False,
    as_json: opt.JsonOpt = False,
) -> None:
    """Stop RECIPE's service (idempotent) and report whether its GPUs were released."""

    def produce() -> Outcome:
        # the core: a deployment's recipe and its models, the canary's units
        from rigctl.deploy.canary import systemd_dir  # noqa: PLC0415
        from rigctl.deploy.down import down  # noqa: PLC0415
        from rigctl.deploy.lookup import find_deployment  # noqa: PLC0415

        # a recipe not deployed is no error here: `down` is done when there is nothing to stop; a name that is
        # neither a deployment, a recipe nor a unit systemd knows is (exit 5, with the deployments it is near)
        choice = scope_choice(user, system)
        found = find_deployment(recipe, choice, must_exist=False)
        name = check_record_name(found.name)  # a name, never a path: it names the lock and the record
        unknown = _not_deployed(recipe, choice) if found.record is None and found.recipe is None else None
        result = down(name, unit=found.unit, container=found.container, unit_dir=found.dirs.units,  # locks it
                      state_dir=found.dirs.state, remove=remove,
                      stop_timeout_s=found.recipe.service.stop_timeout_s if found.recipe else STOP_TIMEOUT_S,
                      systemd=SystemctlCli(found.scope), podman=PodmanCli(), gpu=NvmlGpuMemory(), clock=RealClock(),
                      canary_units=SystemctlCli(found.scope), canary_dir=systemd_dir(found.scope),
                      engine_log=_engine_log(found) if remove else None, unknown=unknown,
                      cache_root=_cache_root(found) if remove else None)

        return Outcome("down", result.stopped, result, view=views.down(result))

    finish("down", as_json, produce)


def _not_deployed(name: str, choice: Scope | None) -> DeploymentNotFoundError:
    """The "not deployed" error (exit 5), naming the deployments of the searched scopes ``name`` is near."""
    import difflib  # noqa: PLC0415 - only for a name that is not there

    searched = search_scopes(choice)
    error = not_deployed(name, searched, recipe_too=True)
    known = sorted({r.recipe for scope in searched for r in all_records(Dirs.of(scope).state)})
    close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
    if close:
        error.fix = f"did you mean {' or '.join(close)}? {error.fix}"
    return error


# --- swap -----------------------------------------------------------------------------------------


@app.command("swap")
def swap_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    source: opt.FromArg, target: opt.ToArg, sets: opt.SetOpt = None, overlays: opt.OverlayOpt = None,
    force: opt.ForceOpt = None, gpus: opt.GpusOpt = None, release_timeout: opt.ReleaseTimeoutOpt = 120.0,
    user: opt.UserOpt = False, system: opt.SystemOpt = False, progress: opt.ProgressOpt = "auto",
    as_json: opt.JsonOpt = False,
) -> None:
    """Replace FROM by TO: preflight TO (the GPU memory FROM holds counted free), stop FROM, wait for its GPU memory,
    up and verify TO; on any failure stop TO and bring FROM back. Exit 0 swapped, 4 rolled back,
    70 rollback failed, 1 TO's preflight refused (nothing stopped)."""

    def produce() -> Outcome:
        # the core: both recipes, the planner, the renderer and verify
        from rigctl.deploy.canary import systemd_dir  # noqa: PLC0415
        from rigctl.deploy.lookup import find_deployment  # noqa: PLC0415
        from rigctl.deploy.swap import (  # noqa: PLC0415
            CanaryPlace,
            HostSwapDeploy,
            Side,
            SwapOptions,
            resolve_source,
            swap,
        )

        # TO goes where FROM is deployed; FROM not deployed there refuses the swap (resolve_source)
        origin = find_deployment(source, scope_choice(user, system), must_exist=False)
        if origin.recipe_note:  # FROM's file gone or changed since `up`: a rollback brings back FROM as deployed
            output.warn(f"note: {printable(origin.recipe_note, LINE_LIMIT)}")
        scope, dirs = origin.scope, origin.dirs
        from_side = resolve_source(origin, source)
        to_loaded = load_recipe(target, overlays, sets)
        to_side = Side(to_loaded.recipe, str(to_loaded.source.path))

        mode = views.progress.progress_mode(progress, as_json=as_json, terminal=sys.stderr.isatty())
        adapters = real_adapters(scope)
        display = views.progress.LiveDisplay(mode=mode, clock=adapters.clock)
        deploy = HostSwapDeploy(scope, adapters=adapters, dirs=dirs, force=split_list(force, option="--force"),
                                gpus=split_list(gpus, option="--gpus") or None, on_progress=display.progress,
                                on_stage=display.stage,
                                canary=CanaryPlace(systemd_dir(scope), SystemctlCli(scope), sys.executable))
        try:  # swap() holds both services' locks throughout
            result = swap(from_side, to_side, deploy=deploy, gpu=adapters.gpu, clock=adapters.clock,
                          options=SwapOptions(release_timeout_s=release_timeout),
                          on_step=None if as_json else views.progress.swap_step, on_wait=display.stage)
        finally:
            display.close()
            adapters.probe.close()
        return Outcome("swap", result.ok, result.to_dict(), view=views.swap(result), exit_code=result.exit_code)

    finish("swap", as_json, produce)
