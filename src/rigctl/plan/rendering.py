"""What `rigctl render` produces for one recipe, as typed results: the GPUs the unit gets and the podman it
is rendered for (``placement_for``: this host's facts, an inventory's, or the options), then the quadlet
units (``render_quadlet``) or the Kubernetes / `podman kube play` manifests (``render_manifests``), written
to a directory when asked. The renderer itself (``rigctl.render``) only turns values into files; what a box
has is decided here, by the planner's rules (``plan.plan.podman_target``, ``plan.plan.place_gpus``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rigctl.errors import InvalidInputError
from rigctl.places import Scope, install_path
from rigctl.plan.plan import NoLayoutError, Placement, PodmanTarget, place_gpus, podman_target
from rigctl.podman_versions import DEFAULT_PODMAN, fmt
from rigctl.recipe.model import Recipe
from rigctl.render.escape import RenderError
from rigctl.render.units import Note, RenderedFile, RenderedUnits, render_units, write_files
from rigctl.util.jsonable import jsonable

if TYPE_CHECKING:  # facts and the kube renderer load only for the targets that need them
    from rigctl.host.facts import HostFacts, PodmanFacts
    from rigctl.preflight.layout import ChosenGpu
    from rigctl.render.kube import RenderedKube


def placement_for(
    recipe: Recipe, gpus: Sequence[str] | None, inventory: str | None, podman_version: str | None,
    *, quadlet_version: str | None = None, scope: Scope = Scope.SYSTEM,
) -> tuple[Placement, PodmanTarget]:
    """The GPUs the unit gets (as `up` would choose them here, on the inventory's box, or as given) and the
    podman to render for (given, else the inventory's, else this host's). No layout fits: an error."""
    facts: HostFacts | None = None
    podman: PodmanFacts | None = None
    if inventory:  # render for that box: its podman, and the GPUs the layout picks there (by UUID)
        from rigctl.host.gather import load_inventory  # noqa: PLC0415 - facts load only when a box is named

        facts = load_inventory(inventory)
        podman = facts.podman
    else:
        if podman_version is None:  # the podman and the generator `up` would install for here
            from rigctl.host.probes import probe_podman  # noqa: PLC0415

            podman = probe_podman(scope=scope)
        if recipe.gpus.count:  # this host: the GPUs `up` would choose here, when NVML answers
            from rigctl.host.facts import HostFacts  # noqa: PLC0415
            from rigctl.host.nvml import probe_gpus  # noqa: PLC0415 - only GPU facts: the rest is not render's

            facts = HostFacts(gpu=probe_gpus())
    target = podman_target(podman_version, quadlet_version, podman, where=inventory or "this host", scope=scope)
    placement = place_gpus(recipe, facts, list(gpus) if gpus else None)
    if not placement.ok:
        where = inventory or "this host"
        problem = f"{where}: no GPU layout for {recipe.name}: " + "; ".join(placement.problems)
        fix = f"`rigctl preflight {recipe.name}{' --inventory FILE' if inventory else ''}` says why"
        if inventory:
            raise InvalidInputError([problem], fix=fix)
        raise NoLayoutError(problem, fix=fix + "; --gpus picks GPUs by hand")
    return placement, target


def _entries(files: Sequence[RenderedFile], written: dict[str, Path], install: Scope | None) -> list[dict[str, Any]]:
    """Each file as the JSON lists it: its name, where it installs (quadlet files), where it was written
    (--out), its text."""
    out: list[dict[str, Any]] = []
    for unit in files:
        entry: dict[str, Any] = {"name": unit.name}
        if install is not None:
            entry["install_path"] = str(install_path(install, unit.name))
        if unit.name in written:
            entry["path"] = str(written[unit.name])
        entry["text"] = unit.text
        out.append(entry)
    return out


def _gpus(placement: Placement | None) -> list[ChosenGpu]:
    return list(placement.choice.gpus) if placement is not None and placement.choice is not None else []


def _placement_warnings(placement: Placement | None) -> list[Note]:
    return [Note("warning", placement.warning)] if placement is not None and placement.warning else []


def _secret_warnings(recipe: Recipe) -> list[Note]:
    """Preflight's secret-in-unit, for `render`, which runs no preflight: a credential the unit would hold in
    clear (`up` and its dry run say it once, as preflight's finding)."""
    from rigctl.preflight.secrets import FIX, clear_message, recipe_secrets  # noqa: PLC0415

    exposed = recipe_secrets(recipe)
    return [Note("warning", f"{clear_message(exposed)}; {FIX}")] if exposed else []


@dataclass
class QuadletResult:
    rendered: RenderedUnits
    placement: Placement
    files: list[dict[str, Any]]  # as the JSON lists them (``_entries``)
    warnings: list[Note] = field(default_factory=list)  # its GPUs guessed, no podman found: stderr in text
    versions_from: str = "default"  # where the podman and quadlet versions came from (PodmanTarget.source)

    @property
    def gpus(self) -> list[ChosenGpu]:
        return _gpus(self.placement)

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: render's JSON since v1 (versions as "X.Y")
        r = self.rendered
        payload: dict[str, Any] = {
            "recipe": r.recipe, "podman_version": fmt(r.podman_version),
            "quadlet_version": fmt(r.quadlet_version), "scope": r.scope, "service": r.service_name,
            "files": self.files, "notes": [{"kind": n.kind, "message": n.message} for n in [*self.warnings, *r.notes]],
            "versions_from": self.versions_from,
        }
        if self.placement.choice is not None:
            payload["gpus"] = jsonable(self.placement.choice.gpus)
        return payload


def render_quadlet(recipe: Recipe, placement: Placement, target: PodmanTarget, *, scope: Scope,
                   out: Path | None) -> QuadletResult:
    try:
        rendered = render_units(recipe, podman_version=target.podman or DEFAULT_PODMAN,
                                quadlet_version=target.quadlet, gpu_ids=placement.ids, scope=scope)
    except RenderError as err:
        if target.elsewhere is None:
            raise
        other, generator = target.elsewhere  # e.g. root on a box whose only manager is a user one
        raise RenderError(err.message, fix=f"the {other} manager has one ({generator}): `rigctl render "
                                           f"{recipe.name} --{other}`; otherwise {err.fix}") from None
    written = {p.name: p for p in write_files(rendered.files, out)} if out is not None else {}
    warnings = [*_placement_warnings(placement), *([target.note] if target.note else []), *_secret_warnings(recipe)]
    return QuadletResult(rendered, placement, _entries(rendered.files, written, rendered.scope), warnings,
                         versions_from=target.source)


@dataclass
class KubeResult:
    rendered: RenderedKube
    placement: Placement | None  # None: --target kube (the cluster places it)
    files: list[dict[str, Any]]
    notes: list[Note]  # the placement's warning, then the renderer's notes
    written: bool

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: render's JSON since v1 (versions as "X.Y")
        r = self.rendered
        payload: dict[str, Any] = {"recipe": r.recipe, "target": r.target}
        if r.namespace is not None:
            payload["namespace"] = r.namespace
        if r.podman_version is not None:
            payload["podman_version"] = fmt(r.podman_version)
        if r.quadlet_version is not None:
            payload["quadlet_version"] = fmt(r.quadlet_version)
        if r.target == "podman-kube":
            payload["scope"] = str(r.scope)
            payload["service"] = r.service_name
        payload["files"] = self.files
        payload["manifests"] = r.manifests
        # each lint rule's finding, in the one finding shape (id, severity, message), and under the keys
        # render --json has always had (rule, ok, detail)
        payload["lint"] = [{**jsonable(x), "rule": x.id, "ok": not x.fails, "detail": x.message} for x in r.lint]
        payload["notes"] = [{"kind": n.kind, "message": n.message} for n in self.notes]
        if self.placement is not None and self.placement.choice is not None:
            payload["gpus"] = jsonable(self.placement.choice.gpus)
        return payload


def render_manifests(
    recipe: Recipe, placement: Placement | None, *, podman: PodmanTarget | None = None, scope: Scope = Scope.SYSTEM,
    model_pvc: str | None, verify_job: str | None, node_product: Sequence[str] | None = None,
    namespace: str | None = None, out: Path | None,
) -> KubeResult:
    """--target kube (``placement`` None: the cluster's scheduler and device plugin place it) or
    podman-kube (this box's GPUs, a .kube unit that runs the manifests under systemd, for ``podman``)."""
    from rigctl.render.kube import render_kube  # noqa: PLC0415 - see the imports above
    target: Literal["kube", "podman-kube"] = "kube" if placement is None else "podman-kube"
    rendered = render_kube(
        recipe, target=target, podman_version=(podman.podman if podman else None) or DEFAULT_PODMAN,
        quadlet_version=podman.quadlet if podman else None,
        gpu_ids=placement.ids if placement is not None else None, node_products=node_product or None,
        model_pvc=model_pvc, verify_image=verify_job, namespace=namespace, scope=scope,
    )
    written = {p.name: p for p in write_files(rendered.files, out)} if out is not None else {}
    install = rendered.scope if rendered.target == "podman-kube" else None  # the .kube reads its YAML beside it
    notes = [*_placement_warnings(placement), *([podman.note] if podman and podman.note else []), *rendered.notes]
    return KubeResult(rendered, placement, _entries(rendered.files, written, install), notes, written=out is not None)
