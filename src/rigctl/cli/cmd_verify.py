"""rigctl verify: prove the served model is right, not just up.

verify's core (its checks and their HTTP client, a deployment's recipe, NVML) is imported inside the
command: most of what it costs to start (``benchmarks/cli_imports.py``), which shell completion and the
root help (both register every command) do without."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from typer.core import TyperCommand, TyperOption

from rigctl.adapters.podman import PodmanCli
from rigctl.cli import options as opt
from rigctl.cli import output, views
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, scope_choice
from rigctl.errors import UsageError
from rigctl.recipe.reference import digest_of
from rigctl.util import safefs
from rigctl.util.text import LINE_LIMIT, printable, version_line

CHECKS_HELP = "Checks to run: {ids} (default: all)."


class _VerifyCommand(TyperCommand):
    """Names the checks in --checks' help from verify's registry (rigctl.verify.checks.REGISTRY), loaded only
    when this help is shown: the registry brings the HTTP client along, which the other commands and the
    root help must not pay for at start-up."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from rigctl.verify.runner import check_ids  # noqa: PLC0415 - only for this help (see above)

        for param in self.params:
            if isinstance(param, TyperOption) and param.name == "checks":
                param.help = CHECKS_HELP.format(ids=",".join(check_ids()))
        super().format_help(ctx, formatter)


@app.command("verify", cls=_VerifyCommand)
def verify_cmd(  # noqa: PLR0917 - typer maps each option to one parameter
    recipe: opt.VerifyRecipeArg = None, url: opt.UrlOpt = None, model: opt.ModelOpt = None,
    context: opt.ContextOpt = None, engine: opt.EngineOpt = None, checks: opt.ChecksOpt = None,
    timeout: opt.RequestTimeoutOpt = None, concurrency: opt.ConcurrencyOpt = None, requests: opt.RequestsOpt = None,
    api_key: opt.ApiKeyOpt = None, export: opt.ExportOpt = None,
    sets: opt.SetOpt = None, overlays: opt.OverlayOpt = None, user: opt.UserOpt = False, system: opt.SystemOpt = False,
    as_json: opt.JsonOpt = False,
) -> None:
    """Check a served model: health, model list, known answers, loops, determinism, needles, and a
    shared-prefix concurrency soak. Exit 1 when any check fails."""

    def produce() -> Outcome:
        from rigctl.verify import subject as verify_target  # noqa: PLC0415 - the core (see above)
        from rigctl.verify.runner import parse_checks, run_checks  # noqa: PLC0415

        selected = parse_checks(checks)
        if export is not None and "soak" not in selected:
            raise UsageError("--export writes the soak's figures; the soak is not among --checks",
                             fix="add soak to --checks (or leave --checks out: all checks run)")
        deployed: Any = None
        given = verify_target.Overrides(url=url, model=model, api_key=api_key, context=context, engine=engine,
                                        timeout=timeout, concurrency=concurrency, requests=requests)
        if recipe is None:
            endpoint, expect = verify_target.for_url(given)
            if sets or overlays:
                raise UsageError("--set and --overlay apply to a RECIPE")
        else:  # the recipe's expectations, checked where it is deployed (or, not deployed, where it publishes)
            from rigctl.deploy.lookup import find_deployment  # noqa: PLC0415 - the core: the recipe's models

            deployed = find_deployment(recipe, scope_choice(user, system), overlays=overlays or (), sets=sets or ())
            if deployed.recipe_note:  # its file gone or changed since `up`: checked with the recipe as deployed
                output.warn(f"note: {printable(deployed.recipe_note, LINE_LIMIT)}")
            endpoint, expect = verify_target.for_recipe(deployed.need_recipe(), deployed.endpoint(api_key), given)

        progress = views.progress.VerifyProgress() if sys.stderr.isatty() else None
        try:
            report = run_checks(endpoint, expect, selected, progress=progress)
        finally:
            if progress is not None:
                progress.close()
        payload = report.to_dict()
        if export is not None:
            payload["export"] = _export(report, deployed, str(export))
        return Outcome("verify", report.ok, payload, view=views.verify(report))

    finish("verify", as_json, produce)


def _export(report: Any, deployed: Any, where: str) -> str:
    """Write the soak's figures to ``path`` (``verify.export``); the path written."""
    from rigctl.host.nvml import probe_gpus  # noqa: PLC0415 - the core: NVML, only for an export
    from rigctl.verify.export import gpu_facts, soak_export  # noqa: PLC0415 - the core

    soak = report.get("soak")
    record = deployed.record if deployed is not None else None
    image = record.image if record else (deployed.recipe.image if deployed is not None and deployed.recipe else None)
    digest = digest_of(image) if image else None
    if deployed is not None and digest is None:
        info = PodmanCli().container(deployed.container)
        digest = info.image_digest if info is not None else None
    gpus, note = gpu_facts(probe_gpus(), record.gpu_ids if record else [])
    doc = soak_export(soak, model=report.endpoint.model, base_url=report.endpoint.base_url,
                      recipe=deployed.name if deployed is not None else None,
                      recipe_source=record.recipe_source if record else None, image=image, image_digest=digest,
                      gpus=gpus, gpu_note=note, version=version_line(), answers=report.answers)
    head, name = os.path.split(os.path.abspath(where))
    with safefs.open_out(head) as directory:
        directory.write_atomic(safefs.check_name(name), (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode())
        return os.path.join(directory.path, name)  # where it really went
