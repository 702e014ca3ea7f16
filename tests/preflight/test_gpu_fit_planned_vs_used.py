"""Planned against used GPU memory per service (for `rigctl status`): what the gpu-fit plan gives the engine on
each of its GPUs, beside what the service's own processes hold there now by NVML (the NVML fake of real H200
captures, its processes as holding() lays them out, as a real H200 showed them)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from tests.preflight.test_gpu_fit_headers import write_shard
from tests.support.nvml_fake import FakeNvml, holding

from rigctl.host.facts import Gpu
from rigctl.host.nvml import probe_gpus
from rigctl.host.safetensors import read_checkpoint
from rigctl.preflight.gpu_fit import CUDA_GRAPHS, planned_vs_used
from rigctl.recipe.load import load
from rigctl.util.jsonable import jsonable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
GIB = 1024**3
ENGINE, WORKER, WORKER2, OTHER = 4_300_001, 4_300_002, 4_300_003, 4_300_099  # beyond any pid_max: no /proc name


def gpus(capture_name: str, *per_device: list[tuple[int, int]]) -> list[Gpu]:
    capture: dict[str, Any] = copy.deepcopy(json.loads((FIXTURES / capture_name).read_text()))
    for device, procs in zip(capture["devices"], per_device, strict=False):
        device.update(holding(device, procs))
    return probe_gpus(FakeNvml(capture), process_name=lambda pid: None).devices


def test_one_gpu_planned_and_used() -> None:
    recipe = load("qwen3-8b-vllm").recipe
    devices = gpus("nvml-h200-capture.json", [(WORKER, 120 * GIB), (OTHER, 2 * GIB)])
    total = devices[0].memory_total_bytes
    assert total == 150_754_820_096
    [row] = planned_vs_used(recipe, [devices[0].uuid], devices, {ENGINE, WORKER})
    assert row.gpu == 0 and row.uuid == devices[0].uuid and row.total_bytes == total
    assert row.planned_bytes == int(0.90 * total) + CUDA_GRAPHS[1]  # --gpu-memory-utilization 0.90, graphs beyond it
    assert row.used_bytes == 120 * GIB  # its own worker's, not the other process's 2 GiB
    # the checkpoint is not on this machine: the recipe's exact size / TP, and the KV budget what is left
    assert row.planned_weights_bytes == recipe.checkpoint.approx_bytes
    assert row.planned_kv_budget_bytes is not None
    assert 0 < row.planned_kv_budget_bytes < int(0.90 * total) - row.planned_weights_bytes
    assert "0.9 (--gpu-memory-utilization) x 140.4 GiB" in row.basis
    doc = jsonable(row)  # as status puts it in its JSON
    assert doc["planned_bytes"] == row.planned_bytes and doc["used_bytes"] == 120 * GIB
    json.dumps(doc, allow_nan=False)


def test_each_gpu_of_a_tensor_parallel_service() -> None:
    recipe = load("qwen3-8b-vllm", sets=["gpus.count=2", "gpus.tensor_parallel=2"]).recipe
    devices = gpus("nvml-h200x2-capture.json", [(ENGINE, 1 * GIB), (WORKER, 60 * GIB)], [(WORKER2, 61 * GIB)])
    rows = planned_vs_used(recipe, ["0", "1"], devices, {ENGINE, WORKER, WORKER2})
    assert [(r.gpu, r.used_bytes) for r in rows] == [(0, 61 * GIB), (1, 61 * GIB)]
    size = recipe.checkpoint.approx_bytes
    assert size is not None
    assert all(r.planned_weights_bytes == size // 2 for r in rows)


def test_without_recorded_gpus_the_gpus_its_processes_hold_count() -> None:
    recipe = load("qwen3-8b-vllm").recipe
    devices = gpus("nvml-h200x2-capture.json", [(OTHER, 5 * GIB)], [(WORKER, 70 * GIB)])
    rows = planned_vs_used(recipe, [], devices, {WORKER})
    assert [(r.gpu, r.used_bytes) for r in rows] == [(1, 70 * GIB)]


def test_used_is_unknown_where_nvml_does_not_say() -> None:
    recipe = load("qwen3-8b-vllm").recipe
    capture: dict[str, Any] = copy.deepcopy(json.loads((FIXTURES / "nvml-h200-capture.json").read_text()))
    entries = holding(capture["devices"][0], [(WORKER, 10 * GIB)])
    entries["nvmlDeviceGetComputeRunningProcesses"]["ok"][0]["usedGpuMemory"] = None  # NVML_VALUE_NOT_AVAILABLE
    capture["devices"][0].update(entries)
    devices = probe_gpus(FakeNvml(capture), process_name=lambda pid: None).devices
    [row] = planned_vs_used(recipe, ["0"], devices, {WORKER})
    assert row.used_bytes is None and row.planned_bytes is not None
    # none of its processes on the GPU: it holds nothing there
    assert planned_vs_used(recipe, ["0"], devices, {ENGINE})[0].used_bytes == 0


def test_weights_from_the_checkpoint_on_this_machine(tmp_path: Path) -> None:
    ckpt = tmp_path / "q"
    ckpt.mkdir()
    cfg = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "model-configs" / "qwen3-8b.json").read_text())
    (ckpt / "config.json").write_text(json.dumps(cfg))
    write_shard(ckpt / "model-00001-of-00001.safetensors",
                {"model.layers.0.mlp.down_proj.weight": ("BF16", [4096, 12288], 2 * 4096 * 12288)})
    recipe = load("qwen3-8b-vllm", sets=[f"checkpoint.path={ckpt}", "checkpoint.shards=1",
                                         f'container.volumes=[{{"host":"{ckpt}","container":"/models/q"}}]']).recipe
    devices = gpus("nvml-h200-capture.json", [(WORKER, 100 * GIB)])
    local = read_checkpoint(str(ckpt), recipe.checkpoint.shard_names())
    [row] = planned_vs_used(recipe, ["0"], devices, {WORKER}, local=local)
    assert row.planned_weights_bytes == 2 * 4096 * 12288 and "safetensors headers of 1 shard" in row.basis


def test_a_recipe_without_gpus_plans_none() -> None:
    recipe = load("qwen3-8b-vllm", sets=["gpus.count=0", "gpus.tensor_parallel=1"]).recipe
    assert planned_vs_used(recipe, [], gpus("nvml-h200-capture.json", [(WORKER, GIB)]), {WORKER}) == []
