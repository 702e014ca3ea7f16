"""GPU layout on the field's boxes."""

from __future__ import annotations

from collections.abc import Callable

from rigctl.host.facts import HostFacts
from rigctl.preflight.layout import choose_gpus
from rigctl.recipe.model import Recipe

Facts = Callable[..., HostFacts]


def test_matched_pair(glm: Recipe, facts_for: Facts) -> None:
    choice = choose_gpus(glm, facts_for(glm, "pro6000-matched"))
    assert choice.ok and choice.indices == [0, 1] and not choice.explicit
    assert all(u.startswith("GPU-") for u in choice.uuids)


def test_mixed_maxq_and_workstation_is_a_valid_pair(glm: Recipe, facts_for: Facts) -> None:
    choice = choose_gpus(glm, facts_for(glm, "pro6000-mixed"))
    assert choice.ok and choice.indices == [0, 1]


def test_mixed_pair_refused_when_recipe_forbids_mixing(recipe_with: Callable[..., Recipe], facts_for: Facts) -> None:
    recipe = recipe_with("glm53-flash", "gpus.allow_mixed=false")
    choice = choose_gpus(recipe, facts_for(recipe, "pro6000-mixed"))
    assert not choice.ok and "of one product" in choice.problems[0]


def test_two_pro6000_are_taken_beside_a_5090(glm: Recipe, facts_for: Facts) -> None:
    choice = choose_gpus(glm, facts_for(glm, "5090-and-two-pro6000"))
    assert choice.ok and choice.indices == [1, 2]
    assert any("GPU 0 (NVIDIA GeForce RTX 5090) left out" in r for r in choice.reasons)


def test_rtx_6000d_never_matches(glm: Recipe, facts_for: Facts) -> None:
    choice = choose_gpus(glm, facts_for(glm, "rtx6000d-pair"))
    assert not choice.ok and choice.gpus == []
    assert "need 2 matching GPU(s), found 0" in choice.problems[0]


def test_single_card_is_not_enough_for_tp2(glm: Recipe, facts_for: Facts) -> None:
    assert not choose_gpus(glm, facts_for(glm, "pro6000-single")).ok


def test_idle_gpus_are_preferred(recipe_with: Callable[..., Recipe], facts_for: Facts) -> None:
    recipe = recipe_with("glm53-flash", "gpus.count=1", "gpus.tensor_parallel=1")
    choice = choose_gpus(recipe, facts_for(recipe, "pro6000-busy"))
    assert choice.indices == [0]


def test_explicit_selection_wins_and_is_resolved(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "5090-and-two-pro6000")
    uuid2 = facts.gpu.devices[2].uuid
    choice = choose_gpus(glm, facts, ["0", uuid2[:12]])
    assert choice.explicit and choice.indices == [0, 2] and choice.ok  # checked by the checks, not corrected
    bad = choose_gpus(glm, facts, ["7", "1"])
    assert bad.problems == ["--gpus: no GPU with index 7 (this host has 3)"]
    assert choose_gpus(glm, facts, ["1", "1"]).problems == ["--gpus: GPU 1 is selected twice"]
    assert "needs 2" in choose_gpus(glm, facts, ["1"]).problems[0]


def test_recipe_select(recipe_with: Callable[..., Recipe], facts_for: Facts) -> None:
    recipe = recipe_with("glm53-flash", "gpus.select=['2','1']")
    choice = choose_gpus(recipe, facts_for(recipe, "5090-and-two-pro6000"))
    assert choice.explicit and choice.indices == [2, 1] and "recipe gpus.select" in choice.reasons[0]


def test_no_nvml(glm: Recipe, facts_for: Facts) -> None:
    choice = choose_gpus(glm, facts_for(glm, "no-nvml"))
    assert not choice.ok and "NVML is unavailable" in choice.problems[0]
