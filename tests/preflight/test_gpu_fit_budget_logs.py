"""gpu-fit's whole budget against published vLLM start-ups that show it (tests/fixtures/vllm-startup-logs:
the cases with the engine's version and its "Model loading took" line): the KV memory vLLM found lies within
the plan's margin, and the plan's promise (its pessimistic side) is within 10% of it, in bytes and in the
tokens of KV it holds.

The logs do not say NVML's total. Two start-ups of one model on the same GPU at two utilizations give torch's
total, which vLLM multiplies (the difference of their KV memory over the difference of utilization); the
plan is fed that total plus the middle of the modelled gap between torch's and NVML's totals. The weights are
the engine's own "Model loading took" figure, standing in for the checkpoint's headers."""

from __future__ import annotations

from typing import Any

import pytest
from tests.fixtures.vllm_logs import CASES, LOGS, parse, shape_of

from rigctl.host.facts import GIB
from rigctl.preflight.gpu_fit import TOTAL_RESERVE, plan
from rigctl.recipe.load import load

FULL = [c for c in CASES if c.get("weights_gib") and c.get("vllm_version") and not c.get("refused")]


def torch_total(gpu: str, tp: int) -> float:
    """GiB: from the two utilizations of one model on ``gpu`` at ``tp`` (the same weights and terms)."""
    pair = sorted((c for c in FULL if c.get("gpu_product") == gpu and c["tp"] == tp and c.get("config") ==
                   "qwen2-7b-instruct"), key=lambda c: c["gpu_memory_utilization"])
    if len(pair) < 2:
        pair = sorted((c for c in FULL if c.get("gpu_product") == gpu and c.get("config") == "qwen2-7b-instruct"
                       and c["tp"] == 1), key=lambda c: c["gpu_memory_utilization"])
    lo, hi = (parse((LOGS / c["log"]).read_text())["available_gib"][0] for c in (pair[0], pair[-1]))
    return (hi - lo) / (pair[-1]["gpu_memory_utilization"] - pair[0]["gpu_memory_utilization"])


def _plan(case: dict[str, Any], total_gib: float) -> Any:
    args = ["--gpu-memory-utilization", str(case["gpu_memory_utilization"]),
            "--max-num-batched-tokens", str(case["max_num_batched_tokens"])]
    recipe = load("qwen3-8b-vllm", sets=[
        f"engine.version={case['vllm_version']}", f"context_length={case['context']}", "verify.needle.context=null",
        f"gpus.count={case['tp']}", f"gpus.tensor_parallel={case['tp']}", "gpus.min_memory_mib=0",
        "engine.args=[" + ",".join(f'"{a}"' for a in args) + "]"]).recipe
    total = int(total_gib * GIB) + (TOTAL_RESERVE[0] + TOTAL_RESERVE[1]) // 2
    return plan(recipe, shape_of(case), total_bytes=total, weights=int(case["weights_gib"] * GIB),
                weights_basis="the log's Model loading took", product="NVIDIA A100-SXM4-80GB",
                compute_capability="8.0")


def test_there_are_whole_budget_cases() -> None:
    assert len(FULL) >= 6, [c["log"] for c in FULL]
    assert {c["tp"] for c in FULL} >= {1, 2, 4}


def test_the_two_utilizations_agree_on_torchs_total() -> None:
    # the same card at TP 1 and TP 2 gives the same total: the other terms did not change with utilization
    assert torch_total("A100 80GB", 1) == pytest.approx(torch_total("A100 80GB", 2), abs=0.1)
    assert 78.5 < torch_total("A100 80GB", 1) < 80.0


@pytest.mark.parametrize("case", [c for c in FULL if c.get("gpu_product") == "A100 80GB"], ids=lambda c: c["log"])
def test_vllms_kv_memory_is_within_the_margin_and_the_promise_within_ten_percent(case: dict[str, Any]) -> None:
    found = parse((LOGS / case["log"]).read_text())
    p = _plan(case, torch_total("A100 80GB", 1))
    logged = min(found["available_gib"]) * GIB
    slack = 0.01 * GIB  # the log rounds to 0.01 GiB
    assert p.budget - slack <= logged <= p.budget_optimistic + slack, (p.components(), logged / GIB)
    assert abs(p.budget - logged) <= 0.10 * logged, (p.budget / GIB, logged / GIB)
    # in tokens (full attention): vLLM's "GPU KV cache size" against the plan's pessimistic pool
    per_token = p.kv.per_token_bytes + p.kv.sliding_per_token_bytes
    if not p.kv.sliding_per_token_bytes and "tokens" in found:
        assert abs(p.budget / per_token - found["tokens"]) <= 0.10 * found["tokens"]
    if "concurrency" in found:
        assert abs(p.sequences - found["concurrency"]) <= 0.10 * found["concurrency"]
    assert p.verdict == "fits"
