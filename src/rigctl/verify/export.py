"""`verify --export FILE`: the soak's figures as a file other tools read, in the key names of `vllm bench
serve`'s JSON result (``--save-result``): ``date``, ``backend``, ``model_id``, ``num_prompts``,
``max_concurrency``, ``duration``, ``completed``, ``failed``, ``total_output_tokens``, ``request_throughput``,
``output_throughput`` and ``{mean,median,p99}_{ttft,itl,e2el}_ms``. Only figures the soak measured are
written (no ``total_input_tokens`` or TPOT, which it does not measure). What vLLM's file does not carry,
rigctl adds under one ``rigctl`` key: the recipe, the endpoint, the image and its digest, the GPUs, and the
soak's verdict. Pure: the caller gathers the image digest and the GPU facts and writes the file."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

BENCH_KEYS = (
    "completed", "failed", "total_output_tokens", "request_throughput", "output_throughput",
    *(f"{stat}_{name}_ms" for name in ("ttft", "itl", "e2el") for stat in ("mean", "median", "p99")),
)


def soak_export(
    soak: Any, *, model: str, base_url: str, recipe: str | None, recipe_source: str | None, image: str | None,
    image_digest: str | None, gpus: Sequence[Mapping[str, Any]], gpu_note: str | None, version: str,
    now: float | None = None,
) -> dict[str, Any]:
    """The document for one soak result (``verify.report.CheckResult`` of id "soak")."""
    figures: Mapping[str, Any] = soak.figures
    doc: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now)),
        "backend": "openai",  # streamed /v1/completions, as vllm bench serve's openai backend sends them
        "model_id": model,
        "num_prompts": figures.get("requests"),
        "max_concurrency": figures.get("concurrency"),
        "duration": figures.get("duration_s"),
    }
    doc.update({key: figures[key] for key in BENCH_KEYS if key in figures})
    doc["rigctl"] = {
        "version": version, "status": soak.status, "message": soak.message, "base_url": base_url,
        "recipe": recipe, "recipe_source": recipe_source, "image": image, "image_digest": image_digest,
        "gpus": [dict(g) for g in gpus], "gpu_note": gpu_note,
        "prefix_tokens": figures.get("prefix_tokens"), "prompt_tokens": figures.get("prompt_tokens"),
        "runaways": figures.get("runaways"), "cut_off": figures.get("cut_off"),
        "health_drops": figures.get("health_drops"),
    }
    return doc


def gpu_facts(inventory: Any, ids: Sequence[str]) -> tuple[list[dict[str, Any]], str | None]:
    """The GPUs the deployment uses (all of them when it names none), from ``host.facts.GpuInventory``."""
    if not inventory.available:
        return [], f"NVML not available ({inventory.error or 'no library or driver'})"
    chosen = [g for g in inventory.devices if not ids or str(g.index) in ids or g.uuid in ids]
    return [{"index": g.index, "uuid": g.uuid, "name": g.name, "memory_total_bytes": g.memory_total_bytes,
             "compute_capability": g.compute_capability} for g in chosen], None
