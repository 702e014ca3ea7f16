"""The plan: what `up` will do on a host, decided without touching it. The one place a recipe meets a box.

``make_plan`` is preflight over (recipe, facts), the GPUs the layout picked, and the unit rendered for the
podman and quadlet those facts describe. The facts come from ``facts_for_recipe`` (this host, with every
path the recipe uses probed, or a captured inventory from another box), gathered once by the caller.
`up --dry-run` prints the plan, `up` executes it, `swap` makes one for the recipe it brings in: one
pipeline, so the three can never judge one recipe differently.

The unit is rendered even when preflight fails: the operator asked what would be installed, and the
unit shows it; the plan says that nothing will be installed until the failures are fixed.

Which podman a unit is rendered for, and which quadlet generator will read it, is one rule here too
(``podman_target``), for `render`, `up --dry-run`, `up` and `swap`. Given on the command line
(``--podman-version``, ``--quadlet-version``), a version is taken as given (and must be one). Otherwise it
is what the facts found: this host's podman, or a captured inventory's; and a quadlet generator found there
counts only for the manager scope it was found for (``PodmanFacts.generator_for``). No podman found: the
default, said in a note.

Which GPUs a unit names is one rule as well (``place_gpus``): the layout `up` would choose, pinned by UUID
(``choose_gpus`` over the facts, this host's NVML or a captured inventory; the plan hands in preflight's
choice; then ``Choice.unit_ids``). Only when there are no GPU facts at all does a unit fall back to the
GPUs --gpus names, to what the recipe says (``gpus.select``) or to indices 0..N-1; the last is a guess that
the caller must show as a warning.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.host.facts import HostFacts, PodmanFacts
from rigctl.places import Scope, install_dir
from rigctl.podman_versions import DEFAULT_PODMAN, Version, fmt
from rigctl.preflight.layout import Choice, choose_gpus
from rigctl.preflight.registry import PreflightReport, run_preflight
from rigctl.recipe.model import EngineKind, Recipe
from rigctl.render.escape import RenderError
from rigctl.render.units import Note, RenderedUnits, render_units
from rigctl.util.jsonable import jsonable
from rigctl.util.publish import openai_url
from rigctl.util.text import clip

# MAJOR.MINOR[.PATCH][-suffix], each number short: int() of thousands of digits is refused (or slow)
_VERSION = re.compile(r"(?:podman version )?(\d{1,6})\.(\d{1,6})(?:\.\d{1,6})?(?:[-+~][\w.~+-]{0,64})?")


def parse_version(text: str) -> Version:
    """A version the operator typed: ``5.4``, ``5.4.2`` or ``podman version 4.3.1`` -> (major, minor)."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        raise RenderError(f"{clip(text)} is not a podman version", fix="give it as MAJOR.MINOR, e.g. 5.4")
    return int(match.group(1)), int(match.group(2))


@dataclass(frozen=True)
class PodmanTarget:
    """The podman a unit is rendered for and the quadlet generator that reads it, by the rule `up` plans
    by (``plan.plan``), so that `render` here prints the unit `up` would install here."""

    podman: Version | None  # None: nothing said which (DEFAULT_PODMAN)
    quadlet: Version | None  # None: podman's own
    source: Literal["option", "inventory", "host", "default"]
    note: Note | None = None  # said when the default stands in for a podman that was not found
    elsewhere: tuple[Scope, str] | None = None  # this host: the other scope's generator, where this one has none
    quadlet_path: str | None = None  # the generator binary the facts found for the scope: asked when it rejects a unit


def podman_target(
    podman_version: str | None, quadlet_version: str | None, podman: PodmanFacts | None, *, where: str, scope: Scope,
) -> PodmanTarget:
    """--podman-version (and --quadlet-version) as given; else the podman that ``podman`` (an inventory's or
    this host's facts) found, with the generator found for ``scope``; else the default, said in a note."""
    quadlet = parse_version(quadlet_version) if quadlet_version else None
    if podman_version:
        return PodmanTarget(parse_version(podman_version), quadlet, "option")
    if podman is None:
        return PodmanTarget(None, quadlet, "default")
    source: Literal["inventory", "host"] = "host" if where == "this host" else "inventory"
    counts = podman.generator_for(scope)
    path = podman.quadlet if counts else None
    if quadlet is None and counts:
        quadlet = podman.found_quadlet_version
    found = podman.found_version
    if found is None:
        return PodmanTarget(None, quadlet, source, Note("info", (
            f"podman not found on {where}: the unit is rendered for podman {fmt(DEFAULT_PODMAN)}; --podman-version "
            "X.Y renders for another")), quadlet_path=path)
    elsewhere = podman.generator_elsewhere(scope) if source == "host" else None  # a capture's box: not here
    return PodmanTarget(found, quadlet, source, elsewhere=elsewhere, quadlet_path=path)


