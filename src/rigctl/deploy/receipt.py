"""Receipts: what an engine itself says about its memory while it starts, read from its own output lines.

rigctl plans memory before a deployment (weights, KV cache, CUDA graphs per GPU); the engine then measures
the same things on the real card and prints them. A receipt keeps those printed numbers, so the plan can be
held up against them. Pure: lines in, a frozen ``Receipt`` out; no I/O and nothing from the rest of rigctl.

Every size is bytes for ONE GPU (the per-GPU view the plan uses). Where several ranks or devices print the
same quantity, the reduction is named on the field: the budget that binds (the smallest KV pool, the least
memory left free) or the GPU that carries the most (the largest graph pool, the fullest llama.cpp device).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Final

GIB: Final = 1 << 30
MIB: Final = 1 << 20
ENGINES: Final = ("vllm", "sglang", "llama.cpp")

MAX_LINE: Final = 4096  # longer lines are config dumps or tracebacks, never a memory line
_MAX_BYTES: Final = 1 << 50  # 1 PiB: no GPU holds this much; a larger number is damage
_MAX_COUNT: Final = 10**12  # tokens, context lengths
_MAX_CONCURRENCY: Final = 1e9
_MAX_DEVICES: Final = 4096
_MAX_LINES: Final = 10**9
_MAX_VERSION: Final = 100

# Substrings one of which every line any rule reads contains: most output lines (access logs, progress
# bars, warnings) stop at this check, before any regular expression runs.
_QUICK: Final = ("GiB", "GB", "MiB", "tokens", "n_ctx", "version", "engine (v", "build: ", "kv_size", "graph end")
_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# The rank a line comes from, read from its prefix: "(VllmWorker rank=3 pid=1)", "(Worker_TP1 pid=2)",
# "(EngineCore_DP0 pid=3)", "[2025-11-04 05:27:13 DP0 TP0 EP0]". No rank named means the only one.
_RANK: Final = re.compile(r"(?<![A-Za-z])(rank=|TP|PP|DP|EP)(\d{1,5})(?!\d)")
# llama.cpp names a device buffer after its backend and index; CUDA_Host, CPU, CPU_Mapped are host memory.
_GPU_DEVICE: Final = re.compile(r"(?:CUDA|ROCm|Vulkan|Metal|MTL|SYCL|CANN|OpenCL)\d+")

RankKey = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Receipt:
    """The engine's own start-up numbers. None: the engine did not say (or the record could not be read)."""

    engine: str | None = None  # "vllm", "sglang" or "llama.cpp": whose lines these were
    engine_version: str | None = None
    weights_bytes: int | None = None  # rank 0's (vLLM, SGLang); the fullest device's (llama.cpp)
    kv_available_bytes: int | None = None  # KV pool: the smallest over ranks; the fullest llama.cpp device's
    kv_tokens: int | None = None  # tokens the KV pool holds (smallest over engines/ranks)
    max_concurrency: float | None = None  # vLLM: full-length requests the pool holds at once
    concurrency_context: int | None = None  # vLLM: the request length that concurrency is counted for
    context_tokens: int | None = None  # the context one request may use, as the engine states it
    graphs_bytes: int | None = None  # CUDA graphs as captured (largest rank); the estimate until then
    graphs_estimate_bytes: int | None = None  # vLLM's estimate before capture (largest rank)
    peak_activation_bytes: int | None = None  # torch's peak increase in profiling; llama.cpp compute buffer
    non_torch_bytes: int | None = None  # memory outside torch's allocator during profiling (NCCL, ...)
    torch_peak_bytes: int | None = None  # vLLM V0: torch's whole peak (weights + activations)
    non_kv_bytes: int | None = None  # vLLM: everything of its budget that is not KV cache
    kv_needed_bytes: int | None = None  # vLLM's refusal: the KV one full-length request needs
    kv_refused: bool | None = None  # True: the engine refused to start for want of KV cache
    estimated_max_len: int | None = None  # vLLM's refusal: the longest context that would have fit
    free_after_bytes: int | None = None  # SGLang: GPU memory left free once started (smallest rank)
    devices: int | None = None  # GPUs that printed memory lines: llama.cpp devices, vLLM/SGLang ranks
    lines: int = 0  # output lines that gave a number

    @property
    def empty(self) -> bool:
        return self.lines == 0 or all(
            getattr(self, f.name) is None for f in fields(self) if f.name not in ("engine", "lines"))

    def to_dict(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, data: object) -> Receipt:
        """Reads back a record that may be damaged: each field that is not what it should be becomes None."""
        if not isinstance(data, Mapping):
            return cls()
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = data.get(f.name)
            if f.name == "engine":
                values[f.name] = raw if isinstance(raw, str) and raw in ENGINES else None
            elif f.name == "engine_version":
                ok = isinstance(raw, str) and 0 < len(raw) <= _MAX_VERSION and raw.isprintable()
                values[f.name] = raw if ok else None
            elif f.name == "kv_refused":
                values[f.name] = raw if isinstance(raw, bool) else None
            elif f.name == "max_concurrency":
                values[f.name] = _bounded_float(raw, _MAX_CONCURRENCY)
            elif f.name == "lines":
                values[f.name] = _bounded_int(raw, _MAX_LINES) or 0
            elif f.name == "devices":
                values[f.name] = _bounded_int(raw, _MAX_DEVICES)
            elif f.name.endswith("_bytes"):
                values[f.name] = _bounded_int(raw, _MAX_BYTES)
            else:
                values[f.name] = _bounded_int(raw, _MAX_COUNT)
        return cls(**values)  # type: ignore[arg-type]


