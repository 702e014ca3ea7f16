"""Deep check gpu-allreduce (opt-in, --deep): a real two-rank NCCL all_reduce on the chosen GPUs."""

from __future__ import annotations

from rigctl.host.facts import HostFacts
from rigctl.preflight.finding import Verdict, skip
from rigctl.preflight.layout import Choice
from rigctl.recipe.model import Recipe


def deep_allreduce(recipe: Recipe, facts: HostFacts, choice: Choice) -> dict[str, Verdict]:
    return {"gpu-allreduce": skip("not implemented yet")}