class NoLayoutError(RigctlError):
    """The host's GPUs were seen and none of the layouts the recipe allows fits them."""

    exit_code = ExitCode.CHECKS_FAILED
    code = "no-gpu-layout"


@dataclass(frozen=True)
class Placement:
    ids: list[str] | None  # the unit's device names; None: no GPU facts, the unit falls back
    choice: Choice | None = None  # None: no GPU facts (or the recipe needs no GPU)
    problems: list[str] = field(default_factory=list)  # why no layout fits the GPUs that were seen
    warning: str | None = None  # set when the unit's GPUs are a guess

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def pinned(self) -> bool:
        """Whether the unit names real GPUs: a layout fitted them, or the operator named them."""
        return self.ok and self.ids is not None


def place_gpus(recipe: Recipe, facts: HostFacts | None, explicit: Sequence[str] | None = None, *,
               choice: Choice | None = None) -> Placement:
    """The unit's GPUs on the host ``facts`` describe. ``explicit``: --gpus (indices or UUIDs). ``choice``:
    the layout preflight already chose over these facts and ``explicit`` (the plan's), else chosen here.
    The one rule for `render`, `up` and its dry run; each caller decides what a placement that is not
    ``ok`` (or not ``pinned``) means for it."""
    if recipe.gpus.count == 0:
        return Placement(ids=[])
    if facts is None or not facts.gpu.available:
        if explicit:  # the operator named them; nothing to check them against here
            return Placement(ids=list(explicit))
        if recipe.gpus.select is not None:
            return Placement(ids=None)  # the recipe names them
        why = "no GPU facts" if facts is None else f"no GPU facts here (NVML is unavailable: {facts.gpu.error})"
        indices = ", ".join(map(str, range(recipe.gpus.count)))
        return Placement(ids=None, warning=(
            f"{why}: the unit names GPU indices {indices}, a guess that may pick the wrong cards; render on the "
            "GPU host, or pass --inventory FILE (a `rigctl inventory --json` from it) or --gpus UUID,..."))
    choice = choice if choice is not None else choose_gpus(recipe, facts, explicit)
    if not choice.ok:
        detail = [*choice.problems, *(r for r in choice.reasons if "left out" in r)]
        return Placement(ids=None, choice=choice, problems=detail or [f"no layout of {choice.wanted} GPU(s)"])
    return Placement(ids=choice.unit_ids, choice=choice)


@dataclass
class Plan:
    recipe: Recipe
    scope: Scope
    report: PreflightReport  # typed findings and the GPU layout choice
    podman_version: Version
    quadlet_version: Version | None = None
    quadlet_path: str | None = None  # the generator systemd runs for this scope: asked when it rejects the unit
    gpu_ids: list[str] = field(default_factory=list)  # what the unit pins: UUIDs, indices where NVML gave none
    placeholders: bool = False  # no valid layout: the unit shown names GPU indices it cannot pin
    rendered: RenderedUnits | None = None
    render_failure: RigctlError | None = None
    notes: list[str] = field(default_factory=list)
    facts: HostFacts | None = None  # what it was planned on: `up` keeps the host's part in the record (drift)

    @property
    def ok(self) -> bool:
        """Would `up` go ahead: preflight passes and the unit renders, with its real GPUs, for this podman."""
        return self.report.ok and self.rendered is not None and self.render_failure is None and not self.placeholders

    @property
    def render_error(self) -> str | None:
        err = self.render_failure
        return None if err is None else err.message + (f" (fix: {err.fix})" if err.fix else "")

    @property
    def unit_dir(self) -> str:
        return str(install_dir(self.scope))

    def install_problem(self) -> RigctlError | None:
        """Why the rendered unit cannot be installed although preflight passed (a render refusal, or GPU
        indices that would only be guesses), or None."""
        if self.render_failure is not None:
            return self.render_failure
        if self.placeholders or self.rendered is None:
            problems = "; ".join(self.report.choice.problems) or "no GPUs chosen"
            return RenderError(f"no valid GPU layout for {self.recipe.name} on this host ({problems}): the unit "
                               "cannot pin its GPUs", fix="see `rigctl preflight`; or name them with --gpus")
        return None

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: the dry run's document, mostly derived values
        choice = self.report.choice
        files = self.rendered.files if self.rendered else []
        return {
            "recipe": self.recipe.name,
            "scope": str(self.scope),
            "dry_run": True,
            "would_install": self.ok,
            "findings": jsonable(self.report.findings),
            "gpus": jsonable(choice.gpus),
            "layout": {"wanted": choice.wanted, "explicit": choice.explicit, "reasons": choice.reasons,
                       "problems": choice.problems},
            "podman_version": fmt(self.podman_version),
            "quadlet_version": fmt(self.quadlet_version) if self.quadlet_version else None,
            "unit_dir": self.unit_dir,
            "service": self.rendered.service_name if self.rendered else None,
            "files": [{"name": f.name, "path": f"{self.unit_dir}/{f.name}", "text": f.text} for f in files],
            "render_notes": notes_dict(self.rendered.notes if self.rendered else []),
            "render_error": self.render_error,
            "notes": self.notes,
            # `endpoint` is the base URL everywhere else (up, status, swap, the record); the dry run's has always
            # been the OpenAI base URL and stays so: `base_url` is the one meaning, here too
            "endpoint": openai_url(self.recipe.base_url),
            "base_url": self.recipe.base_url,
        }


