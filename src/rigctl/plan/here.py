"""`rigctl preflight` on this host (or on a captured inventory): record the licences the operator accepts,
gather the facts the recipe needs once, and run every check on them. The same facts `up` and `swap` judge
(``host.gather.facts_for_recipe``); the command only parses its options and prints the report."""

from __future__ import annotations

from collections.abc import Sequence

from rigctl.host.early import EarlyProbes
from rigctl.host.gather import facts_for_recipe
from rigctl.host.licenses import accept_for
from rigctl.places import Scope
from rigctl.preflight.registry import DeepRunner, PreflightReport, ProgressFactory, run_preflight
from rigctl.recipe.model import Recipe


def preflight_here(
    recipe: Recipe, *, inventory: str | None, early: EarlyProbes | None, accept: Sequence[str] = (),
    force: Sequence[str] = (), gpus: Sequence[str] | None = None, checksums: bool = False, deep: bool = False,
    progress: ProgressFactory | None = None, scope: Scope | None = None,
) -> PreflightReport:
    """``accept``: licence ids accepted now (recorded before the facts are read, so they count);
    ``deep``: also a real NCCL all_reduce on the chosen GPUs (slow); ``scope``: the manager whose quadlet
    generator and systemd are checked, as `up` with the same --user/--system would use them."""
    accept_for(recipe, accept)
    facts = facts_for_recipe(recipe, inventory, early=early, scope=scope)
    deep_runner: DeepRunner | None = None
    if deep:
        from rigctl.plan.deep import deep_allreduce  # noqa: PLC0415 - loads only for --deep

        deep_runner = deep_allreduce
    return run_preflight(recipe, facts, force=force, checksums=checksums, gpus=gpus, deep=deep_runner,
                         progress=progress, scope=scope)
