"""rigctl up | status | logs | down | swap: deploy a recipe on this host through podman quadlets and systemd."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from rigctl.cli.base import InventoryOpt, JsonOpt, OverlayOpt, RecipeArg, SetOpt, app, finish
from rigctl.cli.output import LINE_LIMIT, Outcome, printable

if TYPE_CHECKING:
    from rigctl.deploy.plan import Plan
    from rigctl.deploy.state import DeploymentRecord
    from rigctl.deploy.up import UpResult
    from rigctl.places import Scope
    from rigctl.preflight.finding import Finding
    from rigctl.recipe.model import Recipe

UserOpt = Annotated[bool, typer.Option("--user", help="User scope: ~/.config/containers/systemd, systemctl --user.")]
SystemOpt = Annotated[bool, typer.Option("--system", help="System scope: /etc/containers/systemd (root).")]


def _split(values: list[str] | None) -> tuple[str, ...]:
    return tuple(v.strip() for item in values or [] for v in item.split(",") if v.strip())


@app.command("up")
def up_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    recipe: RecipeArg,
    sets: SetOpt = None,
    overlays: OverlayOpt = None,
    force: Annotated[list[str] | None, typer.Option("--force", metavar="ID,...",
                                                    help="Downgrade these preflight failures to warnings.")] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", metavar="IDS", help="Explicit GPUs: indices or UUIDs.")] = None,
    user: UserOpt = False,
    system: SystemOpt = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Preflight and render; install nothing.")] = False,
    inventory: InventoryOpt = None,
    no_verify: Annotated[bool, typer.Option("--no-verify", help="Skip smoke and repetition after ready.")] = False,
    keep_failed: Annotated[bool, typer.Option(
        "--keep-failed", help="Leave a unit that died in warmup to systemd's restarts; default: stop it.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Deploy RECIPE: preflight, render, install the quadlet, start, wait through warmup, verify."""

    def produce() -> Outcome:
        from rigctl.adapters import real_adapters
        from rigctl.deploy.up import UpOptions, plan_here, up
        from rigctl.errors import UsageError
        from rigctl.places import Dirs, locked, resolve_scope
        from rigctl.recipe.load import load

        loaded = load(recipe, overlays=overlays or (), sets=sets or ())
        scope = resolve_scope(user, system)
        if inventory and not dry_run:
            raise UsageError("--inventory plans another box: it only goes with --dry-run")
        name, chosen = loaded.recipe.name, _split([gpus] if gpus else None) or None
        if dry_run:
            plan = plan_here(loaded.recipe, scope, force=_split(force), gpus=chosen, inventory=inventory)
            return _dry_run(plan, inventory)
        display = _LiveDisplay(enabled=not as_json and sys.stderr.isatty(), quiet=as_json)
        adapters = real_adapters(scope)
        try:
            with locked(name, f"up {name}"):
                display.stage("preflight")
                plan = plan_here(loaded.recipe, scope, force=_split(force), gpus=chosen)
                result = up(plan, recipe_source=str(loaded.source.path), adapters=adapters, dirs=Dirs.of(scope),
                            options=UpOptions(verify=not no_verify, keep_failed=keep_failed),
                            on_progress=display.progress, on_stage=display.stage)
        finally:
            display.close()
            adapters.probe.close()
        return Outcome("up", result.ok, result.to_dict(), view=lambda out: _up_view(out, result),
                       exit_code=result.exit_code)

    finish("up", as_json, produce)


