"""What `up` would do on a host, decided without touching it: the dry run.

A plan is preflight over (recipe, facts), the GPUs the layout picked, and the unit rendered for the
podman those facts describe. The facts may be this host's or a captured inventory from another box
(an operator plans a GPU box from a laptop), so nothing here probes the machine it runs on: the
caller gathers or loads the facts and passes them in.

The unit is rendered even when preflight fails: the operator asked what would be installed, and the
unit shows it; the plan says that nothing will be installed until the failures are fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rigctl.errors import RigctlError
from rigctl.host.facts import HostFacts
from rigctl.podman_versions import DEFAULT_PODMAN, Version, find_version, fmt
from rigctl.preflight.layout import unit_gpu_ids
from rigctl.preflight.runner import PreflightReport, run_preflight
from rigctl.recipe.model import Recipe
from rigctl.render.units import RenderedUnits, Scope, install_dir, render_units


@dataclass
class Plan:
    recipe: Recipe
    scope: Scope
    report: PreflightReport
    podman_version: Version
    quadlet_version: Version | None
    gpu_ids: list[str] | None
    rendered: RenderedUnits | None
    render_error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Would `up` go ahead: preflight passes and the unit renders for this host's podman."""
        return self.report.ok and self.rendered is not None and self.render_error is None

    @property
    def unit_dir(self) -> str:
        return str(install_dir(self.scope))

    def to_dict(self) -> dict[str, Any]:
        choice = self.report.choice
        files = self.rendered.files if self.rendered else []
        return {
            "recipe": self.recipe.name,
            "scope": self.scope,
            "dry_run": True,
            "would_install": self.ok,
            "findings": [f.model_dump(mode="json") for f in self.report.findings],
            "gpus": [g.model_dump(mode="json") for g in choice.gpus],
            "layout": {"wanted": choice.wanted, "explicit": choice.explicit, "reasons": choice.reasons,
                       "problems": choice.problems},
            "podman_version": fmt(self.podman_version),
            "quadlet_version": fmt(self.quadlet_version) if self.quadlet_version else None,
            "unit_dir": self.unit_dir,
            "service": self.rendered.service_name if self.rendered else None,
            "files": [{"name": f.name, "path": f"{self.unit_dir}/{f.name}", "text": f.text} for f in files],
            "render_notes": [{"kind": n.kind, "message": n.message} for n in self.rendered.notes]
            if self.rendered else [],
            "render_error": self.render_error,
            "notes": self.notes,
            "endpoint": f"http://{self.recipe.publish.address}:{self.recipe.publish.port}/v1",
        }


def make_plan(
    recipe: Recipe,
    facts: HostFacts,
    *,
    scope: Scope,
    force: Sequence[str] = (),
    gpus: Sequence[str] | None = None,
    quadlet_version: Version | None = None,
) -> Plan:
    report = run_preflight(recipe, facts, force=force, gpus=gpus, scope=scope)
    notes: list[str] = []

    podman = find_version(facts.podman.version) if facts.podman.installed else None
    if podman is None:
        podman = DEFAULT_PODMAN
        notes.append(f"podman not found on the host: the unit is rendered for podman {fmt(DEFAULT_PODMAN)}")

    gpu_ids: list[str] | None = unit_gpu_ids(recipe, report.choice)  # as `up` and `render` pin them
    if not report.choice.ok:
        gpu_ids = None  # render falls back to indices 0..N-1 and says so in its notes
        notes.append("no valid GPU layout on this host: the unit shows GPU indices as placeholders")

    rendered: RenderedUnits | None = None
    render_error: str | None = None
    try:
        rendered = render_units(recipe, podman_version=podman, quadlet_version=quadlet_version,
                                gpu_ids=gpu_ids or None, scope=scope)
    except RigctlError as err:  # e.g. a podman too old for quadlet: part of the plan, not a crash
        render_error = err.message + (f" (fix: {err.fix})" if err.fix else "")
        if podman < DEFAULT_PODMAN:
            # still show what would be installed on a podman that can run it
            rendered = render_units(recipe, podman_version=DEFAULT_PODMAN, gpu_ids=gpu_ids or None, scope=scope)
            notes.append(f"the unit shown is rendered for podman {fmt(DEFAULT_PODMAN)}: this host's podman "
                         f"{fmt(podman)} cannot run it as it is")
    if not report.ok:
        notes.append("preflight failed: nothing would be installed until the failures above are fixed "
                     "(or forced with --force ID where that is safe)")
    return Plan(recipe, scope, report, podman, quadlet_version, gpu_ids, rendered, render_error, notes)