def _bounded_int(raw: object, limit: int) -> int | None:
    if isinstance(raw, bool):
        return None
    if isinstance(raw, float) and math.isfinite(raw) and raw.is_integer():
        raw = int(raw)
    return raw if isinstance(raw, int) and 0 <= raw < limit else None


def _bounded_float(raw: object, limit: float) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float):
        return None
    value = float(raw)
    return value if math.isfinite(value) and 0 <= value < limit else None


def _bytes(number: str, unit: int) -> int | None:
    """A printed size in bytes; negative, absurd or unreadable numbers are no number."""
    try:
        value = float(number) * unit
    except ValueError:
        return None
    return round(value) if math.isfinite(value) and 0 <= value < _MAX_BYTES else None


def _count(number: str) -> int | None:
    digits = number.replace(",", "")
    if not digits.isdigit() or len(digits) > 13:
        return None
    value = int(digits)
    return value if value < _MAX_COUNT else None


def rank_of(prefix: str) -> RankKey:
    return tuple((label, int(n)) for label, n in _RANK.findall(prefix))


Handler = Callable[["ReceiptReader", "re.Match[str]", RankKey], bool]


@dataclass(frozen=True)
class _Rule:
    engine: str
    anchor: str  # a substring the line must hold before the expression is tried
    pattern: re.Pattern[str]
    handle: Handler