def _dry_run(plan: Plan, inventory: str | None) -> Outcome:
    """The plan `up` would carry out (preflight, GPU choice, the rendered unit), on this host's facts or a
    captured inventory's."""
    from rigctl.cli.cmd_preflight import report_view

    def view(out: TextIO) -> None:
        report_view(plan.report, plan.recipe.name)(out)
        where = f"inventory {inventory}" if inventory else "this host"
        out.write(f"\nplanned on {where}: podman {plan.to_dict()['podman_version']}"
                  + (f" with quadlet {plan.to_dict()['quadlet_version']}" if plan.quadlet_version else "") + "\n")
        if plan.report.choice.gpus:
            for g in plan.report.choice.gpus:
                out.write(f"  would use GPU {g.index}: {printable(g.name)} ({printable(g.uuid)})\n")
        for reason in plan.report.choice.problems:
            out.write(f"  layout: {printable(reason, LINE_LIMIT)}\n")
        if plan.rendered is not None:
            for f in plan.rendered.files:
                out.write(f"\n# {'would install' if plan.ok else 'would be installed once preflight passes'}: "
                          f"{plan.unit_dir}/{f.name}  (unit {plan.rendered.service_name})\n{f.text}")
            for note in plan.rendered.notes:
                out.write(f"# render note ({note.kind}): {note.message}\n")
        if plan.render_error:
            out.write(f"\ncannot render the unit: {printable(plan.render_error, LINE_LIMIT)}\n")
        for line in plan.notes:
            out.write(f"\n{printable(line, LINE_LIMIT)}\n")
        out.write("\ndry run: nothing was installed or started\n")

    return Outcome("up", plan.ok, plan.to_dict(), view=view)


class _LiveDisplay:
    """The warmup display on stderr: phase, elapsed against the budget, time since the last output line."""

    def __init__(self, *, enabled: bool, quiet: bool) -> None:
        self.quiet = quiet
        self._live: Any = None
        if enabled:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(stderr=True)
            self._live = Live(console=self._console, refresh_per_second=8, transient=True)
            self._live.start()

    def stage(self, text: str) -> None:
        if self.quiet:
            return
        if self._live is not None:
            self._console.print(f"[dim]- {text}[/dim]", highlight=False)
        else:
            sys.stderr.write(f"- {text}\n")

    def progress(self, p: Any) -> None:
        if self._live is None:
            return
        from rich.text import Text

        line = Text()
        line.append(f"{p.phase:<28}", style="bold cyan")
        line.append(f" {p.elapsed_s:6.1f}s / {p.budget_s}s")
        line.append(f"   quiet {p.since_output_s:4.0f}s / {p.stall_budget_s}s", style="dim")
        line.append(f"   unit {p.unit_active}/{p.unit_sub}", style="dim")
        if p.last_line:
            line.append("\n  " + p.last_line[-140:], style="dim")
        self._live.update(line)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


def _findings_view(out: TextIO, findings: list[Finding]) -> None:
    for f in findings:
        if f.severity in ("fail", "error", "warn"):
            out.write(f"  {f.severity:<5} {f.id}: {f.message}\n")
            if f.fix:
                out.write(f"        fix: {f.fix}\n")


def _up_view(out: TextIO, r: UpResult) -> None:
    if r.action == "refused":
        out.write(f"{r.recipe}: preflight refused the deployment (nothing installed):\n")
        _findings_view(out, r.preflight)
        out.write("  (--force ID,... downgrades a forceable failure to a warning)\n")
        return
    _findings_view(out, [f for f in r.preflight if f.severity == "warn"])
    w = r.wait
    if w is not None and w.status != "ready":
        out.write(f"{r.recipe}: {w.status.upper()} after {w.elapsed_s:.1f}s in phase '{w.phase}': "
                  f"{printable(w.detail, LINE_LIMIT)}\n")
        out.write(f"  unit {r.unit} ({r.scope}); " + (
            "stopped so it does not restart-loop; the unit file stays installed\n" if r.stopped_after_failure
            else "left to systemd\n"))
        if w.tail:
            out.write("  last output:\n")
            for line in w.tail[-15:]:
                out.write(f"    | {printable(line, LINE_LIMIT)}\n")
        _signatures_view(out, r.signatures)
        if not r.signatures:
            out.write("  no known crash signature of this recipe matched; see `rigctl logs " + r.recipe + "`\n")
        return
    verb = {"unchanged": "already deployed and healthy; nothing changed", "installed": "installed and started",
            "replaced": "unit changed: replaced and restarted", "restarted": "restarted (was not healthy)",
            "started": "started", "attached": "was already warming up; watched it to ready"}.get(r.action, r.action)
    out.write(f"{r.recipe}: {verb}\n")
    out.write(f"  endpoint  {r.endpoint}/v1  (model {r.served_name})\n")
    out.write(f"  unit      {r.unit} ({r.scope}) from {', '.join(r.unit_files)}\n")
    if w is not None:
        out.write(f"  ready in  {w.elapsed_s:.1f}s\n")
    out.write(f"  restarts  {r.restarts}\n")
    for warning in [r.max_model_len_warning] if r.max_model_len_warning else []:
        out.write(f"  warning   {warning}\n")
    for note in r.render_notes:
        out.write(f"  note      {note.kind}: {printable(note.message, LINE_LIMIT)}\n")
    if r.checks is not None:
        for c in r.checks.results:
            out.write(f"  {c['status']:<5} {c['id']}: {c['message']}\n")
        _signatures_view(out, r.signatures)
    if not r.ok:
        out.write(f"  {r.message}\n")


