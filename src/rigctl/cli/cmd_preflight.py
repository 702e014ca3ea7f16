"""rigctl inventory | preflight."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from rigctl.cli.base import InventoryOpt, JsonOpt, OverlayOpt, RecipeArg, SetOpt, app, finish
from rigctl.cli.output import LINE_LIMIT, Outcome
from rigctl.cli.output import for_rich as v

if TYPE_CHECKING:
    from collections.abc import Callable

    from rigctl.host.early import PodmanCli
    from rigctl.host.facts import HostFacts
    from rigctl.preflight.runner import PreflightReport

ForceOpt = Annotated[
    list[str] | None,
    typer.Option("--force", metavar="ID[,ID...]", help="Downgrade these checks' failures to warnings, e.g. known-bad."),
]
GpusOpt = Annotated[
    str | None,
    typer.Option("--gpus", metavar="SEL", help="Use these GPUs: indices or UUIDs, comma-separated (e.g. 0,2)."),
]
ChecksumsOpt = Annotated[bool, typer.Option("--checksums", help="Also verify the sha256 of every shard (cached).")]
AcceptOpt = Annotated[
    list[str] | None,
    typer.Option("--accept-license", metavar="ID", help="Record that you accept this license id (after review)."),
]
DeepOpt = Annotated[bool, typer.Option("--deep", help="Also run a real NCCL all_reduce on the chosen GPUs (slow).")]


def _split(values: list[str] | None) -> list[str]:
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


def _facts_view(facts: HostFacts) -> Callable[[TextIO], None]:
    def view(out: TextIO) -> None:
        from rich.console import Console
        from rich.table import Table

        # every value below comes from NVML, the host or a captured file: shown through ``for_rich`` (``v``)
        console = Console(file=out, soft_wrap=False, width=140, emoji=False, highlight=False)
        inv = facts.gpu
        if inv.available:
            console.print(f"NVIDIA driver {v(inv.driver_version)}, CUDA {v(inv.cuda_version)}, "
                          f"NVML {v(inv.nvml_version)}")
        else:
            console.print(f"GPUs: none visible ({v(inv.error)})")
        if inv.devices:
            t = Table("#", "name", "pci id", "memory MiB", "used", "cc", "power W", "mig", "uuid", box=None)
            for g in inv.devices:
                used = "-" if g.memory_used_mib is None else f"{g.memory_used_mib:,}"
                procs = f" ({len(g.processes)} procs)" if g.processes else ""
                power = "-" if g.power.current_mw is None else f"{g.power.current_mw / 1000:g}"
                t.add_row(str(g.index), v(g.name), v(g.pci_device_hex or "-"), f"{g.memory_total_mib or 0:,}",
                          used + procs, v(g.compute_capability or "-"), power,
                          "on" if g.mig_enabled else "off" if g.mig_enabled is False else "-", v(g.uuid))
            console.print(t)
        if inv.pairs:
            from rigctl.preflight.links import describe_pair

            for p in inv.pairs:
                console.print(v(describe_pair(inv, p).text, LINE_LIMIT))
        console.print(f"/dev/shm: {(facts.shm.total_bytes or 0) / 2**30:.1f} GiB")
        pod = facts.podman
        console.print(f"podman: {v(pod.version) if pod.installed else 'not installed'}"
                      f"{' (API ' + v(pod.api_socket) + ')' if pod.api_ok else ''}, {len(pod.images)} image(s), "
                      f"quadlet: {v(pod.quadlet or 'none')}")
        console.print(f"CDI specs: {', '.join(v(s.path) for s in facts.cdi.specs) or 'none'}")
        sd = facts.systemd
        console.print(f"systemd: system manager {'yes' if sd.system_manager else 'no'}, user manager "
                      f"{'yes' if sd.user_manager else 'no'}, linger {sd.linger}")
        for probe in facts.paths:
            free = "?" if probe.free_bytes is None else f"{probe.free_bytes / 2**30:,.1f} GiB free"
            console.print(f"path {v(probe.path)}: {'present' if probe.exists else 'missing'}, {free} "
                          f"on {v(probe.probed)}")
        console.print(f"listening ports: {', '.join(str(x.port) for x in facts.ports.listening) or 'none'}")
        for section, err in facts.probe_errors.items():
            console.print(f"[red]probe {v(section)} failed: {v(err, LINE_LIMIT)}[/red]")

    return view


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
        return Outcome("inventory", True, facts.model_dump(mode="json"), view=_facts_view(facts))

    finish("inventory", as_json, produce)


_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim", "error": "bold magenta"}
REPORT_WIDTH = 160


def _summary(report: PreflightReport) -> tuple[bool, str]:
    counts: dict[str, int] = {}
    for f in report.findings:
        counts[f.severity.value] = counts.get(f.severity.value, 0) + 1
    return report.ok, ", ".join(f"{n} {s}" for s, n in counts.items())


def _plain_report(report: PreflightReport, recipe_name: str, out: TextIO) -> None:
    """The report for a pipe or a file: the title, rows, GPU line and summary rich prints to a terminal,
    in a plain table (``plaintable``), without loading rich. Every value goes through ``printable``."""
    from rigctl.cli.output import printable
    from rigctl.cli.plaintable import render

    rows = [(printable(f.id), f.severity.value, printable(f.message, LINE_LIMIT), printable(f.fix or "", LINE_LIMIT))
            for f in report.findings]
    out.write(render(("check", "result", "message", "fix"), rows, title=f"preflight {printable(recipe_name)}",
                     width=REPORT_WIDTH))
    if report.choice.gpus:
        out.write("GPUs: " + ", ".join(f"{g.index} {printable(g.name)} {printable(g.uuid)}"
                                       for g in report.choice.gpus) + "\n")
    ok, summary = _summary(report)
    out.write(f"{'ready' if ok else 'not ready'}: {summary}\n")


def report_view(report: PreflightReport, recipe_name: str) -> Callable[[TextIO], None]:
    def view(out: TextIO) -> None:
        if not (out.isatty() or os.environ.get("FORCE_COLOR")):  # no colour to show: rich would add nothing
            _plain_report(report, recipe_name, out)
            return
        from rich.console import Console
        from rich.table import Table
        from rich.text import Text

        # finding messages quote GPU and process names from NVML or an inventory: shown through for_rich
        console = Console(file=out, width=REPORT_WIDTH, emoji=False, highlight=False)
        table = Table("check", "result", "message", "fix", title=f"preflight {v(recipe_name)}", show_lines=False)
        for f in report.findings:
            sev = f.severity.value
            table.add_row(v(f.id), Text(sev, style=_STYLE[sev]), v(f.message, LINE_LIMIT), v(f.fix or "", LINE_LIMIT))
        console.print(table)
        if report.choice.gpus:
            console.print("GPUs: " + ", ".join(f"{g.index} {v(g.name)} {v(g.uuid)}" for g in report.choice.gpus))
        ok, summary = _summary(report)
        console.print(("[green]ready[/green]" if ok else "[bold red]not ready[/bold red]") + f": {summary}")

    return view


def _progress_factory(enabled: bool) -> Any:
    """A rich progress bar on stderr for --checksums; None (no output) with --json."""
    if not enabled:
        return None

    def factory(total: int, files: int) -> Callable[[int], None]:
        import atexit

        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

        bar = Progress("sha256", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                       console=Console(stderr=True), transient=True)
        task = bar.add_task("sha256", total=total)
        bar.start()
        done = [0]

        def advance(n: int) -> None:
            bar.advance(task, n)
            done[0] += n
            if done[0] >= total:
                bar.stop()

        atexit.register(bar.stop)  # a failure mid-hash must still restore the terminal
        return advance

    return factory


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
    as_json: JsonOpt = False,
) -> None:
    """Check that RECIPE can run on this host (or on a captured --inventory) before a long boot."""

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
        from rigctl.host import facts_for_recipe
        from rigctl.host.licenses import accept
        from rigctl.preflight.runner import run_preflight
        from rigctl.recipe.load import load

        loaded = load(recipe, overlays=overlays or (), sets=sets or ())
        r = loaded.recipe
        for license_id in _split(accept_license):
            accept(license_id, recipe=r.name)
        facts = facts_for_recipe(r, inventory, podman_cli=podman_cli)
        deep_runner = None
        if deep:
            from rigctl.preflight.allreduce import deep_allreduce

            deep_runner = deep_allreduce
        selection = _split([gpus]) if gpus else None
        report = run_preflight(r, facts, force=_split(force), checksums=checksums, gpus=selection,
                               deep=deep_runner, progress=_progress_factory(checksums and not as_json))
        payload: dict[str, Any] = {
            "recipe": r.name,
            "inventory": inventory,
            "findings": [f.model_dump(mode="json") for f in report.findings],
            "gpus": [g.model_dump(mode="json") for g in report.choice.gpus],
            "layout": {"explicit": report.choice.explicit, "reasons": report.choice.reasons,
                       "problems": report.choice.problems},
            "forced": report.forced,
        }
        if report.checksums is not None:
            payload["checksums"] = report.checksums
        return Outcome("preflight", report.ok, payload, view=report_view(report, r.name))

    finish("preflight", as_json, produce)