class ReceiptReader:
    """Reads an engine's output one line at a time (``feed``) and says what it learned (``receipt``).

    ``engine`` names whose lines to read; left None, the first line that matches a rule decides it. A
    restarted engine prints its start-up again: give each container its own reader.
    """

    def __init__(self, engine: str | None = None) -> None:
        if engine is not None and engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; one of {', '.join(ENGINES)}")
        self.engine = engine
        self._lines = 0
        self._version: str | None = None
        # quantity -> rank (or llama.cpp device) -> bytes or count; reduced in receipt()
        self._per_rank: dict[str, dict[RankKey, float]] = {}
        self._device: dict[str, dict[str, int]] = {}  # llama.cpp: kind -> device -> bytes, summed
        self._single: dict[str, float] = {}  # quantities printed once, first value kept
        self._refused = False
        self._free_stage = 0

    # --- reading -----------------------------------------------------------------------------------

    def feed(self, line: str) -> None:
        if len(line) > MAX_LINE or not any(k in line for k in _QUICK):
            return
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        matched = False
        for rule in _RULES:
            if (self.engine is not None and rule.engine != self.engine) or rule.anchor not in line:
                continue
            m = rule.pattern.search(line)
            if m is None:
                continue
            if rule.handle(self, m, rank_of(line[:m.start()])):
                matched = True
                if self.engine is None:
                    self.engine = rule.engine
        if matched:
            self._lines += 1

    def _put(self, name: str, rank: RankKey, value: float | None) -> bool:
        if value is None:
            return False
        self._per_rank.setdefault(name, {})[rank] = value
        return True

    def _once(self, name: str, value: float | None) -> bool:
        if value is None:
            return False
        self._single.setdefault(name, value)
        return True

    def _add_device(self, kind: str, device: str, value: int | None) -> bool:
        if value is None:
            return False
        per = self._device.setdefault(kind, {})
        per[device] = min(per.get(device, 0) + value, _MAX_BYTES - 1)
        return True

    def _free(self, stage: int, rank: RankKey, value: int | None) -> bool:
        """SGLang's free memory as start-up goes on: a later stage's figure replaces an earlier one's."""
        if value is None or stage < self._free_stage:
            return value is not None
        if stage > self._free_stage:
            self._free_stage = stage
            self._per_rank.pop("free", None)
        return self._put("free", rank, value)

    # --- the receipt -------------------------------------------------------------------------------

    def _least(self, name: str) -> float | None:
        per = self._per_rank.get(name)
        return min(per.values()) if per else None

    def _most(self, name: str) -> float | None:
        per = self._per_rank.get(name)
        return max(per.values()) if per else None

    def _rank0(self, name: str) -> float | None:
        """Rank 0's value (a line naming no rank is the only rank's); else the lowest rank that printed."""
        per = self._per_rank.get(name)
        if not per:
            return None
        return per[min(per, key=lambda key: (any(n for _, n in key), [n for _, n in key]))]

    def _fullest(self, kind: str) -> int | None:
        per = self._device.get(kind)
        return max(per.values()) if per else None

    def receipt(self) -> Receipt:
        if self._lines == 0:
            return Receipt(engine=self.engine)
        if self.engine == "llama.cpp":
            return self._llama_receipt()
        kv_tokens = _first(self._least("kv_tokens"), self._least("kv_tokens_pool"), self._least("kv_tokens_v0"))
        graphs = _first(self._most("graphs"), self._most("graphs_estimate"))
        ranks = {key for name in ("weights", "kv", "graphs", "free") for key in self._per_rank.get(name, {})}
        return Receipt(
            engine=self.engine, engine_version=self._version,
            weights_bytes=_int(_first(self._rank0("weights"), self._rank0("weights_profiled"))),
            kv_available_bytes=_int(_first(self._least("kv"), self._least("kv_profiled"), self._least("kv_budget"))),
            kv_tokens=_int(kv_tokens),
            max_concurrency=self._least("concurrency"),
            concurrency_context=_int(self._single.get("concurrency_context")),
            context_tokens=_int(_first(self._single.get("context"), self._single.get("concurrency_context"),
                                       self._single.get("refused_context"))),
            graphs_bytes=_int(graphs), graphs_estimate_bytes=_int(self._most("graphs_estimate")),
            peak_activation_bytes=_int(self._most("activation")), non_torch_bytes=_int(self._most("non_torch")),
            torch_peak_bytes=_int(self._most("torch_peak")), non_kv_bytes=_int(self._most("non_kv")),
            kv_needed_bytes=_int(self._most("kv_needed")), kv_refused=True if self._refused else None,
            estimated_max_len=_int(self._least("estimated_max_len")),
            free_after_bytes=_int(self._least("free")),
            devices=len(ranks) or None,
            lines=self._lines,
        )

    def _llama_receipt(self) -> Receipt:
        gpus = {d for per in self._device.values() for d in per}
        cells = self._single.get("cells")
        return Receipt(
            engine=self.engine, engine_version=self._version,
            weights_bytes=self._fullest("model"), kv_available_bytes=self._fullest("kv"),
            kv_tokens=_int(_first(cells, self._single.get("n_ctx"))),
            context_tokens=_int(_first(self._single.get("n_ctx_seq"), self._single.get("n_ctx"))),
            peak_activation_bytes=self._fullest("compute"),
            devices=len(gpus) or None, lines=self._lines,
        )