def _signatures_view(out: TextIO, signatures: list[Any]) -> None:
    for s in signatures:
        out.write(f"  known crash signature '{s.id}': {printable(s.line, LINE_LIMIT)}\n")
        out.write(f"    meaning: {s.meaning}\n    remedy:  {s.remedy}\n")
        if s.link:
            out.write(f"    see:     {s.link}\n")


# --- status ---------------------------------------------------------------------------------------


@app.command("status")
def status_cmd(user: UserOpt = False, system: SystemOpt = False, as_json: JsonOpt = False) -> None:
    """Every rigctl-managed service on this host: state, restarts, health, endpoint, model, image, GPU memory."""

    def produce() -> Outcome:
        import os

        from rigctl.deploy.status import discover
        from rigctl.places import Scope, install_dir, resolve_scope, state_dir

        if user or system:
            scopes = [resolve_scope(user, system)]
        else:
            scopes = [Scope.SYSTEM, Scope.USER] if os.geteuid() == 0 else [Scope.USER]
        found = [item for scope in scopes for item in discover(scope, install_dir(scope), state_dir(scope))]
        rows = []
        if found:  # the adapters (HTTP, podman, NVML) load only when there is a service to ask about
            from rigctl.adapters.gpu_memory import NvmlGpuMemory
            from rigctl.adapters.podman import PodmanCli
            from rigctl.adapters.probe import HttpProbe
            from rigctl.adapters.systemd import SystemctlCli
            from rigctl.deploy.status import describe

            podman, probe, gpu = PodmanCli(), HttpProbe(timeout=2.0), NvmlGpuMemory()
            try:
                for item in found:
                    rows.append(describe(item, systemd=SystemctlCli(item.scope), podman=podman, probe=probe,
                                         gpu=gpu))
            finally:
                probe.close()
        services = [r.to_dict() for r in rows]

        def view(out: TextIO) -> None:
            if not services:
                out.write("no rigctl-managed services on this host\n")
                return
            for service in services:  # records and unit files are read from disk: their strings shown escaped
                s: dict[str, Any] = {k: printable(x) if isinstance(x, str) else x for k, x in service.items()}
                uptime = "-" if s["uptime_s"] is None else _duration(s["uptime_s"])
                gpu_mem = "n/a" if s["gpu_memory_mib"] is None else f"{s['gpu_memory_mib']} MiB"
                out.write(f"{s['unit']} ({s['scope']})  {s['active']}/{s['sub']}  health {s['health']}\n")
                out.write(f"  restarts {s['restarts']} (Restart={s['restart_policy'] or '?'})  up {uptime}  "
                          f"GPU memory {gpu_mem}\n")
                out.write(f"  endpoint {s['endpoint'] or '-'}  model {s['model'] or '-'}\n")
                out.write(f"  image {s['image'] or '-'}\n")
                if s["restart_policy"] and s["restart_policy"] != "always":
                    out.write(f"  warning: Restart={s['restart_policy']}: an engine that exits 0 on a crash stays "
                              "down; use Restart=always\n")
                if s["last_failure"]:
                    lf = s["last_failure"]
                    out.write(f"  last failed warmup: {printable(lf.get('status'))}: "
                              f"{printable(lf.get('detail'), LINE_LIMIT)} (signatures: "
                              f"{printable(', '.join(map(str, lf.get('signatures') or [])) or 'none')})\n")

        return Outcome("status", True, {"services": services}, view=view)

    finish("status", as_json, produce)


