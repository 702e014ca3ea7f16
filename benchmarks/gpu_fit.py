"""gpu-fit: how long planning a many-shard checkpoint takes, and how close the plan is to vLLM's own numbers.

1. Writes a DeepSeek-V3-sized checkpoint (163 shards, the tensors of 61 MLA layers with 256 routed experts each:
   about 90,000 tensors) as sparse safetensors files in a temporary directory, then times planning its GPU memory
   (median of N runs; target: well under 100 ms): cold, every header read and parsed (the first plan after a
   download; msgspec's import, about 10 ms once per process, is paid before the first run), and warm, each shard's
   summary from rigctl's cache (a fresh cache object each run, read from its file as a new rigctl process would,
   every shard stat'ed to prove it unchanged). The load average is printed with the figures: on a shared machine
   the CPU time is the one to compare.
2. Prints the accuracy table against the published vLLM start-up logs in tests/fixtures/vllm-startup-logs: rigctl's
   full-context sequences x context in the KV memory the log reports, against vLLM's "GPU KV cache size"; and, where
   the log gives the GPU's memory and the loaded weights, the whole budget estimate (utilization x total, less
   weights and rigctl's overhead estimate) against vLLM's KV memory.

    uv run python benchmarks/gpu_fit.py [--runs N] [--headers-only]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rigctl.host.safetensors import SummaryCache, read_checkpoint

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
GIB = 1024**3
TARGET_MS = 100.0


def _tensors() -> list[tuple[str, str, list[int], int]]:
    embed = ("model.embed_tokens.weight", "BF16", [129280, 7168], 129280 * 7168 * 2)
    out: list[tuple[str, str, list[int], int]] = [embed]
    for layer in range(61):
        p = f"model.layers.{layer}"
        for name, shape in (("self_attn.q_a_proj.weight", [1536, 7168]), ("self_attn.q_b_proj.weight", [24576, 1536]),
                            ("self_attn.kv_a_proj_with_mqa.weight", [576, 7168]),
                            ("self_attn.kv_b_proj.weight", [32768, 512]), ("self_attn.o_proj.weight", [7168, 16384])):
            out.append((f"{p}.{name}", "F8_E4M3", shape, shape[0] * shape[1]))
        for name in ("input_layernorm.weight", "post_attention_layernorm.weight", "self_attn.kv_a_layernorm.weight"):
            out.append((f"{p}.{name}", "BF16", [7168], 7168 * 2))
        for e in range(256 if layer >= 3 else 0):
            for proj, shape in (("gate_proj", [2048, 7168]), ("up_proj", [2048, 7168]), ("down_proj", [7168, 2048])):
                out.append((f"{p}.mlp.experts.{e}.{proj}.weight", "F8_E4M3", shape, shape[0] * shape[1]))
                out.append((f"{p}.mlp.experts.{e}.{proj}.weight_scale_inv", "F32", [16, 56], 16 * 56 * 4))
    out.append(("lm_head.weight", "BF16", [129280, 7168], 129280 * 7168 * 2))
    return out


def write_checkpoint(directory: Path, shards: int) -> list[str]:
    tensors = _tensors()
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    per = -(-len(tensors) // shards)
    for i, name in enumerate(names):
        header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
        offset = 0
        for tname, dtype, shape, nbytes in tensors[i * per:(i + 1) * per]:
            header[tname] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        raw = json.dumps(header).encode()
        with (directory / name).open("wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            f.truncate(8 + len(raw) + offset)  # sparse: no data is written, none is read
    (directory / "config.json").write_text((ROOT / "tests/fixtures/model-configs/deepseek-v3.json").read_text())
    return names


def _plan(tmp: str, names: list[str], cache_file: Path | None) -> tuple[float, float, float, Any, int]:
    """One plan: (wall ms, CPU ms of this process, wall ms after the shards, weights, KV bytes). The CPU time is
    the figure to trust on a shared machine: the wall time there counts other processes' turns too."""
    from rigctl.preflight.gpu_fit import kv_per_sequence, shape_from_config, weights_of

    start, cpu = time.perf_counter(), time.process_time()
    local = read_checkpoint(tmp, names, cache=None if cache_file is None else SummaryCache(cache_file))
    read = time.perf_counter()
    w = weights_of(local.weights, tp=8)
    assert local.config is not None, local.problems
    assert local.shards_read == len(names), local.problems
    shape = shape_from_config(local.config, "config.json")
    kv = kv_per_sequence(shape, tp=8, kv_cache_dtype="fp8_ds_mla").for_context(163840)
    done = time.perf_counter()
    return (done - start) * 1000, (time.process_time() - cpu) * 1000, (done - read) * 1000, w, kv