def _first(*values: float | None) -> float | None:
    return next((v for v in values if v is not None), None)


def _int(value: float | None) -> int | None:
    return None if value is None else int(value)


# --- vLLM ------------------------------------------------------------------------------------------
# vLLM's sizes are GiB (2**30 bytes) in every version, whatever the label says: gpu_model_runner.py
# divides by GiB_bytes ("Model loading took"), V0's model_runner.py printed "Loading model weights took
# %.4f GB" of bytes / 2**30, gpu_worker.py formats "Available KV cache memory" with format_gib, and
# capture_model divides "took %.2f GiB" by 1 << 30.


def _v_weights(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._put("weights", rank, _bytes(m.group(1), GIB))


def _v_kv(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._put("kv", rank, _bytes(m.group(1), GIB))


def _v_kv_tokens(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._put("kv_tokens", rank, _count(m.group(1)))


def _v_concurrency(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    context = _count(m.group(1))
    times = _bounded_float(_float(m.group(2)), _MAX_CONCURRENCY)
    if context is not None:
        r._once("concurrency_context", context)
    return r._put("concurrency", rank, times) or context is not None


def _v_graphs(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._put("graphs", rank, _bytes(m.group(1), MIB if m.group(2) == "MiB" else GIB))


def _v_graph_pool(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    actual = r._put("graphs", rank, _bytes(m.group(1), GIB))
    return r._put("graphs_estimate", rank, _bytes(m.group(2), GIB)) or actual


def _v_graph_estimate(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._put("graphs_estimate", rank, _bytes(m.group(1), GIB))


def _v_profile(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    """vLLM >= 0.9's profiling summary, one line (DEBUG in recent versions, INFO before)."""
    text = m.string[m.start():]
    got = False
    for name, label in (("non_kv", "Total non KV cache memory"), ("activation", "torch peak memory increase"),
                        ("non_torch", "non-torch forward increase memory"), ("weights_profiled", "weights memory")):
        found = re.search(re.escape(label) + r":\s*(-?[\d.]+)\s*GiB", text)
        if found:
            got = r._put(name, rank, _bytes(found.group(1), GIB)) or got
    return got


def _v_profile_v1_old(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    """vLLM 0.7-0.8's profiling message, whose third line carries the numbers (and no prefix of its own)."""
    got = r._put("weights_profiled", rank, _bytes(m.group(1), GIB))
    got = r._put("non_torch", rank, _bytes(m.group(2), GIB)) or got
    got = r._put("activation", rank, _bytes(m.group(3), GIB)) or got
    return r._put("kv_profiled", rank, _bytes(m.group(4), GIB)) or got


def _v_profile_v0(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    text = m.string[m.start():]
    got = False
    for name, key in (("torch_peak", "peak_torch_memory"), ("non_torch", "non_torch_memory"),
                      ("kv_profiled", "kv_cache_size")):
        found = re.search(key + r"=(-?[\d.]+)GiB", text)
        if found:
            got = r._put(name, rank, _bytes(found.group(1), GIB)) or got
    return got


def _v_refused(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    r._refused = True
    r._once("refused_context", _count(m.group(1)))
    r._put("kv_needed", rank, _bytes(m.group(2), GIB))
    r._put("kv_budget", rank, _bytes(m.group(3), GIB))
    estimate = re.search(r"estimated maximum model length is (\d+)", m.string)
    if estimate:
        r._put("estimated_max_len", rank, _count(estimate.group(1)))
    return True


def _v_refused_v0(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    r._refused = True
    r._once("refused_context", _count(m.group(1)))
    r._put("kv_tokens_v0", rank, _count(m.group(2)))
    return True


def _v_no_blocks(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    r._refused = True
    return True


def _version(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    text = m.group(1)[:_MAX_VERSION]
    if r._version is None and text.isprintable():
        r._version = text
    return True


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# --- SGLang ----------------------------------------------------------------------------------------
# SGLang's "GB" is GiB: get_available_gpu_memory (python/sglang/srt/utils.py) returns free bytes / (1 << 30),
# and memory_pool.py divides the K and V sizes by GB = 1024 * 1024 * 1024.


def _s_weights(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._put("weights", rank, _bytes(m.group(1), GIB))


def _s_kv(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    text = m.string[m.start():]
    tokens = re.search(r"#tokens: (\d+)", text)
    got = tokens is not None and r._put("kv_tokens_pool", rank, _count(tokens.group(1)))
    split = re.search(r"\bK size: ([\d.]+) GB, V size: ([\d.]+) GB", text)
    joint = re.search(r"\bKV size: ([\d.]+) GB", text)  # MLA keeps one latent cache
    if split:
        k, v = _bytes(split.group(1), GIB), _bytes(split.group(2), GIB)
        got = r._put("kv", rank, None if k is None or v is None else k + v) or got
    elif joint:
        got = r._put("kv", rank, _bytes(joint.group(1), GIB)) or got
    return got


def _s_kv_budget(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._put("kv_budget", rank, _bytes(m.group(1), GIB))


def _s_pool_end(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._free(1, rank, _bytes(m.group(1), GIB))


def _s_graph_end(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    text = m.string[m.start():]
    used = re.search(r"mem usage=([\d.]+) GB", text)
    free = re.search(r"avail mem=([\d.]+) GB", text)
    if used is not None:
        r._put("graphs", rank, _bytes(used.group(1), GIB))
    if free is not None:
        r._free(2, rank, _bytes(free.group(1), GIB))
    return True  # older SGLang says only the time: still its graph line


def _s_totals(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    text = m.string[m.start():]
    r._put("kv_tokens", rank, _count(m.group(1)))
    context = re.search(r"\bcontext_len=(\d+)", text)
    if context:
        r._once("context", _count(context.group(1)))
    free = re.search(r"available_gpu_mem=([\d.]+) GB", text)
    if free:
        r._free(3, rank, _bytes(free.group(1), GIB))
    return True


# --- llama.cpp -------------------------------------------------------------------------------------
# llama.cpp prints MiB: llama-model.cpp, llama-kv-cache.cpp and llama-context.cpp all divide the
# buffer's bytes by 1024.0 / 1024.0 ("%8.2f MiB").


def _l_buffer(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    device, kind = m.group(1), m.group(2).strip()
    if not _GPU_DEVICE.fullmatch(device):
        return False  # host memory: not the GPU's
    kind = {"": "model", "model": "model", "KV": "kv", "compute": "compute"}.get(kind, "")
    return bool(kind) and r._add_device(kind, device, _bytes(m.group(3), MIB))


def _l_n_ctx(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    return r._once("n_ctx_seq" if m.group(1) else "n_ctx", _count(m.group(2)))


def _l_cells(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    cells = _count(m.group(1))
    if cells is None:
        return False
    # an interleaved-SWA model has a full cache and a window cache: the full one holds the context
    r._single["cells"] = max(cells, r._single.get("cells", 0))
    return True


def _l_build(r: ReceiptReader, m: re.Match[str], rank: RankKey) -> bool:
    if r._version is None:
        r._version = f"b{m.group(1)} ({m.group(2)})"
    return True


_NUM = r"(-?[\d.]+)"
_RULES: Final = (
    _Rule("vllm", "Model loading took", re.compile(r"Model loading took " + _NUM + r" ?Gi?B\b"), _v_weights),
    _Rule("vllm", "Loading model weights took",
          re.compile(r"Loading model weights took " + _NUM + r" ?GB\b"), _v_weights),
    _Rule("vllm", "Available KV cache memory", re.compile(r"Available KV cache memory: " + _NUM + r" ?GiB"), _v_kv),
    _Rule("vllm", "GPU KV cache size", re.compile(r"GPU KV cache size: ([\d,]+) tokens"), _v_kv_tokens),
    _Rule("vllm", "Maximum concurrency for",
          re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x"), _v_concurrency),
    _Rule("vllm", "Graph capturing finished",
          re.compile(r"Graph capturing finished in [\d.]+ secs?, took " + _NUM + r" (GiB|MiB)"), _v_graphs),
    _Rule("vllm", "CUDA graph pool memory",
          re.compile(r"CUDA graph pool memory: " + _NUM + r" GiB \(actual\), " + _NUM + r" GiB \(estimated\)"),
          _v_graph_pool),
    _Rule("vllm", "Estimated CUDA graph memory",
          re.compile(r"Estimated CUDA graph memory: " + _NUM + r" GiB"), _v_graph_estimate),
    _Rule("vllm", "Total non KV cache memory", re.compile(r"Total non KV cache memory:"), _v_profile),
    _Rule("vllm", "non_torch_memory takes",
          re.compile(r"model weights take " + _NUM + r"GiB; non_torch_memory takes " + _NUM
                     + r"GiB; PyTorch activation peak memory takes " + _NUM
                     + r"GiB; the rest of the memory reserved for KV Cache is " + _NUM + r"GiB"),
          _v_profile_v1_old),
    _Rule("vllm", "Memory profiling results", re.compile(r"Memory profiling results:"), _v_profile_v0),
    _Rule("vllm", "KV cache is needed",
          re.compile(r"max seq len \((\d+)\),\s*\(?" + _NUM + r" GiB KV cache is needed, which is larger than the "
                     r"available(?: KV cache memory)? \(" + _NUM + r" GiB\)"), _v_refused),
    _Rule("vllm", "stored in KV cache",
          re.compile(r"max seq len \((\d+)\) is larger than the maximum number of tokens that can be stored in "
                     r"KV cache \((\d+)\)"), _v_refused_v0),
    _Rule("vllm", "No available memory for the cache blocks",
          re.compile(r"No available memory for the cache blocks"), _v_no_blocks),
    _Rule("vllm", "API server version", re.compile(r"vLLM API server version v?([\w.+-]+)"), _version),
    _Rule("vllm", "LLM engine (v", re.compile(r"Initializing a V\d LLM engine \(v([\w.+-]+)\)"), _version),
    _Rule("sglang", "Load weight end", re.compile(r"Load weight end\..*?mem usage=" + _NUM + r" GB"), _s_weights),
    _Rule("sglang", "KV Cache is allocated", re.compile(r"KV Cache is allocated\."), _s_kv),
    _Rule("sglang", "available memory for KV cache",
          re.compile(r"The available memory for KV cache is " + _NUM + r" GB"), _s_kv_budget),
    _Rule("sglang", "Memory pool end", re.compile(r"Memory pool end\. avail mem=" + _NUM + r" GB"), _s_pool_end),
    _Rule("sglang", "graph end", re.compile(r"Capture \w+ graph end\."), _s_graph_end),
    _Rule("sglang", "max_total_num_tokens=", re.compile(r"\bmax_total_num_tokens=(\d+)"), _s_totals),
    _Rule("llama.cpp", "buffer size",
          re.compile(r"(\S+)\s+(model |KV |compute |output |)buffer size\s*=\s*" + _NUM + r" MiB"), _l_buffer),
    _Rule("llama.cpp", "n_ctx", re.compile(r"\bn_ctx(_seq|_per_seq|_slot)?\s*(?:=\s*|\()(\d+)"), _l_n_ctx),
    _Rule("llama.cpp", "cells", re.compile(r"\(\s*(\d+) cells,"), _l_cells),
    _Rule("llama.cpp", "kv_size", re.compile(r"\bkv_size = (\d+),"), _l_cells),
    _Rule("llama.cpp", "build: ", re.compile(r"\bbuild: (\d+) \(([0-9a-f]+)\)"), _l_build),
)


def read_receipt(text: str, engine: str | None = None) -> Receipt:
    """A whole output at once (a saved log): its lines fed in order."""
    reader = ReceiptReader(engine)
    for line in text.splitlines():
        reader.feed(line)
    return reader.receipt()