def _duration(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


# --- logs and down: find the deployment by recipe name or path ------------------------------------


def _find_record(recipe: str, scope: Scope) -> tuple[DeploymentRecord | None, Recipe | None]:
    from rigctl.deploy import state as records
    from rigctl.errors import InvalidInputError
    from rigctl.places import state_dir
    from rigctl.recipe.load import load

    record = records.load_record(state_dir(scope), recipe)
    loaded: Recipe | None = None
    for candidate in [record.recipe_source if record else None, recipe]:
        if not candidate:
            continue
        try:
            loaded = load(candidate).recipe
            break
        except InvalidInputError:
            continue
    if record is None and loaded is not None:
        record = records.load_record(state_dir(scope), loaded.name)
    return record, loaded


def _names(recipe: str, record: DeploymentRecord | None, loaded: Recipe | None) -> tuple[str, str, str]:
    """(recipe name, container, systemd unit) of a deployment: its record first, else its recipe."""
    name = record.recipe if record else loaded.name if loaded else recipe
    container = record.container if record else loaded.container_name if loaded else f"rigctl-{recipe}"
    unit = record.unit if record else f"{container}.service"
    return name, container, unit


@app.command("logs")
def logs_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    recipe: RecipeArg,
    follow: Annotated[bool, typer.Option(
        "--follow", "-f", help="Keep printing new output, across restarts, until the unit stops for good.")] = False,
    since: Annotated[str | None, typer.Option("--since", help="Only output after this (e.g. 10m, 2024-01-01).")] = None,
    tail: Annotated[int | None, typer.Option("--tail", "-n", help="Only the last N lines.")] = None,
    restart_wait: Annotated[float, typer.Option(
        "--restart-wait", min=1, metavar="SECONDS",
        help="With -f: how long to wait for the next container after one exits (at least the recipe's "
             "restart_sec + 30).")] = 120.0,
    user: UserOpt = False,
    system: SystemOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """The engine's output, with the recipe's known crash signatures highlighted and explained.
    With -f: exit 0 once the unit is stopped, 4 when it failed for good or no new container came."""

    def produce() -> Outcome:
        from rigctl.adapters.journal import Journalctl
        from rigctl.adapters.podman import PodmanCli
        from rigctl.deploy import logs as logmod
        from rigctl.errors import DeployError
        from rigctl.places import resolve_scope

        scope = resolve_scope(user, system)
        record, loaded = _find_record(recipe, scope)
        if record is None and loaded is None:
            raise DeployError(f"no deployment and no recipe named {recipe!r}", fix="`rigctl status` lists deployments")
        name, container, unit = _names(recipe, record, loaded)
        signatures = list(loaded.known_issues.signatures) if loaded else []
        podman = PodmanCli()
        if follow and not as_json:
            wait = max(restart_wait, loaded.service.restart_sec + 30.0) if loaded else restart_wait
            return _follow(container=container, unit=unit, scope=scope, podman=podman, signatures=signatures,
                           record=record if since is None else None, tail=tail, since=since, restart_wait_s=wait)
        lines = logmod.collect(container=container, unit=unit, podman=podman, journal=Journalctl(scope),
                               signatures=signatures, record=record, since=since, tail=tail)
        hits = [ln.signature.to_dict() for ln in lines if ln.signature is not None]
        return Outcome("logs", True, {"recipe": name, "container": container, "lines": [ln.to_dict() for ln in lines],
                                      "signatures": hits},
                       view=lambda out: _write_lines(out, lines))

    finish("logs", as_json, produce)


def _follow(
    *, container: str, unit: str, scope: Scope, podman: Any, signatures: list[Any], record: DeploymentRecord | None,
    tail: int | None, since: str | None, restart_wait_s: float,
) -> Outcome:
    """``logs -f``: the kept output of the last failed warmup, then the service's output as it comes,
    across restarts (printed as it comes: the stream itself is this command's artefact)."""
    from rigctl.adapters.clock import RealClock
    from rigctl.adapters.journal import Journalctl
    from rigctl.adapters.systemd import SystemctlCli
    from rigctl.deploy import logs as logmod
    from rigctl.exitcodes import ExitCode

    end = logmod.FollowEnd()
    source = _print_lines(sys.stdout, logmod.last_failure(record, signatures))
    for line in logmod.follow_service(container=container, unit=unit, podman=podman, journal=Journalctl(scope),
                                      systemd=SystemctlCli(scope), clock=RealClock(), signatures=signatures,
                                      tail=tail, since=since, restart_wait_s=restart_wait_s, end=end):
        source = _print_lines(sys.stdout, [line], source=source)
    return Outcome("logs", end.ok, {}, view=None, exit_code=ExitCode.OK if end.ok else ExitCode.DEPLOY_FAILED)


def _write_lines(out: TextIO, lines: list[Any]) -> None:
    _print_lines(out, lines, summary=True)


def _print_lines(out: TextIO, lines: list[Any], *, summary: bool = False, source: str | None = None) -> str | None:
    """Write log lines; ``source`` is the source of the line written before (a stream is printed line by
    line). Returns the source of the last line written."""
    color = out.isatty()
    for ln in lines:
        if ln.source != source and ln.source == "last-failure":
            out.write("--- output of the last failed warmup, kept by rigctl ---\n")
        elif ln.source != source and source == "last-failure":
            out.write("--- current container ---\n")
        source = ln.source
        line = printable(ln.text, None)  # the engine's output: its escape sequences are shown, not obeyed
        if ln.signature is None:
            out.write(line + "\n")
            continue
        text = f"\x1b[1;31m{line}\x1b[0m" if color else f">> {line}"
        out.write(f"{text}\n   [{ln.signature.id}] {ln.signature.meaning}\n   remedy: {ln.signature.remedy}\n")
    out.flush()
    if summary and not lines:
        out.write("(no output: the container is not running and no journal keeps its output)\n")
    return source


@app.command("down")
def down_cmd(
    recipe: RecipeArg,
    remove: Annotated[bool, typer.Option("--remove", help="Also remove the unit files and rigctl's record.")] = False,
    user: UserOpt = False,
    system: SystemOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Stop RECIPE's service (idempotent) and report whether its GPUs were released."""

    def produce() -> Outcome:
        from rigctl.adapters.clock import RealClock
        from rigctl.adapters.gpu_memory import NvmlGpuMemory
        from rigctl.adapters.podman import PodmanCli
        from rigctl.adapters.systemd import SystemctlCli
        from rigctl.deploy.down import down
        from rigctl.deploy.state import check_record_name
        from rigctl.places import install_dir, locked, resolve_scope, state_dir

        scope = resolve_scope(user, system)
        record, loaded = _find_record(recipe, scope)
        name, container, unit = _names(recipe, record, loaded)
        stop_timeout = loaded.service.stop_timeout_s if loaded else 120
        with locked(check_record_name(name), f"down {name}"):  # a name, never a path: it names the lock
            result = down(name, unit=unit, container=container, unit_dir=install_dir(scope),
                          state_dir=state_dir(scope), remove=remove, stop_timeout_s=stop_timeout,
                          systemd=SystemctlCli(scope), podman=PodmanCli(), gpu=NvmlGpuMemory(), clock=RealClock())

        def view(out: TextIO) -> None:
            out.write(f"{result.recipe}: {result.message}\n")
            for path in result.removed:
                out.write(f"  removed {path}\n")
            if not result.gpu_ids:
                out.write("  GPUs: none in this layout\n")
            elif result.gpus_released is None:
                out.write(f"  GPUs {','.join(result.gpu_ids)}: release not verifiable here (no NVML)\n")
            else:
                out.write(f"  GPUs {','.join(result.gpu_ids)}: "
                          + ("released\n" if result.gpus_released else "STILL IN USE by some process\n"))

        return Outcome("down", result.stopped, result.to_dict(), view=view)

    finish("down", as_json, produce)


# --- swap -----------------------------------------------------------------------------------------


def _swap_view(result: Any) -> Any:
    def view(out: TextIO) -> None:
        for step in result.steps:
            out.write(f"  {'ok  ' if step.ok else 'FAIL'} {step.name:<15} {step.message}\n")
        if result.outcome == "rollback-failed":
            out.write("\n" + "!" * 78 + f"\n!! {result.message}\n" + "!" * 78 + "\n")
            out.write("what to do now:\n")
            for item in result.todo:
                out.write(f"  - {item}\n")
            return
        out.write(f"{result.outcome}: {result.message}\n")

    return view


@app.command("swap")
def swap_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    source: Annotated[str, typer.Argument(metavar="FROM", help="The deployed recipe to replace (name or path).")],
    target: Annotated[str, typer.Argument(metavar="TO", help="The recipe to serve instead (name or path).")],
    sets: SetOpt = None,
    overlays: OverlayOpt = None,
    force: Annotated[list[str] | None, typer.Option("--force", metavar="ID,...",
                                                    help="Downgrade these preflight failures of TO.")] = None,
    gpus: Annotated[str | None, typer.Option("--gpus", metavar="IDS", help="Explicit GPUs for TO.")] = None,
    release_timeout: Annotated[float, typer.Option(
        "--release-timeout", min=0, help="Seconds to wait for FROM's GPU memory to be released.")] = 120.0,
    user: Annotated[bool, typer.Option("--user", help="User scope (systemctl --user).")] = False,
    system: Annotated[bool, typer.Option("--system", help="System scope (root).")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Replace FROM by TO: preflight TO (FROM's GPUs counted free), stop FROM, wait for its GPU memory,
    up and verify TO; on any failure stop TO and bring FROM back. Exit 0 swapped, 4 rolled back,
    70 rollback failed, 1 TO's preflight refused (nothing stopped)."""

    def produce() -> Outcome:
        from rigctl.adapters import real_adapters
        from rigctl.deploy.state import load_record
        from rigctl.deploy.swap import HostSwapDeploy, Side, SwapOptions, resolve_source, swap
        from rigctl.errors import InvalidInputError
        from rigctl.places import Dirs, resolve_scope
        from rigctl.recipe.load import load

        scope = resolve_scope(user, system)
        dirs = Dirs.of(scope)
        try:
            from_loaded = load(source)
        except InvalidInputError:
            # A deployment made from a path is found by its name through its record.
            record = load_record(dirs.state, source)
            if record is None or not record.recipe_source:
                raise
            from_loaded = load(record.recipe_source)
        from_side = resolve_source(from_loaded.recipe, str(from_loaded.source.path), state_dir=dirs.state)
        to_loaded = load(target, overlays=overlays or (), sets=sets or ())
        to_side = Side(to_loaded.recipe, str(to_loaded.source.path))

        def progress(step: Any) -> None:
            if not as_json:
                sys.stderr.write(f"- {step.name}: {'ok' if step.ok else 'FAILED'}\n")

        adapters = real_adapters(scope)
        deploy = HostSwapDeploy(scope, adapters=adapters, dirs=dirs, force=_split(force),
                                gpus=_split([gpus] if gpus else None) or None)
        try:  # swap() holds both services' locks throughout
            result = swap(from_side, to_side, deploy=deploy, gpu=adapters.gpu, clock=adapters.clock,
                          options=SwapOptions(release_timeout_s=release_timeout), on_step=progress)
        finally:
            adapters.probe.close()
        return Outcome("swap", result.ok, result.to_dict(), view=_swap_view(result), exit_code=result.exit_code)

    finish("swap", as_json, produce)
