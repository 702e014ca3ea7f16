"""rigctl canary | metrics: keep proving a deployment right, and say so in the format people scrape.

`metrics` with nothing deployed loads what `status` does, imported here at the top. The canary's core
(the deployment's recipe, the canary's verify checks) and a deployed recipe's load are imported inside
the command that uses them: most of what such a command costs to start (``benchmarks/cli_imports.py``),
which --help and shell completion do without."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rigctl.adapters import real_adapters
from rigctl.adapters.systemd import SystemctlCli
from rigctl.cli import options as opt
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, scope_choice
from rigctl.cli.views import canary as views
from rigctl.deploy import history, metrics
from rigctl.deploy.state import check_record_name, not_deployed, search_scopes
from rigctl.deploy.status import describe, discover_all
from rigctl.errors import InvalidInputError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.places import Scope
from rigctl.util import safefs
from rigctl.util.jsonfile import load_json
from rigctl.util.lists import split_list

if TYPE_CHECKING:
    from rigctl.deploy.lookup import FoundDeployment


@app.command("canary")
def canary_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    name: opt.CanaryNameArg, every: opt.EveryOpt = None, checks: opt.CanaryChecksOpt = None,
    on_failure: opt.OnFailureOpt = "none", after: opt.AfterOpt = 2, timeout: opt.CanaryTimeoutOpt = None,
    baseline: opt.BaselineOpt = None, off: opt.OffOpt = False, run_once: opt.RunOnceOpt = False,
    user: opt.UserOpt = False,
    system: opt.SystemOpt = False, as_json: opt.JsonOpt = False,
) -> None:
    """A systemd timer beside deployment NAME that runs verify checks every SPAN against its endpoint,
    records each result (`status`, `metrics`), and with --on-failure restart restarts it once after --after
    failures in a row; --baseline FILE (a `verify --export` of NAME) also asks the exported requests and fails
    a run whose answer changed. Without --every, --off or --run-once: the canary's state."""

    def produce() -> Outcome:
        from rigctl.deploy.lookup import find_deployment  # noqa: PLC0415 - the core (see above)

        if sum([every is not None, off, run_once]) > 1:
            raise UsageError("--every, --off and --run-once exclude each other")
        if on_failure not in ("restart", "none"):
            raise UsageError(f"--on-failure {on_failure!r}: restart or none")
        if baseline is not None and every is None:
            raise UsageError("--baseline is a setting of the canary: give it with --every",
                             fix=f"`rigctl canary {name} --every 10m --baseline {baseline}`")
        choice = scope_choice(user, system)
        target = find_deployment(name, choice, must_exist=not off)
        if target.record is None and not off:
            raise not_deployed(target.name, search_scopes(choice))
        if run_once:
            return _run_once(target)
        if off:
            return _off(target)
        if every is not None:
            return _install(target, every, checks, on_failure, after=after, timeout=timeout, baseline=baseline)
        summary = history.canary_state(target.dirs.state, target.name).summary()
        unreadable = summary is not None and summary["unreadable"] is not None  # a failing canary, said so
        return Outcome("canary", not unreadable, {"deployment": target.name, "canary": summary},
                       view=views.canary_summary(target.name, summary),
                       exit_code=ExitCode.CHECKS_FAILED if unreadable else ExitCode.OK)

    finish("canary", as_json, produce)


def _install(target: FoundDeployment, every: str, checks: str | None, on_failure: str, *, after: int,
             timeout: str | None, baseline: Path | None) -> Outcome:
    from rigctl.deploy import canary  # noqa: PLC0415 - the core

    every_s = canary.parse_span(every, option="--every")
    timeout_s = canary.parse_span(timeout, option="--timeout") if timeout else min(every_s, canary.DEFAULT_TIMEOUT_S)
    chosen = split_list(checks, option="--checks") if checks else list(canary.DEFAULT_CHECKS)
    said = {"every": every, **({"timeout": timeout} if timeout else {})}
    canary.check_settings(every_s, chosen, after, timeout_s, minimum=canary.min_interval(dict(os.environ)), said=said)
    target.need_recipe()  # each run needs the recipe's expectations: refuse now, not at every run
    assert target.record is not None
    against = _baseline(baseline, target.name) if baseline is not None else None
    change = canary.install(  # under the deployment's lock
        target.name, engine_unit=target.unit, every_s=every_s, checks=chosen, on_failure=on_failure, after=after,
        timeout_s=timeout_s, command=canary.command_for(target.name, target.scope, sys.executable),
        unit_dir=canary.systemd_dir(target.scope), state_dir=target.dirs.state,
        systemd=SystemctlCli(target.scope), now=time.time(), baseline=against)
    return Outcome("canary", True, change, view=views.canary_change(change))