def notes_dict(notes: Sequence[Note]) -> list[dict[str, str]]:
    return [{"kind": n.kind, "message": n.message} for n in notes]


def _pinned(recipe: Recipe, report: PreflightReport, notes: list[str]) -> Recipe:
    """With ``engine.pin_kv_cache``, vLLM's KV pool as the receipt gpu-fit planned from measured it, added to
    the engine's arguments (``--kv-cache-memory-bytes``): the boot allocates exactly that, no profiling."""
    flag = "--kv-cache-memory-bytes"
    if not recipe.engine.pin_kv_cache or recipe.engine.kind is not EngineKind.VLLM \
            or any(a == flag or a.startswith(flag + "=") for a in recipe.engine.args):
        return recipe
    fit = next((f for f in report.findings if f.id == "gpu-fit"), None)
    fig = fit.figures if fit is not None and fit.figures else {}
    basis = fig.get("basis") or {}
    measured = fig.get("kv_budget_bytes_per_gpu")
    if "receipt" not in basis or not isinstance(measured, int) or measured <= 0:
        notes.append("engine.pin_kv_cache: no receipt of a boot of these settings, image and GPU yet: vLLM sizes "
                     "its KV cache itself this time")
        return recipe
    notes.append(f"engine.pin_kv_cache: {flag} {measured} ({basis['receipt']})")
    engine = recipe.engine.model_copy(update={"args": [*recipe.engine.args, flag, str(measured)]})
    return recipe.model_copy(update={"engine": engine})


def make_plan(
    recipe: Recipe,
    facts: HostFacts,
    *,
    scope: Scope,
    force: Sequence[str] = (),
    gpus: Sequence[str] | None = None,
) -> Plan:
    scope = Scope(scope)
    target = podman_target(None, None, facts.podman, where="the host", scope=scope)  # the one rule render uses
    report = run_preflight(recipe, facts, force=force, gpus=gpus, scope=scope)
    notes: list[str] = []
    if target.podman is None:
        notes.append(f"podman not found on the host: the unit is rendered for podman {fmt(DEFAULT_PODMAN)}")
    recipe = _pinned(recipe, report, notes)
    plan = Plan(recipe, scope, report, target.podman or DEFAULT_PODMAN, notes=notes, facts=facts)
    plan.quadlet_version, plan.quadlet_path = target.quadlet, target.quadlet_path
    placement = place_gpus(recipe, facts, gpus, choice=report.choice)  # the rule `render` pins them by
    plan.gpu_ids = placement.ids if placement.ids is not None else report.choice.unit_ids
    plan.placeholders = recipe.gpus.count > 0 and not placement.pinned
    if plan.placeholders:
        notes.append("no valid GPU layout on this host: the unit shows GPU indices as placeholders")
    # This host's podman first. One too old for the unit: its refusal is part of the plan (not a crash), and
    # the unit is still shown as podman DEFAULT_PODMAN would run it, if the recipe renders at all.
    tries = [(plan.podman_version, plan.quadlet_version)]
    if plan.podman_version < DEFAULT_PODMAN:
        tries.append((DEFAULT_PODMAN, None))
    for podman_version, quadlet_version in tries:
        try:
            plan.rendered = render_units(recipe, podman_version=podman_version, quadlet_version=quadlet_version,
                                         gpu_ids=None if plan.placeholders else plan.gpu_ids, scope=scope)
        except RigctlError as err:
            plan.render_failure = plan.render_failure or err
            continue
        if plan.render_failure is not None:
            notes.append(f"the unit shown is rendered for podman {fmt(DEFAULT_PODMAN)}: this host's podman "
                         f"{fmt(plan.podman_version)} cannot run it as it is")
        break
    if not report.ok:
        notes.append("preflight failed: nothing would be installed until the failures above are fixed "
                     "(or forced with --force ID where that is safe)")
    return plan