def bench(runs: int, headers_only: bool) -> None:
    """``headers_only``: time reading the headers alone, uncached (for a machine without rigctl's dependencies:
    the plan needs pydantic; the headers are stdlib and nearly all the cold time)."""
    with tempfile.TemporaryDirectory() as tmp:
        names = write_checkpoint(Path(tmp), 163)
        header_bytes = 0
        for n in names:
            with (Path(tmp) / n).open("rb") as f:
                header_bytes += int.from_bytes(f.read(8), "little")
        if headers_only:
            times = []
            for _ in range(runs):
                start = time.perf_counter()
                local = read_checkpoint(tmp, names)
                times.append((time.perf_counter() - start) * 1000)
            print(f"checkpoint: {len(names)} shards, {local.weights.tensors:,} tensors, "
                  f"{header_bytes / 2**20:.1f} MiB of headers")
            print(f"time (reading the headers, no cache): median {statistics.median(times):.1f} ms, "
                  f"min {min(times):.1f} ms over {runs} runs")
            return
        cache_file = Path(tmp) / "cache" / "safetensors.json"
        cold = [_plan(tmp, names, None) for _ in range(runs)]
        _plan(tmp, names, cache_file)  # fills the cache
        warm = [_plan(tmp, names, cache_file) for _ in range(runs)]
        w, kv = warm[-1][3], warm[-1][4]
        assert w == cold[-1][3], "the cached summaries plan the same weights as the headers"
        cached = cache_file.stat().st_size
    print(f"checkpoint: {len(names)} shards, {w.tensors:,} tensors, {header_bytes / 2**20:.1f} MiB of headers; "
          f"the cache holds them in {cached / 1024:.0f} KiB")
    print(f"load average (1, 5, 15 min) after the runs: {', '.join(f'{x:.2f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} CPUs (a shared machine: the CPU time is the figure to compare)")
    print(f"plan: weights {w.bytes_per_gpu / GIB:.1f} GiB/GPU at TP 8, KV {kv / GIB:.2f} GiB for 163,840 tokens; "
          f"planning after the shards: median {statistics.median(t[2] for t in warm):.2f} ms")
    for what, got in (("cold: every header parsed", cold), ("warm: summaries from the cache", warm)):
        wall, cpu = [t[0] for t in got], [t[1] for t in got]
        print(f"time ({what}): wall median {statistics.median(wall):.1f} ms (min {min(wall):.1f}, max "
              f"{max(wall):.1f}), CPU median {statistics.median(cpu):.1f} ms, over {runs} runs "
              f"(target well under {TARGET_MS:.0f} ms)")


END_TO_END = {  # where the log gives the GPU's total memory, gpu_memory_utilization and the loaded weights (V0)
    "llama31-8b-rtx3090-20k.log": {"total_gib": 23.58, "util": 0.90, "weights_gib": 14.9888, "batched": 20000},
    "llama31-8b-rtx3090-29k.log": {"total_gib": 23.58, "util": 0.90, "weights_gib": 14.9888, "batched": 29000},
}


def table() -> None:
    from tests.fixtures.vllm_logs import CASES, LOGS, parse, rigctl_tokens, shape_of

    from rigctl.preflight.gpu_fit import kv_per_sequence, overhead

    print("\n| log | family | context | vLLM tokens | rigctl seqs x context | error | vLLM KV GiB | rigctl budget GiB "
          "(end to end) | error |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for case in CASES:
        if case.get("needed_only"):
            continue
        found = parse((LOGS / case["log"]).read_text())
        vllm = found.get("tokens") or found["blocks"] * case["block_size"]
        _seqs, tokens = rigctl_tokens(case, found)
        e2e = END_TO_END.get(case["log"])
        budget_cells = "| - | - | - |"
        if e2e:
            shape = shape_of(case)
            over = overhead(shape, tp=case["tp"], batched_tokens=e2e["batched"], max_num_seqs=256, eager=False)
            budget = e2e["util"] * e2e["total_gib"] - e2e["weights_gib"] - over.total / GIB
            kv_gib = (found.get("available_gib") or [0])[0]
            budget_cells = f"| {kv_gib:.2f} | {budget:.2f} | {(budget - kv_gib) / kv_gib:+.1%} |"
        print(f"| [{case['log']}] | {case['family']} | {case['context']:,} | {vllm:,} | {tokens:,.0f} | "
              f"{(tokens - vllm) / vllm:+.1%} {budget_cells}")
    print("\n| log | context | vLLM: GiB needed | rigctl kv_bytes_per_sequence GiB | error |")
    print("|---|---:|---:|---:|---:|")
    for case in CASES:
        found = parse((LOGS / case["log"]).read_text())
        if "needed_gib" not in found:
            continue
        plan = kv_per_sequence(shape_of(case), tp=case["tp"], kv_cache_dtype=case.get("kv_cache_dtype"))
        got = plan.for_context(found["needed_context"]) / GIB
        print(f"| [{case['log']}] | {found['needed_context']:,} | {found['needed_gib']:.2f} | {got:.3f} | "
              f"{(got - found['needed_gib']) / found['needed_gib']:+.2%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--headers-only", action="store_true", help="time the header reads alone; no table")
    args = parser.parse_args()
    bench(max(1, min(args.runs, 1000)), args.headers_only)
    if not args.headers_only:
        table()


if __name__ == "__main__":
    main()
