"""rigctl render: a recipe's quadlet units, printed or written to a directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from rigctl.cli.base import InventoryOpt, JsonOpt, OverlayOpt, RecipeArg, SetOpt, app, finish
from rigctl.cli.output import LINE_LIMIT, Outcome, printable

if TYPE_CHECKING:
    from rigctl.host.facts import HostFacts


@app.command("render")
def render_cmd(
    recipe: RecipeArg,
    *,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="DIR", help="Write the units into DIR (atomically) instead of only printing."),
    ] = None,
    podman_version: Annotated[
        str | None,
        typer.Option("--podman-version", metavar="X.Y",
                     help="The podman that will run the container (default: the inventory's, else 5.4)."),
    ] = None,
    inventory: InventoryOpt = None,
    quadlet_version: Annotated[
        str | None,
        typer.Option(
            "--quadlet-version", metavar="X.Y",
            help="The quadlet generator's version when it differs from podman's (podman < 4.4 has none).",
        ),
    ] = None,
    gpus: Annotated[
        str | None,
        typer.Option("--gpus", metavar="ID,...", help="GPU UUIDs (preferred) or indices for AddDevice=."),
    ] = None,
    scope: Annotated[
        str, typer.Option("--scope", metavar="system|user", help="Install for the system or the user manager.")
    ] = "system",
    sets: SetOpt = None,
    overlays: OverlayOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Render RECIPE into podman quadlet units (.container) for the given podman version."""

    def produce() -> Outcome:
        from rigctl.errors import InvalidInputError, UsageError
        from rigctl.recipe.load import load
        from rigctl.render import DEFAULT_PODMAN, Note, install_path, parse_version, render_units, write_units
        from rigctl.render.placement import NoLayoutError, place_gpus

        if scope not in ("system", "user"):
            raise UsageError(f"--scope {scope!r}: expected system or user")
        selection = [g.strip() for g in gpus.split(",") if g.strip()] if gpus is not None else None
        loaded = load(recipe, overlays=overlays or (), sets=sets or ())
        target = parse_version(podman_version) if podman_version else DEFAULT_PODMAN
        facts: HostFacts | None = None
        if inventory:  # render for that box: its podman, and the GPUs the layout picks there (by UUID)
            from rigctl.host import load_inventory
            from rigctl.podman_versions import find_version

            facts = load_inventory(inventory)
            if podman_version is None:
                target = find_version(facts.podman.version) or DEFAULT_PODMAN
        elif loaded.recipe.gpus.count:  # this host: the GPUs `up` would choose here, when NVML answers
            from rigctl.host.facts import HostFacts
            from rigctl.host.nvml import probe_gpus  # only GPU facts: podman and the rest are not render's

            facts = HostFacts(gpu=probe_gpus())
        placement = place_gpus(loaded.recipe, facts, selection)
        if not placement.ok:
            where = inventory or "this host"
            problems = [f"{where}: no GPU layout for {loaded.recipe.name}: " + "; ".join(placement.problems)]
            fix = f"`rigctl preflight {loaded.recipe.name}{' --inventory FILE' if inventory else ''}` says why"
            if inventory:
                raise InvalidInputError(problems, fix=fix)
            raise NoLayoutError(problems[0], fix=fix + "; --gpus picks GPUs by hand")
        rendered = render_units(
            loaded.recipe,
            podman_version=target,
            quadlet_version=parse_version(quadlet_version) if quadlet_version else None,
            gpu_ids=placement.ids,
            scope="system" if scope == "system" else "user",
        )
        warnings = [Note("warning", placement.warning)] if placement.warning else []
        written = {p.name: p for p in write_units(rendered, out)} if out is not None else {}
        files: list[dict[str, Any]] = []
        for unit in rendered.files:
            entry: dict[str, Any] = {"name": unit.name, "install_path": str(install_path(rendered.scope, unit.name))}
            if unit.name in written:
                entry["path"] = str(written[unit.name])
            entry["text"] = unit.text
            files.append(entry)
        payload: dict[str, Any] = {
            "recipe": rendered.recipe,
            "podman_version": f"{rendered.podman_version[0]}.{rendered.podman_version[1]}",
            "quadlet_version": f"{rendered.quadlet_version[0]}.{rendered.quadlet_version[1]}",
            "scope": rendered.scope,
            "service": rendered.service_name,
            "files": files,
            "notes": [{"kind": n.kind, "message": n.message} for n in [*warnings, *rendered.notes]],
        }
        if placement.choice is not None:
            payload["gpus"] = [g.model_dump(mode="json") for g in placement.choice.gpus]

        def view(stream: TextIO) -> None:
            import sys

            for note in warnings:  # stdout is the unit; a warning about it goes where warnings go
                sys.stderr.write(f"rigctl render: warning: {printable(note.message, LINE_LIMIT)}\n")
            for entry in files:
                where = f"wrote {entry['path']}; " if "path" in entry else ""
                stream.write(f"### {entry['name']} ({where}installs as {entry['install_path']})\n")
                stream.write(entry["text"])
                stream.write("\n")
            for note in rendered.notes:
                stream.write(f"note ({note.kind}): {note.message}\n")
            for g in placement.choice.gpus if placement.choice is not None else []:
                stream.write(f"gpu {g.index}: {printable(g.name)} ({printable(g.uuid)})\n")
            stream.write(f"service: {rendered.service_name} ({rendered.scope})\n")

        return Outcome("render", True, payload, view=view)

    finish("render", as_json, produce)