def _baseline(path: Path, name: str) -> dict[str, Any]:
    """The answers of a `verify --export` file of deployment ``name``, as the canary's record keeps them."""
    from rigctl.verify.export import baseline_of  # noqa: PLC0415 - the core (verify)

    got = baseline_of(load_json(path, limit=safefs.RECORD_LIMIT), str(path))
    if got.recipe != name:
        raise UsageError(f"--baseline {path}: the export is of {got.recipe}, not of {name}",
                         fix=f"`rigctl verify {name} --export FILE` gives {name}'s answers")
    return got.to_dict()


def _off(target: FoundDeployment) -> Outcome:
    from rigctl.deploy import canary  # noqa: PLC0415 - the core

    name = check_record_name(target.name)
    change = canary.remove(name, unit_dir=canary.systemd_dir(target.scope), state_dir=target.dirs.state,
                           systemd=SystemctlCli(target.scope))  # under the deployment's lock
    return Outcome("canary", True, change, view=views.canary_change(change))


def _run_once(target: FoundDeployment) -> Outcome:
    from rigctl.deploy import canary  # noqa: PLC0415 - the core

    state = history.canary_state(target.dirs.state, target.name)
    config = state.config or history.CanaryConfig(0, list(canary.DEFAULT_CHECKS), "none", 1,
                                                  canary.DEFAULT_TIMEOUT_S)
    if target.recipe is None:
        # no recipe to check with (a record of an older rigctl whose file is gone): a failed run, recorded with
        # its reason, and a failed unit (exit 3, not a check's 1), so neither status nor systemd reads it as quiet
        why = target.recipe_error.problems[0] if target.recipe_error and target.recipe_error.problems else "none loads"
        result = canary.run_once(
            target.name, engine_unit=target.unit, scope=target.scope, state_dir=target.dirs.state,
            probe=lambda _s: canary.CanaryVerdict(False, []), systemd=SystemctlCli(target.scope), fallback=config,
            cannot_run=("recipe", f"the canary cannot run: no recipe of {target.name} loads: {why}; "
                                  f"`rigctl up RECIPE` deploys it again (its record then keeps the recipe)"))
        return Outcome("canary", False, result, view=views.canary_run(result), exit_code=ExitCode.INVALID_INPUT)
    probe = canary.verify_prober(target.recipe, target.endpoint(None), config.checks, config.baseline)
    result = canary.run_once(target.name, engine_unit=target.unit, scope=target.scope, state_dir=target.dirs.state,
                             probe=probe, systemd=SystemctlCli(target.scope), fallback=config)
    if target.recipe_note:  # the recipe file gone or changed since `up`: the journal says which recipe ran
        result.journal.insert(0, f"canary {target.name}: note: {target.recipe_note}")
    return Outcome("canary", result.ok, result, view=views.canary_run(result),
                   exit_code=ExitCode.OK if result.ok else ExitCode.CHECKS_FAILED)


# --- metrics -----------------------------------------------------------------------------------------


@app.command("metrics")
def metrics_cmd(
    textfile: opt.TextfileOpt = None, user: opt.UserOpt = False, system: opt.SystemOpt = False,
    as_json: opt.JsonOpt = False,
) -> None:
    """Every deployment as Prometheus text exposition: up, restarts, the canary's result and last run,
    the last TTFT and ITL, GPU memory planned and used. --textfile DIR writes DIR/rigctl.prom atomically."""

    def produce() -> Outcome:
        text = metrics.exposition(_rows(scope_choice(user, system)))
        path = None
        if textfile is not None:
            with safefs.open_out(textfile) as d:  # never made: a mistyped collector directory is an error
                d.write_atomic(metrics.FILE_NAME, text.encode(), mode=0o644)
                path = str(Path(d.path) / metrics.FILE_NAME)
        payload = {"textfile": path, "exposition": text}
        return Outcome("metrics", True, payload, view=views.metrics(text, path))

    finish("metrics", as_json, produce)


def _rows(choice: Scope | None) -> list[Any]:
    found = discover_all(choice)
    rows: list[Any] = []
    if not found:
        return rows
    for scope in dict.fromkeys(item.scope for item in found):
        adapters = real_adapters(scope, probe_timeout=2.0)
        try:
            for item in found:
                if item.scope == scope:
                    status = describe(item, systemd=adapters.systemd, podman=adapters.podman, probe=adapters.probe,
                                      gpu=adapters.gpu)
                    rows.append(metrics.row_of(status, _planned_mib(item.record)))
        finally:
            adapters.probe.close()
    return rows


def _planned_mib(record: Any) -> int | None:
    """The GPU memory the deployed recipe plans for (gpus.count x gpus.min_memory_mib); None when unknown."""
    if record is None or not record.recipe_source:
        return None
    from rigctl.recipe.load import load  # noqa: PLC0415 - the recipe library, only for a deployed recipe

    try:
        gpus = load(record.recipe_source).recipe.gpus
    except InvalidInputError:
        return None
    return gpus.count * gpus.min_memory_mib or None
