"""rigctl render: a recipe's quadlet units, or its Kubernetes / podman kube manifests, printed or written
to a directory."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO

import typer

from rigctl.cli.base import InventoryOpt, JsonOpt, OverlayOpt, RecipeArg, SetOpt, app, finish
from rigctl.cli.output import LINE_LIMIT, Outcome, printable

if TYPE_CHECKING:
    from rigctl.host.facts import HostFacts
    from rigctl.recipe.load import LoadedRecipe
    from rigctl.render.placement import Placement

TARGETS = ("quadlet", "kube", "podman-kube")


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
    target: Annotated[
        str,
        typer.Option("--target", metavar="|".join(TARGETS),
                     help="quadlet units, Kubernetes manifests, or `podman kube play` manifests with a .kube unit."),
    ] = "quadlet",
    model_pvc: Annotated[
        str | None,
        typer.Option("--model-pvc", metavar="NAME", help="kube: the checkpoint from this claim, not a host path."),
    ] = None,
    verify_job: Annotated[
        str | None,
        typer.Option("--verify-job", metavar="IMAGE",
                     help="kube: add a Job that runs `rigctl verify` from IMAGE (pinned) against the Service."),
    ] = None,
    node_product: Annotated[
        list[str] | None,
        typer.Option("--node-product", metavar="LABEL",
                     help="kube: select nodes by this nvidia.com/gpu.product value (repeatable) instead of the "
                          "recipe's products."),
    ] = None,
    sets: SetOpt = None,
    overlays: OverlayOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Render RECIPE into podman quadlet units (.container) for the given podman version, or (--target)
    into Kubernetes manifests, or into manifests for `podman kube play` with a quadlet .kube unit."""

    def produce() -> Outcome:
        from rigctl.errors import UsageError
        from rigctl.recipe.load import load
        from rigctl.render import DEFAULT_PODMAN, Note, install_path, parse_version, render_units, write_units
        from rigctl.render.install import Scope

        if target not in TARGETS:
            raise UsageError(f"--target {target!r}: expected one of {', '.join(TARGETS)}")
        if scope not in ("system", "user"):
            raise UsageError(f"--scope {scope!r}: expected system or user")
        kube_only = [o for o, v in (("--model-pvc", model_pvc), ("--verify-job", verify_job),
                                    ("--node-product", node_product)) if v]
        if target == "quadlet" and kube_only:
            raise UsageError(f"{', '.join(kube_only)}: for --target kube (or podman-kube), not quadlet units")
        box_only = [o for o, v in (("--gpus", gpus), ("--inventory", inventory), ("--podman-version", podman_version),
                                   ("--quadlet-version", quadlet_version)) if v]
        if target == "kube" and (box_only or scope != "system"):
            raise UsageError(f"{', '.join(box_only) or '--scope'}: Kubernetes' device plugin and scheduler choose "
                             "the box and its GPUs; these options are for quadlet and podman-kube")
        loaded = load(recipe, overlays=overlays or (), sets=sets or ())
        if target == "kube":
            return _kube_outcome(loaded, None, model_pvc=model_pvc, verify_job=verify_job,
                                 node_product=node_product, out=out)
        placement, podman_target = _placement(loaded, gpus, inventory, podman_version)
        if target == "podman-kube":
            return _kube_outcome(loaded, placement, podman_version=podman_target, quadlet_version=quadlet_version,
                                 scope=Scope(scope), model_pvc=model_pvc, verify_job=verify_job, out=out)
        rendered = render_units(
            loaded.recipe,
            podman_version=podman_target or DEFAULT_PODMAN,
            quadlet_version=parse_version(quadlet_version) if quadlet_version else None,
            gpu_ids=placement.ids,
            scope=Scope(scope),
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


def _placement(
    loaded: LoadedRecipe, gpus: str | None, inventory: str | None, podman_version: str | None,
) -> tuple[Placement, tuple[int, int] | None]:
    """The GPUs the unit gets (as `up` would choose them here, on the inventory's box, or as given) and the
    podman to render for (given, else the inventory's; None: the default)."""
    from rigctl.errors import InvalidInputError
    from rigctl.render import parse_version
    from rigctl.render.placement import NoLayoutError, place_gpus

    selection = [g.strip() for g in gpus.split(",") if g.strip()] if gpus is not None else None
    target = parse_version(podman_version) if podman_version else None
    facts: HostFacts | None = None
    if inventory:  # render for that box: its podman, and the GPUs the layout picks there (by UUID)
        from rigctl.host import load_inventory
        from rigctl.podman_versions import find_version

        facts = load_inventory(inventory)
        if podman_version is None:
            target = find_version(facts.podman.version)
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
    return placement, target


def _kube_outcome(
    loaded: LoadedRecipe,
    placement: Placement | None,
    *,
    podman_version: tuple[int, int] | None = None,
    quadlet_version: str | None = None,
    scope: str = "system",
    model_pvc: str | None,
    verify_job: str | None,
    node_product: list[str] | None = None,
    out: Path | None,
) -> Outcome:
    """--target kube (placement None) or podman-kube: stdout carries the manifests' YAML and nothing else
    (`rigctl render R --target kube | kubectl apply -f -`); notes go to stderr. With --out, the files are
    written and their paths printed."""
    import sys

    from rigctl.render import DEFAULT_PODMAN, Note, install_path, parse_version
    from rigctl.render.install import Scope
    from rigctl.render.kube import render_kube
    from rigctl.render.units import write_files

    rendered = render_kube(
        loaded.recipe,
        target="kube" if placement is None else "podman-kube",
        podman_version=podman_version or DEFAULT_PODMAN,
        quadlet_version=parse_version(quadlet_version) if quadlet_version else None,
        gpu_ids=placement.ids if placement is not None else None,
        node_products=node_product,
        model_pvc=model_pvc,
        verify_image=verify_job,
        scope=Scope(scope),
    )
    warnings = [Note("warning", placement.warning)] if placement is not None and placement.warning else []
    notes = [*warnings, *rendered.notes]
    written = {p.name: p for p in write_files(rendered.files, out)} if out is not None else {}
    files: list[dict[str, Any]] = []
    for unit in rendered.files:
        entry: dict[str, Any] = {"name": unit.name}
        if rendered.target == "podman-kube":  # the .kube unit reads its YAML from its own directory
            entry["install_path"] = str(install_path(rendered.scope, unit.name))
        if unit.name in written:
            entry["path"] = str(written[unit.name])
        entry["text"] = unit.text
        files.append(entry)
    payload: dict[str, Any] = {"recipe": rendered.recipe, "target": rendered.target}
    if rendered.podman_version is not None:
        payload["podman_version"] = f"{rendered.podman_version[0]}.{rendered.podman_version[1]}"
    if rendered.quadlet_version is not None:
        payload["quadlet_version"] = f"{rendered.quadlet_version[0]}.{rendered.quadlet_version[1]}"
    if rendered.target == "podman-kube":
        payload["scope"] = str(rendered.scope)
        payload["service"] = rendered.service_name
    payload["files"] = files
    payload["manifests"] = rendered.manifests
    payload["lint"] = [{"rule": r.rule, "ok": r.ok, "detail": r.detail} for r in rendered.lint]
    payload["notes"] = [{"kind": n.kind, "message": n.message} for n in notes]
    if placement is not None and placement.choice is not None:
        payload["gpus"] = [g.model_dump(mode="json") for g in placement.choice.gpus]

    def view(stream: TextIO) -> None:
        for note in notes:
            sys.stderr.write(f"rigctl render: note ({note.kind}): {printable(note.message, LINE_LIMIT)}\n")
        if out is None:
            stream.write(rendered.yaml_file.text)
            if rendered.service_name is not None:
                sys.stderr.write(f"rigctl render: --out DIR also writes {rendered.files[1].name}, the quadlet unit "
                                 "that runs these manifests under systemd\n")
            return
        for entry in files:
            stream.write(f"{entry['path']}\n")

    return Outcome("render", True, payload, view=view)
