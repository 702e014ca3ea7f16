"""Which GPUs a rendered unit names: the layout `up` would choose, pinned by UUID.

``render`` and ``up`` (``plan.make_plan``) go through ``place_gpus``: ``choose_gpus`` over the host's facts
(this host's NVML, or a captured inventory; the plan hands in preflight's choice), then ``Choice.unit_ids``
for the device names. Only when there are no GPU facts at all does a unit fall back to the GPUs --gpus
names, to what the recipe says (``gpus.select``) or to indices 0..N-1; the last is a guess that the caller
must show as a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.host.facts import HostFacts
from rigctl.preflight.layout import Choice, choose_gpus
from rigctl.recipe.model import Recipe


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
