"""rigctl verify: prove the served model is right, not just up."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer
from typer.core import TyperCommand, TyperOption

from rigctl.cli.base import JsonOpt, OverlayOpt, SetOpt, app, finish
from rigctl.cli.output import Outcome

if TYPE_CHECKING:
    from rigctl.verify.report import VerifyReport

_STYLE = {"pass": "green", "warn": "yellow", "fail": "bold red", "error": "bold magenta", "skip": "dim"}
CHECKS_HELP = "Checks to run: {ids} (default: all)."


class _VerifyCommand(TyperCommand):
    """Names the checks in --checks' help from verify's registry (rigctl.verify.checks.REGISTRY), loaded only
    when this help is shown: the registry brings the HTTP client along, which the other commands and the
    root help must not pay for at start-up."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        from rigctl.verify.runner import check_ids

        for param in self.params:
            if isinstance(param, TyperOption) and param.name == "checks":
                param.help = CHECKS_HELP.format(ids=",".join(check_ids()))
        super().format_help(ctx, formatter)


@app.command("verify", cls=_VerifyCommand)
def verify_cmd(  # noqa: PLR0917 - typer maps each option to one parameter
    recipe: Annotated[
        str | None,
        typer.Argument(metavar="[RECIPE]", help="A recipe name or YAML path: endpoint and expectations come from it."),
    ] = None,
    url: Annotated[str | None, typer.Option("--url", help="Endpoint base URL, e.g. http://127.0.0.1:8000.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="Served model name, as /v1/models lists it.")] = None,
    context: Annotated[
        int | None, typer.Option("--context", min=256, help="Expected context length (max_model_len).")
    ] = None,
    engine: Annotated[
        str | None,
        typer.Option("--engine", metavar="KIND", help="The engine's dialect: vllm, sglang, llamacpp, tabbyapi or "
                     "openai (default: the recipe's engine.kind, else detected)."),
    ] = None,
    checks: Annotated[
        str | None,
        typer.Option("--checks", metavar="a,b", help="Checks to run (default: all)."),  # _VerifyCommand names them
    ] = None,
    timeout: Annotated[
        float | None, typer.Option("--timeout", min=1, help="Seconds one request may take (default 60).")
    ] = None,
    concurrency: Annotated[int | None, typer.Option("--concurrency", min=1, help="Soak: streams at once.")] = None,
    requests: Annotated[int | None, typer.Option("--requests", min=1, help="Soak: requests in all.")] = None,
    api_key: Annotated[
        str | None, typer.Option("--api-key", envvar="RIGCTL_API_KEY", help="Bearer token, if the server wants one.")
    ] = None,
    sets: SetOpt = None,
    overlays: OverlayOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a served model: health, model list, known answers, loops, determinism, needles, and a
    shared-prefix concurrency soak. Exit 1 when any check fails."""

    def produce() -> Outcome:
        import dataclasses
        import math

        from rigctl.errors import UsageError
        from rigctl.verify.client import Endpoint
        from rigctl.verify.report import Expectations, endpoint_for
        from rigctl.verify.runner import parse_checks, run_checks

        selected = parse_checks(checks)
        kind = engine.strip().lower() if engine is not None else None
        if timeout is not None and not math.isfinite(timeout):  # nan and inf pass typer's min=1
            raise UsageError(f"--timeout {timeout}: give a finite number of seconds")
        if recipe is not None:
            from rigctl.recipe.load import load

            loaded = load(recipe, overlays=overlays or (), sets=sets or ())
            expect = Expectations.from_recipe(loaded.recipe)
            endpoint = _installed_endpoint(loaded.recipe.name, api_key) or endpoint_for(loaded.recipe, api_key=api_key)
            if url or model:
                endpoint = Endpoint(url or endpoint.base_url, model or endpoint.model, api_key=api_key,
                                    health_path=endpoint.health_path)
            if context is not None:
                expect = dataclasses.replace(expect, context=context)
            if kind is not None:
                expect = dataclasses.replace(expect, engine=kind)
        else:
            if not url or not model:
                raise UsageError("give a RECIPE, or both --url and --model",
                                 fix="rigctl verify --url http://127.0.0.1:8000 --model NAME")
            if sets or overlays:
                raise UsageError("--set and --overlay apply to a RECIPE")
            endpoint = Endpoint(url, model, api_key=api_key)
            expect = Expectations(context=context, engine=kind)
        if timeout is not None:
            expect = dataclasses.replace(expect, request_timeout_s=timeout, health_timeout_s=min(10.0, timeout))
        if concurrency is not None or requests is not None:
            soak = expect.soak.model_copy(update={
                k: v for k, v in (("concurrency", concurrency), ("requests", requests)) if v is not None})
            expect = dataclasses.replace(expect, soak=soak)

        progress = _RichProgress() if sys.stderr.isatty() else None
        try:
            report = run_checks(endpoint, expect, selected, progress=progress)
        finally:
            if progress is not None:
                progress.close()
        payload = report.to_dict()
        return Outcome("verify", report.ok, payload, view=lambda out: _view(report, out))

    finish("verify", as_json, produce)


def _installed_endpoint(name: str, api_key: str | None) -> Any:
    """Where the installed deployment of ``name`` answers (rigctl's record of what `up` installed, which
    may differ from the recipe file by the --set/overlays it was deployed with), or None."""
    from rigctl.deploy.state import load_record
    from rigctl.places import Scope, state_dir
    from rigctl.verify.client import Endpoint

    for scope in (Scope.SYSTEM, Scope.USER):
        record = load_record(state_dir(scope), name)
        if record is not None:
            return Endpoint(record.endpoint, record.served_name, api_key=api_key, health_path=record.health_path)
    return None


def _view(report: VerifyReport, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from rigctl.util.text import LINE_LIMIT, printable

    console = Console(file=out, highlight=False, soft_wrap=False)
    # Messages quote the server (error bodies, model names): escaped, and as Text so that rich reads no markup.
    title = Text(f"verify {printable(report.endpoint.model)} at {printable(report.endpoint.base_url)}")
    table = Table(title=title, title_justify="left")
    table.add_column("CHECK", no_wrap=True)
    table.add_column("STATUS", no_wrap=True)
    table.add_column("TIME", justify="right", no_wrap=True)
    table.add_column("RESULT")
    for c in report.checks:
        table.add_row(c.id, f"[{_STYLE[c.status]}]{c.status}[/]", f"{c.duration_s:.1f}s",
                      Text(printable(c.message, LINE_LIMIT)))
    console.print(table)
    info = report.engine
    if info:
        context = info.get("context_source") or "not reported by the engine"
        doubt = f"; {info['tokenizer_doubt']}" if info.get("tokenizer_doubt") else ""
        console.print(Text(printable(f"engine: {info['dialect']} ({info['detection']}); context {context}{doubt}",
                                     LINE_LIMIT)))
    soak = report.get("soak")
    if soak is not None and soak.figures.get("completed"):
        f = soak.figures
        console.print(
            f"soak: {f['completed']} completed, {f['failed']} failed in {f['duration_s']}s; "
            f"TTFT p50/p99 {f['median_ttft_ms']}/{f['p99_ttft_ms']} ms, ITL p50/p99 {f['median_itl_ms']}/"
            f"{f['p99_itl_ms']} ms, E2E p50/p99 {f['median_e2el_ms']}/{f['p99_e2el_ms']} ms, "
            f"{f['output_throughput']} output tok/s"
        )
    failed = [c.id for c in report.checks if c.status in ("fail", "error")]
    verdict = "[green]OK[/]" if report.ok else f"[bold red]FAILED[/] ({', '.join(failed)})"
    console.print(f"verify: {verdict}")


class _RichProgress:
    """The live display on stderr while the needle and the soak run."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.fields[check]:<6} {task.description}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        )
        self._tasks: dict[str, Any] = {}
        self._started = False

    def phase(self, check: str, description: str, total: int | None = None) -> None:
        if not self._started:
            self._progress.start()
            self._started = True
        task = self._tasks.get(check)
        if task is None:
            self._tasks[check] = self._progress.add_task(description, total=total, check=check)
        else:
            self._progress.reset(task, total=total, description=description)

    def advance(self, check: str, amount: int = 1) -> None:
        if check in self._tasks:
            self._progress.advance(self._tasks[check], amount)

    def finish(self, check: str) -> None:
        task = self._tasks.pop(check, None)
        if task is not None:
            self._progress.remove_task(task)

    def close(self) -> None:
        if self._started:
            self._progress.stop()
