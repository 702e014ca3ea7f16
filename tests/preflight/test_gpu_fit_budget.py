"""gpu-fit's budget, term by term, as vLLM (V1 and older), SGLang and a pinned or measured KV pool make it; the
margin (fits / tight / does-not-fit); and the plan on a box without the recipe's GPUs."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rigctl.host.facts import GIB, MIB, HostFacts, MemoryReceipt
from rigctl.preflight.finding import Severity
from rigctl.preflight.gpu_fit import (
    CARD_MEMORY_MIB,
    SAMPLER_COPIES,
    Term,
    engine_memory,
    engine_settings,
    padded_layers,
    plan,
    receipt_key,
    shape_from_config,
)
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.model import Recipe

CONFIGS = Path(__file__).resolve().parents[1] / "fixtures" / "model-configs"
H100 = 81_559 * MIB
QWEN_VOCAB = 151_936


def config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((CONFIGS / f"{name}.json").read_text())
    return data


def terms_of(recipe: Recipe, *, total: int = H100, product: str = "NVIDIA H100 80GB HBM3") -> dict[str, Term]:
    shape = shape_from_config(config("qwen3-8b"), "qwen3-8b")
    eng = engine_settings(recipe, total)
    memory = engine_memory(eng, shape, tp=recipe.gpus.tensor_parallel, total=total,
                           weights=Term.exact("weights", 16 * GIB, "test"), product=product)
    return {t.name: t for t in memory.terms()}


# --- the profile run's peak: vLLM's sampler over max_num_seqs --------------------------------------------


def test_sampler_peak_spans_both_accountings_when_the_version_is_unknown(recipe_with: Callable[..., Recipe]) -> None:
    from rigctl.preflight.gpu_fit import forward_activations

    shape = shape_from_config(config("qwen3-8b"), "qwen3-8b")
    peak = terms_of(recipe_with("qwen3-8b-vllm"))["profile_peak"]
    # low: a forward pass alone (vLLM 0.10.1.1's start-ups); high: the sampler's copies over 1024 sequences
    assert peak.low == forward_activations(shape, tp=1, batched_tokens=8192)
    assert peak.high == int(SAMPLER_COPIES[1] * 1024 * QWEN_VOCAB * 4)
    assert "engine.version is not set" in peak.basis


def test_sampler_peak_by_version_gpu_and_flag(recipe_with: Callable[..., Recipe]) -> None:
    new = terms_of(recipe_with("qwen3-8b-vllm", "engine.version=0.11.0"))["profile_peak"]
    assert new.low == int(SAMPLER_COPIES[0] * 1024 * QWEN_VOCAB * 4)
    assert new.high == int(SAMPLER_COPIES[1] * 1024 * QWEN_VOCAB * 4)
    old = terms_of(recipe_with("qwen3-8b-vllm", "engine.version=0.8.5"))["profile_peak"]
    assert old.high < SAMPLER_COPIES[0] * 256 * QWEN_VOCAB * 4  # no sampler copies before 0.11
    # an A100 of 80 GiB and any card under 70 GiB keep 256
    a100 = terms_of(recipe_with("qwen3-8b-vllm", "engine.version=0.11.0"), product="NVIDIA A100-SXM4-80GB")
    assert a100["profile_peak"].high == int(SAMPLER_COPIES[1] * 256 * QWEN_VOCAB * 4)
    small = terms_of(recipe_with("qwen3-8b-vllm", "engine.version=0.11.0"), total=24 * GIB, product="x")
    assert small["profile_peak"].high == int(SAMPLER_COPIES[1] * 256 * QWEN_VOCAB * 4)
    pinned = terms_of(recipe_with("qwen3-8b-vllm", "engine.version=0.11.0",
                                  'engine.args=["--max-num-seqs","16"]'))["profile_peak"]
    # 16 sequences' logits are small: the forward pass of 8,192 batched tokens is the peak then
    assert pinned.low < 256 * QWEN_VOCAB * 4 * SAMPLER_COPIES[0] and "--max-num-seqs 16" in pinned.basis


def test_v1_holds_the_cuda_context_and_graphs_beyond_the_budget_older_versions_inside(
        recipe_with: Callable[..., Recipe]) -> None:
    shape = shape_from_config(config("qwen3-8b"), "qwen3-8b")
    weights = Term.exact("weights", 16 * GIB, "test")
    v1 = engine_memory(engine_settings(recipe_with("qwen3-8b-vllm", "engine.version=0.10.1"), H100), shape, tp=1,
                       total=H100, weights=weights)
    assert [t.name for t in v1.inside] == ["weights", "profile_peak", "non_torch"]
    assert [t.name for t in v1.outside] == ["cuda_context", "cuda_graphs"]
    v0 = engine_memory(engine_settings(recipe_with("qwen3-8b-vllm", "engine.version=0.6.4"), H100), shape, tp=1,
                       total=H100, weights=weights)
    assert "cuda_context" in [t.name for t in v0.inside]


def test_non_torch_at_tp2_is_the_measured_two_gib() -> None:
    from rigctl.recipe.load import load

    recipe = load("glm53-flash", sets=["engine.version=0.19.0"]).recipe
    shape = shape_from_config(config("qwen3-8b"), "qwen3-8b")
    memory = engine_memory(engine_settings(recipe, 97_887 * MIB), shape, tp=2, total=97_887 * MIB,
                           weights=Term.exact("weights", GIB, "test"))
    non_torch = next(t for t in memory.inside if t.name == "non_torch")
    assert non_torch.low <= 2.07 * GIB and non_torch.high >= 2.17 * GIB


def test_sglang_fraction_covers_weights_and_kv_only(recipe_with: Callable[..., Recipe]) -> None:
    recipe = recipe_with("qwen3-8b-vllm", "engine.kind=sglang", 'engine.args=["--mem-fraction-static","0.8"]')
    shape = shape_from_config(config("qwen3-8b"), "qwen3-8b")
    memory = engine_memory(engine_settings(recipe, H100), shape, tp=1, total=H100,
                           weights=Term.exact("weights", 16 * GIB, "test"))
    assert memory.utilization == 0.8 and [t.name for t in memory.inside] == ["weights"]
    assert "activations" in [t.name for t in memory.outside]


# --- weights the headers do not show ---------------------------------------------------------------------


def test_online_fp8_halves_the_linear_layers(recipe_with: Callable[..., Recipe]) -> None:
    recipe = recipe_with("qwen3-8b-vllm", 'engine.args=["--quantization","fp8"]')
    shape = shape_from_config(config("qwen3-8b"), "qwen3-8b")
    p = plan(recipe, shape, total_bytes=H100, weights=16 * GIB, weights_basis="recipe")
    w = next(t for t in p.engine.inside if t.name == "weights")
    assert w.low < 9 * GIB and w.high < 10 * GIB and "--quantization fp8" in w.basis
    plain = plan(recipe_with("qwen3-8b-vllm"), shape, total_bytes=H100, weights=16 * GIB, weights_basis="recipe")
    assert plain.weights == 16 * GIB


def test_mxfp4_experts_load_padded_on_hopper_only(recipe_with: Callable[..., Recipe]) -> None:
    recipe = recipe_with("qwen3-8b-vllm")
    shape = shape_from_config({**config("qwen3-30b-a3b"), "quantization_config": {"quant_method": "mxfp4"}}, "x")
    assert shape.quant_method == "mxfp4"
    hopper = plan(recipe, shape, total_bytes=H100, weights=60 * GIB, weights_basis="r", compute_capability="9.0")
    blackwell = plan(recipe, shape, total_bytes=H100, weights=60 * GIB, weights_basis="r", compute_capability="12.0")
    assert blackwell.weights == 60 * GIB
    assert 60 * GIB * 1.04 < hopper.weights <= 60 * GIB * 1.07


# --- the hybrid allocator's padding ------------------------------------------------------------------------


def test_hybrid_groups_are_padded_as_vllm_pads_them() -> None:
    # vLLM's "Add 2 padding layers, may waste at most 9.09%": 22 sliding layers beside 4 full ones, groups of 4
    assert padded_layers([4, 22, 0]) == ([4, 24, 0], 2)
    assert padded_layers([12, 0, 36]) == ([12, 0, 36], 0)  # Qwen3-Next: 1 in 4 full attention, no padding
    assert padded_layers([10, 11, 0]) == ([11, 11, 0], 1)  # within 1.25x: the larger count is the group
    assert padded_layers([32, 0, 0]) == ([32, 0, 0], 0)  # one kind: nothing to group


def test_gemma3_plan_counts_the_padding() -> None:
    from rigctl.preflight.gpu_fit import kv_per_sequence

    shape = shape_from_config(config("gemma-3-27b-it"), "gemma")  # 10 full + 52 sliding: groups of 10
    padded = kv_per_sequence(shape, tp=1, pad_groups=True)
    plain = kv_per_sequence(shape, tp=1)
    assert padded.sliding_per_token_bytes == plain.sliding_per_token_bytes * 60 // 52
    assert "8 padding layer(s)" in padded.padding


# --- the margin --------------------------------------------------------------------------------------------


def test_a_pinned_kv_pool_is_the_budget(recipe_with: Callable[..., Recipe],
                                        facts_for: Callable[..., HostFacts]) -> None:
    recipe = recipe_with("qwen3-8b-vllm", 'engine.args=["--kv-cache-memory-bytes","20G"]')
    f = run_preflight(recipe, facts_for(recipe, "pro6000-single")).finding("gpu-fit")
    assert f.figures is not None
    assert f.figures["kv_budget_bytes_per_gpu"] == f.figures["kv_budget_bytes_per_gpu_optimistic"] == 20 * GIB
    assert "--kv-cache-memory-bytes" in f.figures["basis"]["receipt"]


def test_a_receipt_of_the_same_settings_image_and_gpu_replaces_the_estimate(
        recipe_with: Callable[..., Recipe], facts_for: Callable[..., HostFacts]) -> None:
    recipe = recipe_with("qwen3-8b-vllm")
    facts = facts_for(recipe, "pro6000-single")
    product = facts.gpu.devices[0].name
    before = run_preflight(recipe, facts).finding("gpu-fit")
    assert before.figures is not None and before.figures["basis"]["gpu_product"] == product
    assert before.figures["basis"]["receipt_key"] == receipt_key(recipe)
    receipt = MemoryReceipt(recipe=recipe.name, key=receipt_key(recipe), image=recipe.image, gpu_product=product,
                            at="2026-12-07T10:00:00+00:00", engine="vllm", kv_available_bytes=int(61.5 * GIB),
                            weights_bytes=int(15.27 * GIB))
    after = run_preflight(recipe, facts.model_copy(update={"receipts": [receipt]})).finding("gpu-fit")
    fig = after.figures
    assert fig is not None and fig["kv_budget_bytes_per_gpu"] == fig["kv_budget_bytes_per_gpu_optimistic"]
    assert fig["kv_budget_bytes_per_gpu"] == int(61.5 * GIB) and "receipt" in fig["basis"]
    assert fig["weights_bytes_per_gpu"] == int(15.27 * GIB)
    # another image, GPU product or engine setting: the estimate again
    for other in (receipt.model_copy(update={"image": recipe.image.replace("sha256:", "sha256:0")}),
                  receipt.model_copy(update={"gpu_product": "NVIDIA H200"}),
                  receipt.model_copy(update={"key": "0" * 16})):
        again = run_preflight(recipe, facts.model_copy(update={"receipts": [other]})).finding("gpu-fit")
        assert again.figures is not None and "receipt" not in again.figures["basis"]


# --- no GPU here -------------------------------------------------------------------------------------------


def test_no_gpu_plans_for_the_first_accepted_product(glm: Recipe, facts_for: Callable[..., HostFacts]) -> None:
    facts = facts_for(glm, "no-nvml")
    f = run_preflight(glm, facts).finding("gpu-fit")
    assert f.figures is not None and f.severity is not Severity.SKIP
    assert f.message.startswith("planned for 2 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (97,887 MiB each")
    assert f.figures["basis"]["gpu_memory_bytes"] == CARD_MEMORY_MIB[glm.gpus.products[0]] * MIB
    for part in ("weights", "profile_peak", "non_torch", "cuda_graphs"):
        assert part in f.message


def test_no_gpu_and_an_unknown_product_uses_min_memory_then_skips(recipe_with: Callable[..., Recipe],
                                                                   facts_for: Callable[..., HostFacts]) -> None:
    recipe = recipe_with("glm53-flash", 'gpus.products=["NVIDIA Some Future Card"]', "gpus.min_memory_mib=97000")
    f = run_preflight(recipe, facts_for(recipe, "no-nvml")).finding("gpu-fit")
    assert "97,000 MiB each, from the recipe's gpus.min_memory_mib" in f.message
    bare = recipe_with("glm53-flash", 'gpus.products=["NVIDIA Some Future Card"]', "gpus.min_memory_mib=0")
    g = run_preflight(bare, facts_for(bare, "no-nvml")).finding("gpu-fit")
    assert g.severity is Severity.SKIP and "no gpus.min_memory_mib" in g.message


@pytest.mark.parametrize("value", ["0.x", "v1", "1", "0.11.0 ; rm", "9" * 60])
def test_engine_version_is_a_version(recipe_with: Callable[..., Recipe], value: str) -> None:
    from rigctl.errors import InvalidInputError

    with pytest.raises(InvalidInputError):
        recipe_with("qwen3-8b-vllm", f"engine.version={value}")


def test_pin_kv_cache_renders_what_the_receipt_measured(recipe_with: Callable[..., Recipe],
                                                        facts_for: Callable[..., HostFacts]) -> None:
    from rigctl.places import Scope
    from rigctl.plan.plan import make_plan

    recipe = recipe_with("qwen3-8b-vllm", "engine.pin_kv_cache=true")
    facts = facts_for(recipe, "pro6000-single")
    none_yet = make_plan(recipe, facts, scope=Scope.USER)
    assert "--kv-cache-memory-bytes" not in none_yet.recipe.engine.args
    assert any("no receipt" in n for n in none_yet.notes)
    receipt = MemoryReceipt(recipe=recipe.name, key=receipt_key(recipe), image=recipe.image,
                            gpu_product=facts.gpu.devices[0].name, at="2026-12-07T10:00:00+00:00", engine="vllm",
                            kv_available_bytes=66_000_000_000)
    pinned = make_plan(recipe, facts.model_copy(update={"receipts": [receipt]}), scope=Scope.USER)
    args = pinned.recipe.engine.args
    assert args[-2:] == ["--kv-cache-memory-bytes", "66000000000"]
    assert pinned.rendered is not None and "--kv-cache-memory-bytes 66000000000" in pinned.rendered.files[0].text
    # the pinned recipe is "the same settings": its next receipt is found again
    assert receipt_key(pinned.recipe) == receipt_key(recipe)


def test_the_card_table_and_the_torch_gap_match_the_device_capture() -> None:
    capture = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-2026-12-07"
                          / "torch-vs-nvml.json").read_text())
    from rigctl.preflight.gpu_fit import TOTAL_RESERVE

    assert CARD_MEMORY_MIB[capture["nvml"]["name"]] * MIB == capture["nvml"]["total"]
    gap = capture["nvml"]["total"] - capture["mem_get_info_total"]
    assert TOTAL_RESERVE[0] <= gap <= TOTAL_RESERVE[1]
