"""Receipts parsed from engines' own start-up lines: published logs (tests/fixtures), the test engine's."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rigctl.deploy.receipt import GIB, MAX_LINE, MIB, Receipt, ReceiptReader, read_receipt

ROOT = Path(__file__).resolve().parents[1]
ENGINE_LOGS = ROOT / "fixtures" / "engine-startup-logs"
VLLM_LOGS = ROOT / "fixtures" / "vllm-startup-logs"
FAKE = ROOT / "engine" / "fake_vllm.py"


def log(directory: Path, name: str) -> str:
    return (directory / name).read_text()


def gib(x: float) -> int:
    return round(x * GIB)


def mib(x: float) -> int:
    return round(x * MIB)


# --- vLLM ------------------------------------------------------------------------------------------


def test_vllm_engine_core_lines() -> None:
    r = read_receipt(log(ENGINE_LOGS, "vllm-engine-core-dp0.log"))
    assert r.engine == "vllm"
    assert r.weights_bytes == gib(2.0513)
    assert r.kv_available_bytes == gib(33.31)
    assert r.kv_tokens == 1_587_648
    assert r.max_concurrency == pytest.approx(775.22)
    assert r.concurrency_context == 2048 and r.context_tokens == 2048
    assert r.graphs_bytes is None and r.kv_refused is None
    assert r.devices == 1  # one EngineCore printed its weights and pool
    assert r.lines == 4


def test_vllm_graph_capture_and_no_prefix() -> None:
    r = read_receipt(log(ENGINE_LOGS, "vllm-graph-capture-2025-06.log"))
    assert r.graphs_bytes == gib(0.45)
    assert r.kv_tokens == 1_131_008
    assert r.max_concurrency == pytest.approx(8.63) and r.concurrency_context == 131_072
    assert r.weights_bytes is None and r.kv_available_bytes is None


def test_vllm_graph_estimate_stands_in_until_capture() -> None:
    r = read_receipt(log(ENGINE_LOGS, "vllm-graph-estimate-qwen35-gguf.log"))
    assert r.graphs_estimate_bytes == gib(1.62)
    assert r.graphs_bytes == gib(1.62)  # no capture line yet: the estimate
    assert r.kv_available_bytes == gib(6.9)
    assert r.kv_tokens == 89_760
    assert r.max_concurrency == pytest.approx(1.36) and r.concurrency_context == 262_144
    captured = ReceiptReader()
    for line in log(ENGINE_LOGS, "vllm-graph-estimate-qwen35-gguf.log").splitlines():
        captured.feed(line)
    captured.feed("INFO 06-02 11:03:55 [gpu_model_runner.py:1933] Graph capturing finished in 37 secs, took 0.45 GiB")
    assert captured.receipt().graphs_bytes == gib(0.45)
    assert captured.receipt().graphs_estimate_bytes == gib(1.62)


def test_vllm_version_lines() -> None:
    r = read_receipt(log(ENGINE_LOGS, "vllm-version-tp2.log"))
    assert r.engine == "vllm"
    assert r.engine_version == "0.10.2.dev378+g4d7fe40fc.d20250829"
    assert r.weights_bytes is None


def test_vllm_worker_prefix_weights() -> None:
    r = read_receipt(log(ENGINE_LOGS, "vllm-worker-tp0-weights.log"))
    assert r.weights_bytes == gib(12.66)
    assert r.devices == 1


def test_vllm_multi_rank_takes_the_smallest_pool() -> None:
    r = read_receipt(log(VLLM_LOGS, "deepseek-v2-lite-pp2-tp2.log"))
    assert r.kv_available_bytes == gib(11.33)  # ranks 2 and 3 (the second PP stage) bind
    assert r.kv_tokens == 807_792
    assert r.max_concurrency == pytest.approx(788.86) and r.concurrency_context == 1024
    assert r.devices == 4


def test_vllm_rank_zero_weights_whatever_the_order() -> None:
    reader = ReceiptReader()
    reader.feed("(VllmWorker rank=1 pid=2) INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 9.50 GiB")
    reader.feed("(VllmWorker rank=0 pid=1) INFO 01-01 00:00:00 [gpu_model_runner.py:1] Model loading took 9.25 GiB")
    assert reader.receipt().weights_bytes == gib(9.25)


def test_vllm_published_single_gpu_logs() -> None:
    qwen14 = read_receipt(log(VLLM_LOGS, "qwen3-14b-32k.log"))
    assert (qwen14.kv_available_bytes, qwen14.kv_tokens) == (gib(6.51), 42_656)
    assert qwen14.max_concurrency == pytest.approx(1.30) and qwen14.concurrency_context == 32_768
    small = read_receipt(log(VLLM_LOGS, "qwen3-1.7b-1k.log"))
    assert (small.kv_available_bytes, small.kv_tokens, small.max_concurrency) == (gib(18.78), 175_856, None)


def test_vllm_v0_profiling_results() -> None:
    r = read_receipt(log(VLLM_LOGS, "llama31-8b-rtx3090-20k.log"))
    assert r.weights_bytes == gib(14.9888)  # "GB" that is GiB: bytes / 2**30
    assert r.torch_peak_bytes == gib(17.06)
    assert r.non_torch_bytes == gib(0.35)
    assert r.kv_available_bytes == gib(3.81)  # V0's kv_cache_size
    assert r.max_concurrency == pytest.approx(1.56) and r.concurrency_context == 20_000
    assert r.kv_refused is None


def test_vllm_v0_refusal_by_tokens() -> None:
    r = read_receipt(log(VLLM_LOGS, "llama31-8b-rtx3090-29k.log"))
    assert r.kv_refused is True
    assert r.kv_tokens == 23_648
    assert r.kv_available_bytes == gib(2.89)


def test_vllm_refused_start_up() -> None:
    r = read_receipt(log(VLLM_LOGS, "deepseek-v2-lite-32k-needed.log"))
    assert r.kv_refused is True
    assert r.kv_needed_bytes == gib(0.95)
    assert r.kv_available_bytes == gib(0.93)  # from the refusal itself: no pool line was printed
    assert r.context_tokens == 32_768
    coder = read_receipt(log(VLLM_LOGS, "qwen3-coder-480b-dp8-256k-needed.log"))
    assert (coder.kv_needed_bytes, coder.kv_available_bytes) == (gib(62.00), gib(48.66))
    assert coder.estimated_max_len == 205_728


def test_vllm_refusal_does_not_replace_a_measured_pool() -> None:
    # this file joins two runs: the pool line of one and the refusal of another
    r = read_receipt(log(VLLM_LOGS, "qwen3-30b-a3b-fp8kv-100k.log"))
    assert r.weights_bytes == gib(29.09)
    assert r.kv_available_bytes == gib(10.55)
    assert r.kv_needed_bytes == gib(10.12) and r.kv_refused is True


@pytest.mark.parametrize("text", [
    # vLLM 0.7-0.8: the numbers ride on the message's third line, which has no prefix
    "model weights take 14.99GiB; non_torch_memory takes 0.35GiB; PyTorch activation peak memory takes 1.24GiB; "
    "the rest of the memory reserved for KV Cache is 54.62GiB.",
])
def test_vllm_old_v1_profiling_line(text: str) -> None:
    r = read_receipt(text, engine="vllm")
    assert (r.weights_bytes, r.non_torch_bytes, r.peak_activation_bytes, r.kv_available_bytes) == (
        gib(14.99), gib(0.35), gib(1.24), gib(54.62))


def test_vllm_profiling_summary_negative_is_no_number() -> None:
    line = ("(EngineCore_DP0 pid=9) DEBUG 02-03 04:41:31 [v1/worker/gpu_worker.py:399] Memory profiling takes 24.71 "
            "seconds. Total non KV cache memory: 16.70GiB; torch peak memory increase: 1.40GiB; non-torch forward "
            "increase memory: -15.24GiB; weights memory: 15.27GiB.")
    r = read_receipt(line)
    assert r.non_kv_bytes == gib(16.70)
    assert r.peak_activation_bytes == gib(1.40)
    assert r.non_torch_bytes is None
    assert r.weights_bytes == gib(15.27)


# --- SGLang ----------------------------------------------------------------------------------------


def test_sglang_single_gpu() -> None:
    r = read_receipt(log(ENGINE_LOGS, "sglang-gemma3-tp1.log"))
    assert r.engine == "sglang"
    assert r.weights_bytes == gib(8.13)
    assert r.kv_available_bytes == gib(54.12) + gib(54.12)
    assert r.kv_tokens == 834_615
    assert r.free_after_bytes == gib(14.61)  # the pool's end: the last stage this paste reached
    assert r.graphs_bytes is None and r.max_concurrency is None
    assert r.lines == 3  # the graph capture's begin line carries no receipt number


def test_sglang_2024_format() -> None:
    r = read_receipt(log(ENGINE_LOGS, "sglang-mistral-7b-2024.log"))
    assert r.weights_bytes is None  # no "mem usage" yet
    assert r.kv_tokens == 56_524
    assert r.context_tokens == 32_768
    assert r.free_after_bytes == gib(2.44)
    assert r.graphs_bytes is None


def test_sglang_dp_ranks() -> None:
    r = read_receipt(log(ENGINE_LOGS, "sglang-qwen3-vl-moe-dp2-npu.log"))
    assert r.weights_bytes == gib(30.67)
    assert r.kv_available_bytes == gib(8.84) * 2
    assert r.kv_tokens == 192_896
    assert r.free_after_bytes == gib(11.85)  # the smaller of the two ranks
    assert r.devices == 2


def test_sglang_tp8_takes_the_binding_rank_and_ignores_other_mem_usage() -> None:
    r = read_receipt(log(ENGINE_LOGS, "sglang-tp8-h200.log"))
    assert r.weights_bytes is None  # "Init torch distributed ends. mem usage" is not the weights
    assert r.kv_available_bytes == gib(53.31) * 2
    assert r.kv_tokens == 2_795_207
    assert r.free_after_bytes == gib(11.87)


def test_sglang_graph_end_per_rank() -> None:
    r = read_receipt(log(ENGINE_LOGS, "sglang-graph-end-tp2.log"))
    assert r.graphs_bytes == gib(1.04)  # the rank whose graphs took most
    assert r.free_after_bytes == gib(11.17)  # the rank with least left


def test_sglang_b200_and_the_235b_pool() -> None:
    b200 = read_receipt(log(ENGINE_LOGS, "sglang-b200-single.log"))
    assert b200.kv_available_bytes == gib(59.91) * 2
    assert b200.graphs_bytes == gib(1.44)
    assert b200.free_after_bytes == gib(38.05)  # after capture, not the pool's 40.03
    big = read_receipt(log(ENGINE_LOGS, "sglang-qwen3-235b-fp8-tp4.log"))
    assert (big.engine, big.kv_tokens, big.kv_available_bytes) == ("sglang", 367_404, gib(8.23) * 2)


def test_sglang_totals_line_with_text_around_it() -> None:
    r = read_receipt(log(ENGINE_LOGS, "sglang-totals-256k.log"))
    assert r.kv_tokens == 2_086_558
    assert r.context_tokens == 256_000
    assert r.free_after_bytes == gib(17.22)


def test_sglang_mla_pool() -> None:
    r = read_receipt("[2025-11-04 05:27:13 DP0 TP0 EP0] KV Cache is allocated. #tokens: 524288, KV size: 17.16 GB")
    assert (r.kv_tokens, r.kv_available_bytes) == (524_288, gib(17.16))


# --- llama.cpp -------------------------------------------------------------------------------------


def test_llama_two_gpus_old_format() -> None:
    r = read_receipt(log(ENGINE_LOGS, "llama-server-2gpu-rtx4070ti-3090ti.log"))
    assert r.engine == "llama.cpp"
    assert r.weights_bytes == mib(13989.53)  # the fuller device; the CPU buffer is host memory
    assert r.kv_available_bytes == mib(3584.00)
    assert r.peak_activation_bytes == mib(672.01)
    assert r.kv_tokens == 4096 and r.context_tokens == 4096
    assert r.devices == 2


def test_llama_eight_gpus() -> None:
    r = read_receipt(log(ENGINE_LOGS, "llama-server-deepseek-8gpu.log"))
    assert r.weights_bytes == mib(25338.47)
    assert r.kv_available_bytes == mib(5824.00)
    assert r.kv_tokens == 16_384  # kv_size
    assert r.context_tokens == 2048  # one slot's share
    assert r.devices == 8


def test_llama_iswa_modern_with_colour_text() -> None:
    r = read_receipt(log(ENGINE_LOGS, "llama-server-dsv4-iswa.log"))
    assert r.engine == "llama.cpp"
    assert r.kv_available_bytes == mib(182.75)
    assert r.kv_tokens == 64_000  # the full cache's cells, not the window's
    assert r.context_tokens == 64_000
    assert r.weights_bytes is None and r.devices == 1


def test_llama_buffers_sum_per_device() -> None:
    reader = ReceiptReader("llama.cpp")
    for line in ("llama_kv_cache:      CUDA0 KV buffer size =   100.00 MiB",
                 "llama_kv_cache:      CUDA0 KV buffer size =    50.00 MiB",
                 "llama_kv_cache:      CUDA1 KV buffer size =   120.00 MiB",
                 "build: 4701 (be3bbd62) with MSVC 19.41.34120.0 for x64"):
        reader.feed(line)
    r = reader.receipt()
    assert r.kv_available_bytes == mib(150) and r.devices == 2
    assert r.engine_version == "b4701 (be3bbd62)"


def test_llama_ci_slot_line() -> None:
    # tests/interop's real llama-server (CPU): no GPU buffer, the slot context only
    r = read_receipt("0.00.026.721 I srv    load_model: initializing, n_slots = 4, n_ctx_slot = 1024, kv_unified = 'false'")
    assert r.engine == "llama.cpp" and r.context_tokens == 1024 and r.weights_bytes is None


# --- prefixes, colours, hostile input --------------------------------------------------------------


def test_ansi_and_k8s_prefixes() -> None:
    lines = [
        "2025-10-03T16:22:17.123456789+00:00 stdout F (EngineCore_DP0 pid=1133552) INFO 10-03 16:22:17 "
        "[gpu_worker.py:298] Available KV cache memory: 6.51 GiB",
        "\x1b[1;36m(EngineCore_DP0 pid=1133552)\x1b[0;0m INFO 10-03 16:22:17 [kv_cache_utils.py:864] "
        "GPU KV cache size: \x1b[1m42,656\x1b[0m tokens",
    ]
    r = read_receipt("\n".join(lines))
    assert (r.kv_available_bytes, r.kv_tokens) == (gib(6.51), 42_656)
    coloured = log(ENGINE_LOGS, "llama-server-dsv4-iswa.log").replace("[3", "\x1b[3").replace("[0m", "\x1b[0m")
    assert read_receipt(coloured).kv_available_bytes == mib(182.75)


def test_long_lines_are_ignored() -> None:
    reader = ReceiptReader()
    reader.feed("Available KV cache memory: 6.51 GiB " + "x" * MAX_LINE)
    assert reader.receipt().empty
    reader.feed("Available KV cache memory: 6.51 GiB")
    assert reader.receipt().kv_available_bytes == gib(6.51)


def test_unrelated_output_gives_an_empty_receipt() -> None:
    reader = ReceiptReader()
    for line in ('INFO:     127.0.0.1:5000 - "GET /health HTTP/1.1" 200 OK', "Loading safetensors checkpoint shards: 3/8",
                 "Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s", ""):
        reader.feed(line)
    r = reader.receipt()
    assert r.empty and r.engine is None and r.lines == 0


def test_absurd_numbers_are_dropped() -> None:
    r = read_receipt("Available KV cache memory: 99999999999999.00 GiB\nGPU KV cache size: 123456789012345678 tokens")
    assert r.kv_available_bytes is None and r.kv_tokens is None


def test_engine_named_up_front_reads_only_its_lines() -> None:
    r = read_receipt(log(ENGINE_LOGS, "sglang-gemma3-tp1.log"), engine="vllm")
    assert r.empty and r.engine == "vllm"
    with pytest.raises(ValueError, match="unknown engine"):
        ReceiptReader("tgi")


def test_round_trip() -> None:
    r = read_receipt(log(VLLM_LOGS, "deepseek-v2-lite-pp2-tp2.log"))
    assert Receipt.from_dict(r.to_dict()) == r
    assert not r.empty


@pytest.mark.parametrize("bad", [
    math.nan, math.inf, -math.inf, -1, -0.5, 1 << 50, 10**30, "12", "NaN", True, None, [1], {"a": 1}, 1.5,
])
def test_from_dict_hostile_numbers(bad: object) -> None:
    r = Receipt.from_dict({"engine": "vllm", "weights_bytes": bad, "kv_tokens": bad, "max_concurrency": bad,
                           "devices": bad, "lines": bad, "kv_refused": bad, "engine_version": bad})
    assert r.weights_bytes is None and r.kv_tokens is None and r.devices is None and r.lines == 0
    assert r.engine_version == (bad if isinstance(bad, str) else None)  # a version is any short printable text
    assert r.kv_refused == (bad if isinstance(bad, bool) else None)
    if not (isinstance(bad, float) and math.isfinite(bad) and bad >= 0):
        assert r.max_concurrency is None


@pytest.mark.parametrize("data", [None, [], "receipt", 42, {"engine": "tgi"}, {"engine": 3, "unknown": 1},
                                  {"engine_version": "0.10\x00\n", "kv_refused": "yes"}])
def test_from_dict_hostile_records(data: object) -> None:
    r = Receipt.from_dict(data)
    assert r.engine is None and r.engine_version is None and r.kv_refused is None and r.empty


def test_from_dict_keeps_good_values() -> None:
    r = Receipt.from_dict({"engine": "sglang", "kv_available_bytes": 17.0, "max_concurrency": 2, "lines": 3,
                           "kv_refused": False, "engine_version": "0.5.6"})
    assert (r.engine, r.kv_available_bytes, r.max_concurrency, r.lines, r.kv_refused, r.engine_version) == (
        "sglang", 17, 2.0, 3, False, "0.5.6")


# --- the test engine -------------------------------------------------------------------------------


def test_fake_engine_boot_lines_make_a_receipt(monkeypatch: pytest.MonkeyPatch) -> None:
    sys.path.insert(0, str(FAKE.parent))
    try:
        import fake_vllm
    finally:
        sys.path.remove(str(FAKE.parent))
    monkeypatch.setenv("FAKE_VLLM_KV_GIB", "20.5")
    monkeypatch.setenv("FAKE_VLLM_GRAPHS_GIB", "not a number")  # falls back to the default
    args = fake_vllm.parse_args(["--max-model-len", "8192"])
    text = "\n".join(f"INFO 10-03 16:22:17 [{src}] {msg}" for src, msg in fake_vllm.boot_lines(args))
    r = read_receipt(text)
    assert (r.engine, r.weights_bytes, r.kv_available_bytes, r.kv_tokens) == ("vllm", gib(15.26), gib(20.5), 379_392)
    assert r.concurrency_context == 8192 and r.max_concurrency == pytest.approx(round(379_392 / 8192, 2))
    assert r.graphs_bytes == gib(0.52)


def test_fake_engine_process_prints_its_receipt() -> None:
    env = {**os.environ, "FAKE_VLLM_WARMUP_SECONDS": "0.3", "FAKE_VLLM_WEIGHTS_GIB": "7.5",
           "FAKE_VLLM_KV_TOKENS": "4096", "FAKE_VLLM_MAX_MODEL_LEN": "4096"}
    proc = subprocess.Popen([sys.executable, str(FAKE), "--port", "0", "--no-access-log"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    reader = ReceiptReader()
    deadline = time.monotonic() + 20
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            reader.feed(line.rstrip("\n"))
            if "Starting vLLM API server" in line or time.monotonic() > deadline:
                break
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    r = reader.receipt()
    assert r.engine_version == "0.0.0+fake"
    assert (r.weights_bytes, r.kv_tokens, r.max_concurrency, r.concurrency_context) == (gib(7.5), 4096, 1.0, 4096)
    assert r.kv_available_bytes == gib(52.1) and r.graphs_bytes == gib(0.52)
