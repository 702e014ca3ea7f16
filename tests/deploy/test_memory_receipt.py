"""The memory plan against the boot's receipt: what `up` keeps (deploy.memory), the host's receipts store
(host.receipts), and how status and metrics show them; records and stores are read back as hostile."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.preflight.conftest import healthy_facts

from rigctl.cli.views.deploy import memory_lines
from rigctl.deploy import memory
from rigctl.deploy.metrics import MetricRow, exposition
from rigctl.deploy.receipt import Receipt, read_receipt
from rigctl.host.facts import GIB, MemoryReceipt
from rigctl.host.receipts import KEPT_PER_KEY, read_receipts, record_receipt
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.load import load

FAKE_ENGINE_LINES = """\
INFO 12-07 10:00:01 [gpu_model_runner.py:2] Model loading took 15.2600 GiB and 212.400000 seconds
INFO 12-07 10:00:02 [gpu_worker.py:4] Available KV cache memory: 52.10 GiB
INFO 12-07 10:00:02 [kv_cache_utils.py:5] GPU KV cache size: 379,392 tokens
INFO 12-07 10:00:03 [gpu_model_runner.py:7] Graph capturing finished in 41 secs, took 0.52 GiB
"""


def _findings(*sets: str) -> list:
    recipe = load("qwen3-8b-vllm", sets=list(sets)).recipe
    return list(run_preflight(recipe, healthy_facts(recipe, "pro6000-single")).findings)


def test_after_boot_keeps_the_plan_the_receipt_and_where_they_disagree() -> None:
    findings = _findings()
    receipt = read_receipt(FAKE_ENGINE_LINES, "vllm")
    kept = memory.after_boot(findings, receipt, at=1_796_000_000.0)
    assert kept is not None and kept["receipt"]["kv_available_bytes"] == int(52.10 * GIB)
    planned = kept["planned"]
    assert planned["gpu_product"].startswith("NVIDIA RTX PRO 6000") and planned["receipt_key"]
    assert planned["kv_budget_low_bytes"] <= planned["kv_budget_high_bytes"]
    # 52.1 GiB of KV on a 96 GiB card at utilization 0.9 with 15.3 GiB of weights is far below the plan
    assert kept["disagrees"] and "KV budget 52.10 GiB per GPU, planned" in kept["disagrees"]
    inside = Receipt(engine="vllm", kv_available_bytes=(planned["kv_budget_low_bytes"]
                                                        + planned["kv_budget_high_bytes"]) // 2,
                     weights_bytes=planned["weights_high_bytes"], lines=2)
    assert memory.disagreement(planned, inside) is None


def test_nothing_to_keep_without_a_plan_or_lines() -> None:
    assert memory.after_boot([], Receipt(), at=1.0) is None
    no_gpu = memory.after_boot([], read_receipt(FAKE_ENGINE_LINES, "vllm"), at=1.0)
    assert no_gpu is not None and no_gpu["planned"] is None and no_gpu["disagrees"] is None


@pytest.mark.parametrize("hostile", [
    None, [], "x", {"planned": "x", "receipt": 3},
    {"planned": {"kv_budget_low_bytes": float("nan"), "verdict": "fits; rm -rf"}, "receipt": {"weights_bytes": -1}},
    {"planned": {"kv_budget_low_bytes": 1 << 60}, "disagrees": "\x1b[31m" + "a" * 10_000, "at": "now"},
])
def test_a_damaged_record_entry_shows_only_what_is_sound(hostile: object) -> None:
    shown = memory.view(hostile)
    if shown is None:
        return
    assert not shown["planned"] or "kv_budget_low_bytes" not in shown["planned"]
    assert (shown["planned"] or {}).get("verdict") in (None, "fits", "tight", "does-not-fit")
    assert shown["receipt"] is None and shown["at"] is None
    assert shown["disagrees"] is None or ("\x1b" not in shown["disagrees"] and len(shown["disagrees"]) < 1700)


def test_status_text_and_metrics_show_plan_beside_receipt() -> None:
    kept = memory.after_boot(_findings(), read_receipt(FAKE_ENGINE_LINES, "vllm"), at=1_796_000_000.0)
    shown = memory.view(kept)
    assert shown is not None
    out = io.StringIO()
    memory_lines(out, shown)
    text = out.getvalue()
    assert "KV budget" in text and "52.1 GiB" in text and "weights" in text and "15.3 GiB" in text
    assert "warning: outside the plan's margin" in text
    row = MetricRow(deployment="q", scope="user", unit="rigctl-q.service", up=True, active="active", restarts=0,
                    memory=shown)
    samples = {(s.name, s.labels.get("bound", "")): s.value
               for f in text_string_to_metric_families(exposition([row])) for s in f.samples}
    assert samples[("rigctl_kv_budget_receipt_bytes", "")] == int(52.10 * GIB)
    assert samples[("rigctl_kv_budget_planned_bytes", "low")] <= samples[("rigctl_kv_budget_planned_bytes", "high")]
    assert samples[("rigctl_memory_plan_disagrees", "")] == 1


def _receipt(n: int, **kw: object) -> MemoryReceipt:
    base = {"recipe": "q", "key": "k" * 16, "image": "img@sha256:" + "a" * 64, "gpu_product": "NVIDIA H200",
            "at": f"2026-12-07T10:00:{n:02d}+00:00", "engine": "vllm", "kv_available_bytes": n * GIB}
    return MemoryReceipt.model_validate({**base, **kw})


def test_the_store_keeps_the_newest_of_each_setting(tmp_path: Path) -> None:
    path = tmp_path / "receipts.json"
    for n in range(1, KEPT_PER_KEY + 3):
        record_receipt(_receipt(n), path)
    record_receipt(_receipt(50, gpu_product="NVIDIA H100 80GB HBM3"), path)
    kept, problem = read_receipts(path)
    assert problem is None
    same = [r for r in kept if r.gpu_product == "NVIDIA H200"]
    assert [r.kv_available_bytes for r in same] == [n * GIB for n in range(3, KEPT_PER_KEY + 3)]
    assert any(r.gpu_product == "NVIDIA H100 80GB HBM3" for r in kept)


@pytest.mark.parametrize("body", ["{", '{"receipts": [{"recipe": "q"}]}', '{"receipts": [{"recipe": "q", "key": '
                                  '"k", "image": "i", "gpu_product": "g", "at": "t", "kv_available_bytes": -5}]}'])
def test_a_damaged_store_is_no_receipts_and_says_why(tmp_path: Path, body: str) -> None:
    path = tmp_path / "receipts.json"
    path.write_text(body)
    kept, problem = read_receipts(path)
    assert kept == [] and problem and str(path) in problem
    record_receipt(_receipt(1), path)  # a damaged store is replaced, never a failed `up`
    assert [r.kv_available_bytes for r in read_receipts(path)[0]] == [GIB]


def test_a_store_another_user_could_write_is_not_read(tmp_path: Path) -> None:
    path = tmp_path / "receipts.json"
    record_receipt(_receipt(1), path)
    os.chmod(path, 0o666)
    kept, problem = read_receipts(path)
    assert kept == [] and problem is not None
    assert json.loads(path.read_text())["receipts"]  # left in place, only not believed
