"""gpu-fit: the memory plan of each chosen GPU before the weights load.

vLLM finds out whether the KV cache for the configured context fits only after it has loaded the weights
and profiled (minutes in; vllm-project/vllm#19407). This check answers in the preflight from what is on
disk and in the recipe:

- **weights per GPU** from the checkpoint's safetensors headers (``host.safetensors``: the header only, each
  shard's summary cached while its file is unchanged),
  each tensor at its stored size (EXL3/NVFP4/GPTQ/AWQ packed tensors count what they are), split by tensor
  parallel where the engine splits it and whole where it replicates it; else the recipe's size / TP;
- **KV cache of one sequence per GPU** from ``config.json`` (this machine's copy of the checkpoint, else the
  recipe's ``checkpoint.config`` block), by attention family (``kv_per_sequence``);
- **the budget**: ``--gpu-memory-utilization`` x total memory, minus the weights, minus an overhead estimate
  (``overhead``), and against NVML's free memory now, naming the processes that hold the rest.

The answer: fits or not, the largest context one sequence can have, how many full-context sequences the
KV holds (vLLM's "maximum concurrency"), and the ``--gpu-memory-utilization`` the context would need.
Planning is pure (``plan``); only ``check_gpu_fit`` reads this machine's checkpoint, through host/.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from rigctl.host.facts import GIB, MIB, Gpu
from rigctl.host.safetensors import LocalCheckpoint, SummaryCache, Tensor, WeightKinds, read_checkpoint, summarize
from rigctl.preflight.finding import Context, Severity, Verdict
from rigctl.recipe import defaults
from rigctl.recipe.model import CheckpointFormat, EngineKind, Recipe, SpecDraft, SpecMtp

DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8_e4m3fn": 1}
FP8_KV = {"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}


# --- the model's shape ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What sizes a model's memory, by layer kind; every count is of layers of the main model."""

    source: str
    dtype_bytes: int = 2
    layers: int = 0
    full_layers: int = 0  # MHA/GQA/MQA layers that keep every token
    sliding_layers: int = 0  # layers that keep a window of tokens
    window: int | None = None
    kv_heads: int = 0
    head_dim: int = 0
    mla_layers: int = 0  # multi-head latent attention: one latent per token, every rank holds it all
    kv_lora_rank: int = 0
    rope_dim: int = 0
    indexer_head_dim: int | None = None  # a sparse-attention indexer's key (DeepSeek-V3.2 style)
    indexer_pool: int = 1  # tokens pooled into one indexer key (GLM-5.3-Flash's index_kpool)
    linear_layers: int = 0  # KDA / Gated DeltaNet / Mamba: a fixed state per sequence
    linear_state_bytes: int = 0  # one layer, one sequence, whole (split by TP)
    linear_kind: str = ""
    hidden_size: int | None = None
    intermediate_size: int | None = None
    moe_intermediate_size: int | None = None
    experts_per_token: int | None = None
    vocab_size: int | None = None
    mtp_layers: int = 0
    quant_method: str = ""  # config.json's quantization_config.quant_method ("" when unquantized)
    notes: tuple[str, ...] = ()  # what config.json gave that could not be used, one line each
    usable: bool = True  # False: no layer count or attention size to plan from

    @property
    def family(self) -> str:
        kinds = ((self.full_layers, "full attention"), (self.sliding_layers, f"sliding window {self.window}"),
                 (self.mla_layers, "MLA"), (self.linear_layers, self.linear_kind or "linear attention"))
        return " + ".join(f"{n} {name}" for n, name in kinds if n) or "no attention layers"


# config.json comes from a directory other users may write, and rigctl may run as root: every number is
# bounded before it is used, far above real models (the largest have ~100 layers, hidden sizes of tens of
# thousands, vocabularies of ~256k) and far below what makes the arithmetic or a loop over layers expensive.
MAX_LAYERS = 100_000
MAX_DIM = 10_000_000  # hidden, intermediate, head and state sizes, vocabulary, window
MAX_HEADS = 100_000  # attention heads, KV heads, experts per token, groups
MAX_KERNEL = 4096  # convolution kernels
FULL_KINDS = ("full_attention", "attention", "deepseek_sparse_attention")
SLIDING_KINDS = ("sliding_attention", "local_attention")
LINEAR_KINDS = ("linear_attention", "mamba")


def _shown(value: Any) -> str:
    """A value from config.json for a note: short, whatever it is."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value, allow_nan=False)
    if isinstance(value, int):
        digits = len(str(abs(value)))  # at most 4,300: json refuses longer integers
        return f"{value:,}" if digits <= 15 else f"{'-' if value < 0 else ''}~10^{digits - 1}"
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    return f"a JSON {'array' if isinstance(value, list) else 'object'}"


class _Fields:
    """Reads a config's integers, each within its range: one out of range, of another type (a bool, a float,
    a string) or negative is a note and read as absent. ``null`` is absent without a note."""

    def __init__(self, c: Mapping[str, Any], prefix: str = "") -> None:
        self.c = c
        self.prefix = prefix
        self.notes: list[str] = []

    def int(self, *keys: str, lo: int = 1, hi: int = MAX_DIM) -> int | None:
        for key in keys:
            value = self.c.get(key)
            if value is None:
                continue
            if type(value) is int and lo <= value <= hi:
                return value
            why = f"is out of range ({lo:,} to {hi:,})" if type(value) is int else "is not an integer"
            self.note(f"{key} {_shown(value)} {why}")
            return None
        return None

    def note(self, text: str) -> None:
        self.notes.append(self.prefix + text)


def shape_from_config(config: Mapping[str, Any], source: str, *, label: str = "config.json") -> Shape:
    """A ``Shape`` from a ``config.json`` (or the recipe's block, which uses its names). A multimodal
    config's ``text_config`` is the language model's. Layer kinds are counted, never listed: a count is
    bounded and an interval pattern is arithmetic. What cannot be used is a note (``Shape.notes``, each
    ``label: ...``); a shape without a usable layer count or attention size is not ``usable``."""
    c: dict[str, Any] = dict(config)
    text = c.get("text_config")
    if isinstance(text, Mapping):
        c = {**c, **text}
    f = _Fields(c, f"{label}: ")
    layers = f.int("num_hidden_layers", "num_layers", "n_layer", hi=MAX_LAYERS)
    dtype = c.get("torch_dtype") or c.get("dtype") or "bfloat16"
    if not isinstance(dtype, str):
        f.note(f"torch_dtype {_shown(dtype)} is not a string; bfloat16 assumed")
    dtype_bytes = DTYPE_BYTES.get(dtype, 2) if isinstance(dtype, str) else 2
    heads = f.int("num_attention_heads", "n_head", hi=MAX_HEADS)
    hidden = f.int("hidden_size", "d_model", "n_embd")
    kv_heads = f.int("num_key_value_heads", "multi_query_group_num", hi=MAX_HEADS) or heads or 0
    head_dim = f.int("head_dim") or (hidden // heads if hidden and heads else 0)
    mla = c.get("kv_lora_rank") is not None
    common: dict[str, Any] = {
        "source": source, "dtype_bytes": dtype_bytes, "layers": layers or 0, "kv_heads": kv_heads,
        "head_dim": head_dim, "hidden_size": hidden, "vocab_size": f.int("vocab_size"),
        "intermediate_size": f.int("intermediate_size", "ffn_hidden_size", "n_inner"),
        "moe_intermediate_size": f.int("moe_intermediate_size"),
        "experts_per_token": f.int("num_experts_per_tok", "num_experts_per_token", hi=MAX_HEADS),
        "mtp_layers": f.int("num_nextn_predict_layers", lo=0, hi=1024) or 0,
        "quant_method": _quant_method(c.get("quantization_config")),
    }
    if mla:
        common.update(kv_lora_rank=f.int("kv_lora_rank") or 0, rope_dim=f.int("qk_rope_head_dim", lo=0) or 0)
        index_dim = f.int("index_head_dim")
        if index_dim:
            common["indexer_head_dim"] = index_dim
            common["indexer_pool"] = f.int("index_kpool") or 1
    if layers is None:
        if not any(k in c for k in ("num_hidden_layers", "num_layers", "n_layer")):
            f.note("num_hidden_layers is missing")
        return Shape(**common, notes=tuple(f.notes), usable=False)
    # Which layer is which. Kimi's KDA (vllm transformers_utils/configs/kimi_linear.py is_kda_layer):
    lin = c.get("linear_attn_config")
    if isinstance(lin, Mapping) and isinstance(lin.get("kda_layers"), list):
        kda = len(lin["kda_layers"])
        lf = _Fields(lin, f"{label}: linear_attn_config.")
        heads_kda, dim_kda = lf.int("num_heads", hi=MAX_HEADS) or 0, lf.int("head_dim") or 0
        kernel = lf.int("short_conv_kernel_size", hi=MAX_KERNEL) or 4
        f.notes += lf.notes
        if kda > layers:
            f.note(f"linear_attn_config.kda_layers lists {kda:,} layers, more than num_hidden_layers {layers:,}")
            return Shape(**common, notes=tuple(f.notes), usable=False)
        # vLLM's KDA state (mamba_utils kda_state_shape/dtype): q, k and v convolution states of
        # (kernel - 1) x heads*head_dim in the model dtype, and a heads x head_dim x head_dim recurrent
        # state in float32
        state = 3 * (kernel - 1) * heads_kda * dim_kda * dtype_bytes + heads_kda * dim_kda * dim_kda * 4
        common["mla_layers" if mla else "full_layers"] = layers - kda
        return _checked(Shape(**common, linear_layers=kda, linear_state_bytes=state,
                              linear_kind="KDA linear attention", notes=tuple(f.notes)), label)
    window = f.int("sliding_window")
    full, sliding, linear = _layer_kinds(c, f, layers, window)
    state = 0
    linear_kind = ""
    if linear and c.get("linear_num_value_heads") is not None:
        # Gated DeltaNet (vLLM mamba_utils gated_delta_net_state_shape): a convolution state of
        # (kernel - 1) x (2 * key_dim + value_dim) and a value_heads x key_head_dim x value_head_dim
        # recurrent state, both in the model dtype
        kh, vh = f.int("linear_num_key_heads", hi=MAX_HEADS) or 0, f.int("linear_num_value_heads", hi=MAX_HEADS) or 0
        kd, vd = f.int("linear_key_head_dim") or 0, f.int("linear_value_head_dim") or 0
        kernel = f.int("linear_conv_kernel_dim", hi=MAX_KERNEL) or 4
        state = ((kernel - 1) * (2 * kh * kd + vh * vd) + vh * kd * vd) * dtype_bytes
        linear_kind = "Gated DeltaNet linear attention"
    elif linear and c.get("mamba_num_heads") is not None:
        # Mamba-2 (vLLM mamba_utils mamba2_state_shape): conv (kernel - 1) x (heads*head_dim + 2*groups*state)
        # and an SSM state of heads x head_dim x state_size
        mh, md = f.int("mamba_num_heads", hi=MAX_HEADS) or 0, f.int("mamba_head_dim") or 0
        ss, groups = f.int("ssm_state_size") or 0, f.int("n_groups", hi=MAX_HEADS) or 1
        kernel = f.int("conv_kernel", hi=MAX_KERNEL) or 4
        state = ((kernel - 1) * (mh * md + 2 * groups * ss) + mh * md * ss) * dtype_bytes
        linear_kind = "Mamba-2"
    if mla:
        return _checked(Shape(**common, mla_layers=full + sliding, linear_layers=linear, linear_state_bytes=state,
                              linear_kind=linear_kind, notes=tuple(f.notes)), label)
    return _checked(Shape(**common, full_layers=full, sliding_layers=sliding, window=window if sliding else None,
                          linear_layers=linear, linear_state_bytes=state, linear_kind=linear_kind,
                          notes=tuple(f.notes)), label)


def _quant_method(block: Any) -> str:
    method = block.get("quant_method") if isinstance(block, Mapping) else None
    return method.lower() if isinstance(method, str) and re.fullmatch(r"[A-Za-z0-9_.-]{1,32}", method) else ""


def _layer_kinds(c: Mapping[str, Any], f: _Fields, layers: int, window: int | None) -> tuple[int, int, int]:
    """(full, sliding, linear) attention layers among ``layers``, counted: an explicit list (at most
    ``MAX_LAYERS`` long, as ``layers`` is) or a pattern's arithmetic."""
    types = c.get("layer_types")
    if isinstance(types, list):
        if len(types) == layers:
            return (sum(1 for t in types if t in FULL_KINDS), sum(1 for t in types if t in SLIDING_KINDS),
                    sum(1 for t in types if t in LINEAR_KINDS))
        f.note(f"layer_types lists {len(types):,} layers but num_hidden_layers is {layers:,}; not used")
    interval = f.int("full_attention_interval", hi=MAX_LAYERS)
    if interval:  # Qwen3-Next: every Nth layer is full attention, the rest GDN
        return layers // interval, 0, layers - layers // interval
    pattern = f.int("sliding_window_pattern", hi=MAX_LAYERS)
    if pattern and window is not None:  # Gemma-3: every Nth layer global, the rest sliding
        return layers // pattern, layers - layers // pattern, 0
    hybrid = c.get("hybrid_override_pattern")
    if isinstance(hybrid, str):  # Nemotron-H: M mamba, * attention, - MLP only
        if len(hybrid) <= MAX_LAYERS:
            return hybrid.count("*"), 0, hybrid.count("M")
        f.note(f"hybrid_override_pattern is {len(hybrid):,} characters, more than {MAX_LAYERS:,} layers; not used")
    sliding_all = window is not None and c.get("use_sliding_window", True) is not False
    return (0, layers, 0) if sliding_all else (layers, 0, 0)


def _checked(shape: Shape, label: str) -> Shape:
    """Unusable where its attention layers have no size: a KV cache of nothing would pass any budget."""
    missing = []
    if (shape.full_layers or shape.sliding_layers) and not (shape.kv_heads and shape.head_dim):
        missing.append("attention heads and head_dim")
    if shape.mla_layers and not shape.kv_lora_rank:
        missing.append("kv_lora_rank")
    if not missing:
        return shape
    return replace(shape, usable=False, notes=(*shape.notes, f"{label}: no usable {' or '.join(missing)} for its "
                                                             "attention layers"))


# --- KV cache ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KvPlan:
    per_token_bytes: int  # per GPU, for each token the context holds in full-attention and MLA layers
    sliding_per_token_bytes: int  # per GPU, for each token a sliding-window layer keeps
    sliding_tokens_cap: int | None  # how many tokens a sliding layer keeps at most
    fixed_bytes: int  # per GPU per sequence, whatever the context (linear-attention / SSM state)
    dtype: str  # "bfloat16", "fp8"...
    parts: dict[str, int] = field(default_factory=dict)  # per-token bytes by kind, for the basis
    padding: str = ""  # the hybrid allocator's padding layers, as vLLM reports them

    def for_context(self, tokens: int) -> int:
        sliding = min(tokens, self.sliding_tokens_cap) if self.sliding_tokens_cap is not None else tokens
        return self.per_token_bytes * tokens + self.sliding_per_token_bytes * sliding + self.fixed_bytes

    def max_context(self, budget: int) -> int:
        """The largest context one sequence can have in ``budget`` bytes (0: not even the fixed state)."""
        if budget < self.for_context(0):
            return 0
        lo, hi = 0, defaults.MAX_CONTEXT
        if self.for_context(hi) <= budget:
            return hi
        for _ in range(64):  # bisection over [0, 2^24]: 25 steps suffice
            if hi - lo <= 1:
                break
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.for_context(mid) <= budget else (lo, mid)
        return lo


def padded_layers(counts: Sequence[int]) -> tuple[list[int], int]:
    """vLLM's hybrid allocator (kv_cache_utils, uniform page size): the layer kinds of a hybrid model are cut
    into groups of equal size, the smallest kind's count (or the largest's when it is under 1.25x the
    smallest), the last group of each kind padded. (the counts as padded, how many padding layers)."""
    kinds = [n for n in counts if n]
    if len(kinds) < 2:
        return list(counts), 0
    group = min(kinds)
    if max(kinds) < group * 1.25:
        group = max(kinds)
    padded = [-(-n // group) * group if n else 0 for n in counts]
    return padded, sum(padded) - sum(counts)


def kv_per_sequence(shape: Shape, *, tp: int, dcp: int = 1, kv_cache_dtype: str | None = None,
                    batched_tokens: int = 2048, speculative_layers: int = 0, pad_groups: bool = False) -> KvPlan:
    """The KV cache one sequence needs on one GPU, by attention family:

    - full attention (MHA/GQA/MQA): 2 (K and V) x layers x KV heads on this rank x head_dim x dtype bytes;
      KV heads are split by TP and each rank keeps one whole head when there are fewer heads than ranks
      (vLLM model_executor/layers/linear.py QKVParallelLinear: num_kv_heads = max(1, total // tp));
    - MLA (DeepSeek-V2/V3, Kimi, GLM): layers x (kv_lora_rank + qk_rope_head_dim) x dtype bytes, the same on
      every TP rank (vLLM MLACommonBackend get_kv_cache_shape has no head split), divided over
      decode_context_parallel, which interleaves the tokens of one sequence over its ranks;
      ``fp8_ds_mla`` stores 656 bytes per token for a 512/64 latent: the latent in fp8, four float32 scales,
      the rope part in bf16 (vLLM FlashMLASparse, DeepSeek-V3.2);
    - a sparse-attention indexer (DeepSeek-V3.2 style): index_head_dim fp8 bytes + a float32 scale per 128
      per token per MLA layer (vLLM DeepseekV32IndexerCache), over ``index_kpool`` tokens where keys are pooled
      (GLM-5.3-Flash: 132 / 4 = 33 bytes, local-inference-lab/vllm#549);
    - sliding-window layers: like full attention but capped at the window plus one scheduling step
      (vLLM SlidingWindowSpec.max_memory_usage_bytes: window - 1 + max_num_batched_tokens);
    - linear attention / SSM (KDA, Gated DeltaNet, Mamba-2): a fixed state per sequence split by TP, no
      per-token term;
    - hybrids: the sum of their layer kinds (``pad_groups``: padded as vLLM's hybrid allocator pads them).
      The KV dtype is --kv-cache-dtype (fp8: 1 byte) or the model's.
    """
    padding = ""
    if pad_groups:
        attention = shape.mla_layers or shape.full_layers
        (attention_p, sliding_p, linear_p), added = padded_layers(
            [attention, shape.sliding_layers, shape.linear_layers])
        if added:
            original = sum((attention, shape.sliding_layers, shape.linear_layers))
            padding = f"{added} padding layer(s) of vLLM's hybrid allocator ({added / original:.2%} of {original})"
            shape = replace(shape, sliding_layers=sliding_p, linear_layers=linear_p,
                            mla_layers=attention_p if shape.mla_layers else 0,
                            full_layers=0 if shape.mla_layers else attention_p)
    fp8 = kv_cache_dtype in FP8_KV
    kv_bytes = 1 if fp8 else shape.dtype_bytes
    dtype = "fp8" if fp8 else {1: "fp8", 2: "bfloat16/float16", 4: "float32"}[shape.dtype_bytes]
    parts: dict[str, int] = {}
    heads_here = max(1, shape.kv_heads // tp) if shape.kv_heads else 0
    extra = speculative_layers  # MTP modules keep a KV cache of their own, like one more layer of the main kind
    per_token = 0
    if shape.full_layers:
        parts["full_attention"] = 2 * (shape.full_layers + (extra if not shape.mla_layers else 0)) * heads_here \
            * shape.head_dim * kv_bytes
        per_token += parts["full_attention"]
    if shape.mla_layers:
        mla_layers = shape.mla_layers + extra
        if kv_cache_dtype == "fp8_ds_mla":
            latent = shape.kv_lora_rank + 4 * math.ceil(shape.kv_lora_rank / 128) + 2 * shape.rope_dim
        else:
            latent = (shape.kv_lora_rank + shape.rope_dim) * kv_bytes
        parts["mla_latent"] = mla_layers * latent // dcp
        per_token += parts["mla_latent"]
        if shape.indexer_head_dim:
            key = shape.indexer_head_dim + 4 * math.ceil(shape.indexer_head_dim / 128)
            parts["indexer_keys"] = mla_layers * key // shape.indexer_pool // dcp
            per_token += parts["indexer_keys"]
    sliding_per_token = 0
    cap = None
    if shape.sliding_layers:
        sliding_per_token = 2 * shape.sliding_layers * heads_here * shape.head_dim * kv_bytes
        parts["sliding_window"] = sliding_per_token
        cap = (shape.window or 0) - 1 + batched_tokens
    fixed = shape.linear_layers * shape.linear_state_bytes // tp
    return KvPlan(per_token, sliding_per_token, cap, fixed, dtype, parts, padding)


# --- weights -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WeightPlan:
    bytes_per_gpu: int
    split_bytes: int  # total bytes that are split over TP
    replicated_bytes: int  # bytes every rank holds whole
    expert_bytes: int  # routed experts, split by TP or EP
    tensors: int


def weights_of(kinds: WeightKinds, *, tp: int, pp: int = 1, ep_ranks: int | None = None) -> WeightPlan:
    """Per GPU: split tensors / TP, replicated tensors whole, routed experts / (EP ranks or TP), all / PP
    (which tensors are which: ``host.safetensors.summarize``, after vLLM's layers)."""
    per = kinds.split // tp + kinds.replicated + kinds.experts // (ep_ranks or tp)
    return WeightPlan(per // pp, kinds.split, kinds.replicated, kinds.experts, kinds.tensors)


def weights_per_gpu(tensors: Sequence[Tensor], *, tp: int, pp: int = 1, ep_ranks: int | None = None) -> WeightPlan:
    return weights_of(summarize(tensors), tp=tp, pp=pp, ep_ranks=ep_ranks)


# --- the budget ----------------------------------------------------------------------------------------
#
# What each engine takes out of a GPU before its KV cache, term by term, each with a low and a high estimate.
# The plan says "fits" only when the KV cache fits with every term at its high estimate.

CUDA_CONTEXT = 640 * MIB  # measured: 621 MiB after the first CUDA tensor on an H200 (facts.md), rounded up
# torch.cuda.mem_get_info()'s total, which vLLM and SGLang multiply, is below NVML's: H100 79.18 vs 79.65 GiB,
# H200 139.81 vs 140.40, L40S 44.42 vs 44.99 (issue #32's start-ups); 0.469 GiB on the device box's H100
# (tests/fixtures/device/h100-2026-12-07)
TOTAL_RESERVE = (int(0.45 * GIB), int(0.60 * GIB))
# vLLM's dummy sampler pass peaks at about this many float32 copies of max_num_seqs x vocab (9.6-9.9 in 9 of
# 10 text-only start-ups, issue #32; 0.10.2 logs it too: 1.40 GiB for 256 x 151,936 on L40S, 5.58 GiB for 1024 on
# H200); six 0.10.1.1 start-ups on A100 show no such peak (their whole profile peak and non-torch growth is
# 0.55-0.68 GiB), so before NEW_ACCOUNTING it is not counted
SAMPLER_COPIES = (9.6, 9.9)
NEW_ACCOUNTING = (0, 10, 2)  # the first version modelled with the sampler's copies and the TP non-torch below
NON_TORCH_TP1 = (int(0.1 * GIB), int(0.5 * GIB))
NON_TORCH_TP1_OLD = (int(0.1 * GIB), int(0.4 * GIB))  # 0.28 GiB beside the forward pass in 0.10.1.1 on A100
# TP >= 2 with vLLM's custom all-reduce (TP 2, or NVLink): its buffers and NCCL's, 1.38 GiB (H200 TP 2, vLLM
# 0.10.2's own line) to 2.07-2.17 GiB per GPU (H100, vLLM 0.19, llm-d-planner's report, facts.md); without it
# (more than two PCIe GPUs, or --disable-custom-all-reduce) NCCL's alone: 0.17-0.21 GiB (8 x L40S TP 8, 0.10.2);
# 0.5 GiB in 0.10.1.1's TP 2 start-ups on A100
NON_TORCH_TP = (int(1.3 * GIB), int(2.2 * GIB))
NON_TORCH_TP_NCCL = (int(0.15 * GIB), int(0.5 * GIB))
NON_TORCH_TP_OLD = (int(0.3 * GIB), int(0.8 * GIB))
NVLINK_PRODUCTS = ("H100 80GB HBM3", "H100 SXM", "H200", "H800", "A100-SXM", "B200", "GB200", "GH200")
CUDA_GRAPHS = (int(0.3 * GIB), int(1.9 * GIB))  # graph pools of 0.51-1.85 GiB measured (facts.md)
MXFP4_HOPPER_PAD = 3072 / 2880  # MXFP4 MoE experts on Hopper load padded (2880 -> 3072 columns)


@dataclass(frozen=True)
class Term:
    """A part of a GPU's memory the engine holds besides its KV cache: low and high estimates (equal where
    the figure is known) and where it comes from."""

    name: str
    low: int
    high: int
    basis: str

    @classmethod
    def exact(cls, name: str, value: int, basis: str) -> Term:
        return cls(name, value, value, basis)

    def entry(self) -> dict[str, Any]:
        return {"name": self.name, "low_bytes": self.low, "high_bytes": self.high, "basis": self.basis}

    def shown(self) -> str:
        if abs(self.high - self.low) < 0.05 * GIB:
            return f"{self.name} {_gib(self.high)}"
        return f"{self.name} {self.low / GIB:,.1f}-{self.high / GIB:,.1f} GiB"


@dataclass(frozen=True)
class EngineMemory:
    """How one engine version sizes its KV cache: ``utilization`` x (NVML total - ``reserve``), less the
    ``inside`` terms; the ``outside`` ones are held beyond that budget and must fit in what it leaves."""

    model: str
    utilization: float
    reserve: Term
    inside: tuple[Term, ...]
    outside: tuple[Term, ...]
    receipt: str | None = None  # the budget is a boot's measured one (then low == high)
    measured_budget: int | None = None

    def budget(self, total: int, *, high: bool) -> int:
        """The KV budget with every term at its high estimate (``high``: the pessimistic side) or its low one."""
        if self.measured_budget is not None:
            return self.measured_budget
        reserve = self.reserve.high if high else self.reserve.low
        taken = sum(t.high if high else t.low for t in self.inside)
        return int(self.utilization * (total - reserve)) - taken

    def terms(self) -> tuple[Term, ...]:
        return (self.reserve, *self.inside, *self.outside)


# --- engine settings -------------------------------------------------------------------------------------


def _arg(args: Sequence[str], flag: str) -> str | None:
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def engine_version(text: str | None) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version such as "0.11.0" or "v0.10.1.1" (patch 0 when not given); None
    when there is none. The patch counts: vLLM's accounting changed between 0.10.1 and 0.10.2."""
    match = re.match(r"v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,6}))?", text or "")
    if not match:
        return None
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


@dataclass(frozen=True)
class EngineSettings:
    kind: EngineKind
    utilization: float
    utilization_source: str
    kv_cache_dtype: str | None
    batched_tokens: int
    max_num_seqs: int | None  # None: the engine's default (which may depend on its version and the GPU)
    eager: bool
    version: tuple[int, int, int] | None = None
    quantization: str | None = None  # --quantization: fp8 on an unquantized checkpoint quantizes it at load
    kv_cache_memory: int | None = None  # --kv-cache-memory-bytes: vLLM skips sizing the KV cache
    custom_all_reduce: bool = True  # False: --disable-custom-all-reduce
    problem: str | None = None  # the memory fraction given is not one (the plan then uses the default)


def _count(args: Sequence[str], flag: str, default: int | None, most: int) -> int | None:
    """A positive count from the engine's arguments, else ``default`` (the engine refuses what is not one)."""
    given = _arg(args, flag)
    if given is None or not (given.isascii() and given.isdigit() and len(given) <= 12):
        return default
    return int(given) if 1 <= int(given) <= most else default


def _bytes_arg(given: str | None) -> int | None:
    """--kv-cache-memory-bytes as vLLM takes it: a count, optionally with a K/M/G/T suffix (binary)."""
    match = re.fullmatch(r"(\d{1,16})([KMGT]i?B?)?", (given or "").strip(), re.I)
    if not match:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[(match.group(2) or "")[:1].upper()]
    value = int(match.group(1)) * scale
    return value if 0 < value < 1 << 50 else None


def engine_settings(recipe: Recipe, total_bytes: int) -> EngineSettings:
    args = recipe.engine.args
    big = total_bytes >= 70 * GIB
    if recipe.engine.kind is EngineKind.SGLANG:
        flag, default = "--mem-fraction-static", 0.88
    else:
        flag, default = "--gpu-memory-utilization", 0.9  # vLLM's default (vllm/config/cache.py)
    given = _arg(args, flag)
    util, source, problem = default, f"{recipe.engine.kind} default", None
    if given is not None:
        try:
            value = float(given)
        except ValueError:
            value = math.nan
        if math.isfinite(value) and 0 < value <= 1:
            util, source = value, flag
        else:  # a fraction of each GPU's memory: 10 is not 10%, and the engine refuses it
            problem = f"{flag} {given[:40]!r} is not a fraction in (0, 1]"
            source += f" ({problem})"
    seqs_flag = "--max-running-requests" if recipe.engine.kind is EngineKind.SGLANG else "--max-num-seqs"
    # vLLM's defaults for `vllm serve` (vllm/engine/arg_utils.py): 8192 batched tokens on GPUs of 70 GiB or
    # more, 2048 below
    return EngineSettings(
        kind=recipe.engine.kind, utilization=util, utilization_source=source,
        kv_cache_dtype=_arg(args, "--kv-cache-dtype"),
        batched_tokens=_count(args, "--max-num-batched-tokens", 8192 if big else 2048, defaults.MAX_CONTEXT) or 2048,
        max_num_seqs=_count(args, seqs_flag, None, 1 << 20), eager="--enforce-eager" in args,
        version=engine_version(recipe.engine.version), quantization=_arg(args, "--quantization"),
        kv_cache_memory=_bytes_arg(_arg(args, "--kv-cache-memory-bytes")),
        custom_all_reduce="--disable-custom-all-reduce" not in args, problem=problem)


def _default_seqs(eng: EngineSettings, total: int, product: str) -> tuple[int, int, str]:
    """vLLM's max_num_seqs when the recipe does not set it: (low, high, why). `vllm serve` takes 1024 on GPUs
    of 70 GiB or more (not A100) and 256 below in the versions that size it by GPU (get_batch_defaults); older
    ones take 256. Unknown version: both."""
    if eng.max_num_seqs is not None:
        return eng.max_num_seqs, eng.max_num_seqs, f"--max-num-seqs {eng.max_num_seqs}"
    big = total >= 70 * GIB and "A100" not in product
    if not big:
        return 256, 256, "vLLM's default max_num_seqs 256 (a GPU under 70 GiB, or an A100)"
    if eng.version is None:
        return 256, 1024, ("vLLM's default max_num_seqs: 1024 on a GPU of 70 GiB or more in the versions that size "
                           "it by GPU, 256 before (engine.version is not set)")
    shown = ".".join(map(str, eng.version))
    if eng.version >= (0, 10):
        return 1024, 1024, f"vLLM {shown}'s default max_num_seqs 1024 on a GPU of 70 GiB+"
    return 256, 256, f"vLLM {shown}'s default max_num_seqs 256"


def forward_activations(shape: Shape, *, tp: int, batched_tokens: int) -> int:
    """The peak activations of one forward pass of ``batched_tokens`` tokens on one rank: the MLP's gate/up
    and down buffers (for MoE the fused kernel's top-k caches) and a few hidden-size buffers, in bf16."""
    hidden = shape.hidden_size or 4096
    if shape.moe_intermediate_size and shape.experts_per_token:
        mlp = shape.experts_per_token * (3 * shape.moe_intermediate_size // tp + hidden)
    else:
        mlp = 3 * (shape.intermediate_size or 4 * hidden) // tp
    return batched_tokens * (mlp + 4 * hidden) * 2


def engine_memory(eng: EngineSettings, shape: Shape, *, tp: int, total: int, weights: Term,
                  product: str = "") -> EngineMemory:
    """The terms of ``eng``'s engine (and version) on a GPU of ``total`` bytes."""
    reserve = Term("torch_total_gap", *TOTAL_RESERVE, "the engine multiplies torch's total, below NVML's by "
                   "0.47-0.59 GiB on H100/H200/L40S")
    fwd = forward_activations(shape, tp=tp, batched_tokens=eng.batched_tokens)
    graphs = Term("cuda_graphs", 0, 0, "--enforce-eager: none") if eng.eager else \
        Term("cuda_graphs", *CUDA_GRAPHS, "captured after the KV cache is sized: 0.51-1.85 GiB measured")
    context = Term.exact("cuda_context", CUDA_CONTEXT, "0.6 GiB per process, measured on an H200")
    vocab = shape.vocab_size or 128_000
    vocab_note = "" if shape.vocab_size else " (vocab_size unknown: 128,000 assumed)"
    new = eng.version is not None and eng.version >= NEW_ACCOUNTING
    old = eng.version is not None and not new
    # vLLM's custom all-reduce runs at TP 2 and over NVLink; more PCIe GPUs than two, or the flag, turn it off
    custom_ar = eng.custom_all_reduce and (tp == 2 or not product or any(n in product for n in NVLINK_PRODUCTS))
    if tp == 1:
        spread = NON_TORCH_TP1_OLD if old else NON_TORCH_TP1
        why = "allocations outside torch's pool (cuBLAS workspaces)"
    elif old:
        spread, why = NON_TORCH_TP_OLD, "NCCL buffers at TP >= 2 (about 0.5 GiB in 0.10.1.1 start-ups on A100)"
    elif not custom_ar:
        spread, why = NON_TORCH_TP_NCCL, ("NCCL buffers without the custom all-reduce (off for more than two PCIe "
                                          "GPUs or by flag): 0.17-0.21 GiB measured on 8 x L40S")
    elif new:
        spread, why = NON_TORCH_TP, ("NCCL and custom all-reduce buffers at TP >= 2: 1.38 GiB (H200, 0.10.2) to "
                                     "2.17 GiB (H100, 0.19) measured")
    else:
        spread = (NON_TORCH_TP_OLD[0], NON_TORCH_TP[1])
        why = "NCCL and custom all-reduce buffers at TP >= 2: 0.5 GiB (vLLM 0.10.1) to 2.2 GiB (0.19) by version"
    non_torch = Term("non_torch", *spread, why)
    if eng.kind is EngineKind.SGLANG:
        # --mem-fraction-static covers weights and the KV pool; activations and graphs live outside it
        seqs = eng.max_num_seqs or 256
        act = Term("activations", fwd, int(fwd * 1.5) + seqs * vocab * 4,
                   f"a forward pass of {eng.batched_tokens:,} tokens and the logits of {seqs} requests{vocab_note}")
        return EngineMemory("SGLang (--mem-fraction-static: weights + KV pool)", eng.utilization, reserve,
                            (weights,), (context, act, non_torch, graphs))
    if eng.kind is not EngineKind.VLLM:
        act = Term("activations", fwd, int(fwd * 1.5), f"a forward pass of {eng.batched_tokens:,} tokens")
        return EngineMemory(f"{eng.kind} (an estimate: rigctl does not model its own accounting)",
                            eng.utilization, reserve, (weights, context, act, non_torch), (graphs,))
    low_seqs, high_seqs, seqs_why = _default_seqs(eng, total, product)
    copies = f"{SAMPLER_COPIES[0]:g}-{SAMPLER_COPIES[1]:g} float32 copies of max_num_seqs x vocab {vocab:,}{vocab_note}"
    if old:
        peak = Term("profile_peak", fwd, int(fwd * 1.5) + high_seqs * vocab * 4,
                    f"the profile run's peak: a forward pass of {eng.batched_tokens:,} tokens and one copy of the "
                    f"logits ({seqs_why}); this version's sampler pass shows no larger peak")
    else:
        sampler_low = int(SAMPLER_COPIES[0] * low_seqs * vocab * 4) if new else fwd
        sampler_high = int(SAMPLER_COPIES[1] * high_seqs * vocab * 4)
        peak = Term("profile_peak", max(fwd, sampler_low), max(int(fwd * 1.5), sampler_high),
                    f"the profile run's peak: the dummy sampler pass, {copies} ({seqs_why}), or a forward pass of "
                    f"{eng.batched_tokens:,} tokens when larger"
                    + ("" if new else "; versions before 0.10.2 show no sampler peak (the low estimate)"))
    version = f"vLLM {'.'.join(map(str, eng.version))}" if eng.version else "vLLM (engine.version not set: V1 assumed)"
    if eng.version is not None and eng.version < (0, 9):
        # before 0.9 the budget's baseline was taken before the CUDA context: it came out of the budget
        return EngineMemory(f"{version}: utilization x total - weights - profile peak - non-torch (with the "
                            "CUDA context)", eng.utilization, reserve, (weights, peak, non_torch, context), (graphs,))
    model = (f"{version}: utilization x torch total - weights - profile peak - non-torch growth; the CUDA context "
             "and CUDA graphs are held beyond the budget")
    return EngineMemory(model, eng.utilization, reserve, (weights, peak, non_torch), (context, graphs))


# --- the plan --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryPlan:
    context: int
    total_bytes: int
    kv: KvPlan
    shape: Shape
    engine: EngineMemory
    weights_basis: str = ""

    @property
    def utilization(self) -> float:
        return self.engine.utilization

    @property
    def weights(self) -> int:
        w = next((t for t in self.engine.inside + self.engine.outside if t.name == "weights"), None)
        return w.high if w is not None else 0

    @property
    def kv_bytes_per_sequence(self) -> int:
        return self.kv.for_context(self.context)

    @property
    def budget(self) -> int:
        """The KV budget per GPU on the pessimistic side (every term at its high estimate)."""
        return self.engine.budget(self.total_bytes, high=True)

    @property
    def budget_optimistic(self) -> int:
        return self.engine.budget(self.total_bytes, high=False)

    @property
    def sequences(self) -> float:
        need = self.kv_bytes_per_sequence
        return max(0.0, self.budget / need) if need else math.inf

    @property
    def max_context(self) -> int:
        return self.kv.max_context(self.budget)

    @property
    def needed_utilization(self) -> float:
        usable = self.total_bytes - self.engine.reserve.high
        need = sum(t.high for t in self.engine.inside) + self.kv_bytes_per_sequence
        return math.ceil(need / usable * 100) / 100 if usable > 0 else math.inf

    @property
    def verdict(self) -> str:
        need = self.kv_bytes_per_sequence
        if self.budget >= need:
            return "fits"
        return "tight" if self.budget_optimistic >= need else "does-not-fit"

    @property
    def headroom(self) -> tuple[int, int]:
        """(what the budget leaves of the GPU, what the outside terms need at their high estimate)."""
        usable = self.total_bytes - self.engine.reserve.high
        return usable - int(self.utilization * usable), sum(t.high for t in self.engine.outside)

    def deciding(self) -> Term:
        """The uncertain term with the widest spread: the one whose truth decides a tight plan."""
        return max(self.engine.terms(), key=lambda t: t.high - t.low)

    def components(self) -> str:
        """Per GPU, term by term: never a total alone (errors cancel in a total)."""
        parts = [t.shown() for t in self.engine.inside]
        out = "; beyond the budget: " + ", ".join(t.shown() for t in self.engine.outside) if self.engine.outside \
            else ""
        budget = _gib(self.budget) if self.budget == self.budget_optimistic else \
            f"{self.budget / GIB:,.1f} to {self.budget_optimistic / GIB:,.1f} GiB"
        return (f"{self.utilization:g} x {_gib(self.total_bytes)}, less {', '.join(parts)} = KV budget {budget}"
                f"{out}")

    def figures(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        seqs = self.sequences
        optimistic = self.budget_optimistic / self.kv_bytes_per_sequence if self.kv_bytes_per_sequence else math.inf
        basis: dict[str, Any] = {
            "weights": self.weights_basis,
            "shape": f"{self.shape.family} ({self.shape.source})",
            "kv_dtype": self.kv.dtype,
            "kv_per_token_bytes": dict(self.kv.parts),
            "kv_fixed_bytes_per_sequence": self.kv.fixed_bytes,
            "gpu_memory_bytes": self.total_bytes,
            "gpu_memory_utilization": self.utilization,
            "engine_model": self.engine.model,
            "terms": [t.entry() for t in self.engine.terms()],
            "overhead_bytes": {t.name: t.high for t in self.engine.terms() if t.name != "weights"},
        }
        if self.engine.receipt:
            basis["receipt"] = self.engine.receipt
        if self.kv.padding:
            basis["kv_padding"] = self.kv.padding
        if extra:
            basis.update(extra)
        return {
            "verdict": self.verdict,
            "weights_bytes_per_gpu": self.weights,
            "kv_bytes_per_sequence": self.kv_bytes_per_sequence,
            "kv_budget_bytes_per_gpu": self.budget,
            "kv_budget_bytes_per_gpu_optimistic": self.budget_optimistic,
            "max_context_tokens": self.max_context,
            "max_context_tokens_optimistic": self.kv.max_context(self.budget_optimistic),
            "max_full_context_sequences": math.floor(seqs * 100) / 100 if math.isfinite(seqs) else None,
            "max_full_context_sequences_optimistic":
                math.floor(optimistic * 100) / 100 if math.isfinite(optimistic) else None,
            "needed_gpu_memory_utilization": self.needed_utilization,
            "basis": basis,
        }


def weights_term(recipe: Recipe, shape: Shape, weights: int, basis: str, *, exact: bool,
                 eng: EngineSettings, compute_capability: str | None = None,
                 local: LocalCheckpoint | None = None) -> Term:
    """The weights per GPU as the engine loads them: online FP8 halves the linear layers of an unquantized
    checkpoint; MXFP4 experts load padded on Hopper; a size from the recipe is within 2%."""
    low, high = (weights, weights) if exact else (int(weights * 0.98), int(weights * 1.02))
    notes = []
    if eng.quantization == "fp8" and not shape.quant_method and shape.dtype_bytes >= 2:
        # vLLM's online FP8: linear weights stored in one byte; embeddings, norms and the LM head stay
        kinds = local.weights if local is not None and local.weights.tensors else None
        tp = recipe.gpus.tensor_parallel
        linear = (kinds.split // tp + kinds.experts // tp) if kinds else int(weights * 0.9)
        saved = linear // 2
        low, high = low - saved, high - saved + (0 if kinds else int(weights * 0.05))
        notes.append("--quantization fp8 on an unquantized checkpoint: linear layers loaded in FP8 (half)")
    if shape.quant_method == "mxfp4" and compute_capability and compute_capability.startswith("9."):
        kinds = local.weights if local is not None and local.weights.tensors else None
        experts = (kinds.experts // recipe.gpus.tensor_parallel) if kinds else int(weights * 0.9)
        low += int(experts * (MXFP4_HOPPER_PAD - 1) * 0.8)
        high += int(experts * (MXFP4_HOPPER_PAD - 1))
        notes.append("MXFP4 experts load padded on Hopper (2880 -> 3072 columns, +5-7%)")
    return Term("weights", max(0, low), max(0, high), "; ".join([basis, *notes]))


def plan(recipe: Recipe, shape: Shape, *, total_bytes: int, weights: int, weights_basis: str,
         weights_exact: bool = True, product: str = "", compute_capability: str | None = None,
         local: LocalCheckpoint | None = None, receipt: Mapping[str, Any] | None = None) -> MemoryPlan:
    """The memory plan of one GPU of ``total_bytes``. ``receipt``: a boot's own figures for this recipe,
    image and GPU product (``kv_available_bytes``, ``weights_bytes``, ``described``): its KV budget is used
    as measured."""
    gpus = recipe.gpus
    eng = engine_settings(recipe, total_bytes)
    spec_layers = (shape.mtp_layers or 1) if isinstance(recipe.speculative, SpecMtp) else 0
    kv = kv_per_sequence(shape, tp=gpus.tensor_parallel, dcp=gpus.decode_context_parallel,
                         kv_cache_dtype=eng.kv_cache_dtype, batched_tokens=eng.batched_tokens,
                         speculative_layers=spec_layers, pad_groups=eng.kind is EngineKind.VLLM)
    w = weights_term(recipe, shape, weights, weights_basis, exact=weights_exact, eng=eng,
                     compute_capability=compute_capability, local=local)
    memory = engine_memory(eng, shape, tp=gpus.tensor_parallel, total=total_bytes, weights=w, product=product)
    if eng.kv_cache_memory is not None and eng.kind is EngineKind.VLLM:
        memory = replace(memory, measured_budget=eng.kv_cache_memory,
                         receipt=f"--kv-cache-memory-bytes {eng.kv_cache_memory:,}: vLLM allocates exactly that")
    elif receipt and isinstance(receipt.get("kv_available_bytes"), int):
        measured = receipt["kv_available_bytes"]
        if isinstance(receipt.get("weights_bytes"), int):
            w = Term.exact("weights", receipt["weights_bytes"], f"the receipt: {receipt.get('described', 'a boot')}")
            memory = replace(memory, inside=(w, *memory.inside[1:]) if memory.inside[0].name == "weights"
                             else memory.inside)
        memory = replace(memory, measured_budget=measured,
                         receipt=f"the KV budget a boot measured: {receipt.get('described', 'a boot')}")
    return MemoryPlan(recipe.context_length, total_bytes, kv, shape, memory, w.basis)


def recipe_weights(recipe: Recipe, local: LocalCheckpoint | None) -> tuple[int, str]:
    """Per-GPU weight bytes and where they come from: the shards' headers when every shard is here,
    else the recipe's size / TP (with a note); a draft model's size / TP is added either way."""
    gpus = recipe.gpus
    ck = recipe.checkpoint
    if local is not None and local.weights.tensors and not local.missing and not local.problems:
        ep = gpus.tensor_parallel * gpus.data_parallel if gpus.expert_parallel else None
        w = weights_of(local.weights, tp=gpus.tensor_parallel, pp=gpus.pipeline_parallel, ep_ranks=ep)
        cached = f" ({local.shards_cached} unchanged since rigctl's cache read them)" if local.shards_cached else ""
        weights = w.bytes_per_gpu
        basis = (f"safetensors headers of {local.shards_read} shard(s){cached}, {w.tensors:,} tensors: "
                 f"{w.split_bytes / GIB:.1f} GiB split over TP {gpus.tensor_parallel}, {w.expert_bytes / GIB:.1f} GiB "
                 f"of routed experts split over {'EP' if ep else 'TP'}, {w.replicated_bytes / GIB:.2f} GiB replicated")
    else:
        size = ck.total_bytes or ck.approx_bytes or 0
        kind = "total_bytes" if ck.total_bytes else "approx_bytes"
        why = "the checkpoint is not on this machine" if local is None or not local.shards_read else \
            "not every shard's header could be read"
        weights = size // (gpus.tensor_parallel * gpus.pipeline_parallel)
        basis = f"recipe checkpoint.{kind} / TP {gpus.tensor_parallel} ({why}; replicated tensors not counted twice)"
    if isinstance(recipe.speculative, SpecDraft):
        weights += recipe.speculative.draft.total_bytes // gpus.tensor_parallel
        basis += (f"; + draft {recipe.speculative.draft.total_bytes / GIB:.1f} GiB / TP (the draft's own KV cache is "
                  "not counted: its shape is not in the recipe)")
    return weights, basis


def model_shape(recipe: Recipe, local: LocalCheckpoint | None) -> Shape | None:
    """The model's shape: this machine's config.json where the checkpoint is here and it is usable, else the
    recipe's block (carrying config.json's notes), else the unusable shape with its notes, or None."""
    refused: Shape | None = None
    if local is not None and local.config is not None:
        shape = shape_from_config(local.config, f"config.json in {recipe.checkpoint.path}")
        if shape.usable:
            return shape
        refused = shape
    if recipe.checkpoint.config is not None:
        shape = shape_from_config(recipe.checkpoint.config.model_dump(exclude_none=True),
                                  "the recipe's checkpoint.config", label="checkpoint.config")
        if refused is not None:
            shape = replace(shape, notes=(*refused.notes, "planned from the recipe's checkpoint.config instead",
                                          *shape.notes))
        return shape
    return refused


# --- the check -------------------------------------------------------------------------------------------


def _gib(n: float) -> str:
    return f"{n / GIB:,.1f} GiB"


def _holders(gpu: Gpu) -> str:
    procs = ", ".join(f"PID {p.pid} {p.name or '(name not visible)'}"
                      + (f" {p.used_memory_bytes / GIB:.1f} GiB" if p.used_memory_bytes else "") for p in gpu.processes)
    return procs or "no process visible (another container or PID namespace?)"


def judge(p: MemoryPlan, chosen: Sequence[Gpu], extra: Mapping[str, Any] | None = None, *,
          assumed: str | None = None) -> Verdict:
    """Fits, tight or not, with the plan per component; then against NVML's free memory now. ``assumed``:
    the GPUs are not here and the plan is for the cards this names."""
    v = _judge(p, chosen, p.figures(extra))
    if assumed is not None:
        v = Verdict(v.severity, f"{assumed}: {v.message}", v.fix, {**(v.figures or {}), "assumed_gpus": assumed})
    if not p.shape.notes:
        return v
    notes = "; ".join(p.shape.notes)
    return Verdict(Severity.WARN if v.severity is Severity.OK else v.severity, f"{v.message}; {notes}",
                   v.fix or "check config.json against the model's published one (download it again if it differs)",
                   v.figures)


def _judge(p: MemoryPlan, chosen: Sequence[Gpu], figures: dict[str, Any]) -> Verdict:
    ctx = f"{p.context:,}"
    seqs = figures["max_full_context_sequences"]
    held = f"{seqs:,.2f}" if seqs is not None else "any number of"
    head = (f"KV for one {ctx}-token sequence {_gib(p.kv_bytes_per_sequence)}/GPU ({p.shape.family}, KV {p.kv.dtype}"
            f"{'; ' + p.kv.padding if p.kv.padding else ''}); per GPU: {p.components()}")
    verdict = p.verdict
    if verdict == "does-not-fit":
        return Verdict(Severity.FAIL,
                       f"{ctx} tokens do not fit: {head}; the largest context for one sequence is "
                       f"{p.max_context:,} tokens", (
                           f"lower context_length to {p.max_context:,} or less, raise --gpu-memory-utilization to "
                           f"{p.needed_utilization:.2f} if the GPU has it free, use --kv-cache-dtype fp8, or more GPUs "
                           "(a larger tensor_parallel)"), figures)
    if verdict == "tight":
        term = p.deciding()
        span = term.shown()[len(term.name) + 1:]
        text = (f"{ctx} tokens are tight: they fit only if {term.name} is near the low end of {span}; "
                f"{head}; sure to fit: {p.max_context:,} tokens")
        fix = (("nothing is sure to fit beside the weights: " if p.max_context == 0 else
                f"lower context_length to {p.max_context:,}, or ") + "pin what decides it ("
               + {"profile_peak": "--max-num-seqs", "weights": "the checkpoint on this machine, or its exact "
                  "checkpoint.total_bytes"}.get(term.name, "engine.version, --max-num-seqs")
               + "), or boot once: the receipt of that boot replaces the estimate")
    else:
        text = (f"{ctx} tokens fit: {head}; it holds {held} full-context sequence(s) "
                f"(largest single context {p.max_context:,} tokens; needs gpu-memory-utilization >= "
                f"{p.needed_utilization:.2f})")
        fix = None
    want = int(p.utilization * p.total_bytes) + sum(t.high for t in p.engine.outside if t.name == "cuda_graphs")
    short = [g for g in chosen if g.memory_free_bytes is not None and g.memory_free_bytes < want]
    if short:
        rows = "; ".join(f"GPU {g.index}: {_gib(g.memory_free_bytes or 0)} free, held by {_holders(g)}" for g in short)
        pids = sorted({pr.pid for g in short for pr in g.processes})
        return Verdict(Severity.FAIL,
                       f"{text}; but the engine asks for {_gib(want)} per GPU and NVML shows less free now: {rows}",
                       (f"stop the holders (`kill {' '.join(map(str, pids))}` or stop the serving unit that owns them)"
                        if pids else "find the holder with `nvidia-smi` on the host and stop it")
                       + ", or lower --gpu-memory-utilization to what is free", figures)
    if fix is not None:
        return Verdict(Severity.WARN, text, fix, figures)
    left, outside = p.headroom
    if outside > left:
        names = ", ".join(t.shown() for t in p.engine.outside)
        lower = max(0.5, p.utilization - (outside - left) / p.total_bytes - 0.01)
        return Verdict(Severity.WARN, f"{text}; but what the engine holds beyond the budget ({names}) may not fit "
                                      f"in the {_gib(left)} that gpu-memory-utilization {p.utilization:g} leaves",
                       f"lower --gpu-memory-utilization to {lower:.2f}, or --enforce-eager (no CUDA graphs)", figures)
    return Verdict(Severity.OK, text, None, figures)


# NVML's total memory of cards a recipe may name, for the plan on a box without them (MiB): the RTX PRO 6000
# editions and the H200 from facts.md and the H200 capture; the H100 from the device box's NVML
# (tests/fixtures/device/h100-2026-12-07).
CARD_MEMORY_MIB = {
    "NVIDIA RTX PRO 6000 Blackwell Workstation Edition": 97_887,
    "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition": 97_887,
    "NVIDIA RTX PRO 6000 Blackwell Server Edition": 97_887,
    "NVIDIA H200": 143_771,
    "NVIDIA H100 80GB HBM3": 81_559,
}


def assumed_gpu(recipe: Recipe) -> tuple[str, int, str] | None:
    """(product, total bytes, where the size comes from) of the recipe's first accepted product, for a box
    without its GPUs; None when neither rigctl's table nor the recipe's min_memory_mib sizes it."""
    product = recipe.gpus.products[0] if recipe.gpus.products else ""
    if product in CARD_MEMORY_MIB:
        return product, CARD_MEMORY_MIB[product] * MIB, "rigctl's table of cards"
    if recipe.gpus.min_memory_mib:
        return product or "a GPU", recipe.gpus.min_memory_mib * MIB, "the recipe's gpus.min_memory_mib"
    return None


def matching_receipt(recipe: Recipe, receipts: Sequence[Any], product: str) -> Mapping[str, Any] | None:
    """The newest receipt of a boot of this recipe's memory settings, image and GPU product."""
    key = receipt_key(recipe)
    found = [r for r in receipts if r.recipe == recipe.name and r.key == key and r.image == recipe.image
             and r.gpu_product == product and r.kv_available_bytes is not None]
    if not found:
        return None
    newest = max(found, key=lambda r: r.at)
    return {"kv_available_bytes": newest.kv_available_bytes, "weights_bytes": newest.weights_bytes,
            "described": f"{newest.at}, {product}, image {recipe.image.rsplit('@', 1)[-1][:19]}"}


def receipt_key(recipe: Recipe) -> str:
    """What decides an engine's memory budget besides its image and GPU: its args, layout, checkpoint and
    speculative decoding (not the context: vLLM's budget does not depend on it)."""
    spec = recipe.speculative.model_dump(mode="json") if recipe.speculative is not None else None
    ck = recipe.checkpoint
    args = list(recipe.engine.args)
    pin = "--kv-cache-memory-bytes"  # what a pinned boot adds (engine.pin_kv_cache): the same settings
    for i in range(len(args) - 1, -1, -1):
        if args[i] == pin:
            del args[i:i + 2]
        elif args[i].startswith(pin + "="):
            del args[i]
    body = json.dumps([recipe.engine.kind, args, recipe.gpus.tensor_parallel,
                       recipe.gpus.pipeline_parallel, recipe.gpus.data_parallel, recipe.gpus.decode_context_parallel,
                       recipe.gpus.expert_parallel, ck.path, ck.total_bytes, ck.approx_bytes, spec],
                      sort_keys=True, allow_nan=False)
    return hashlib.sha256(body.encode()).hexdigest()[:16]


def check_gpu_fit(ctx: Context) -> Verdict:
    """Will the weights and the KV cache for the recipe's context fit on the chosen GPUs? Weights from the
    checkpoint's safetensors headers (or the recipe's size), KV per sequence from config.json (or the recipe's
    checkpoint.config) by attention family, the budget as the engine's version computes it, term by term with
    a margin (or as a boot of the same recipe, image and GPU measured it), and NVML's free memory now. Without
    the recipe's GPUs here, the plan is for its first accepted product."""
    recipe = ctx.recipe
    if recipe.gpus.count == 0:
        return Verdict(Severity.SKIP, "the recipe needs no GPU")
    bad_fraction = engine_settings(recipe, 0).problem
    if bad_fraction is not None:
        flag = bad_fraction.split(" ", 1)[0]
        return Verdict(Severity.FAIL, f"{bad_fraction}: the engine takes the share of each GPU's memory it may use "
                                      "(0.9 is 90%) and refuses anything else",
                       f"set {flag} in the recipe's engine.args to a fraction such as 0.9")
    ck = recipe.checkpoint
    # the one read of this machine in a check: a model's shape does not depend on the box, so it comes from
    # the checkpoint where this machine has it, with --inventory too (headers only, bounded: host.safetensors)
    local = None if ck.format is CheckpointFormat.GGUF else \
        read_checkpoint(ck.path, ck.shard_names(), cache=SummaryCache())
    shape = model_shape(recipe, local)
    if shape is None or not shape.usable:
        why = "; ".join(shape.notes) + "; and the recipe has no checkpoint.config block" if shape else \
            "the checkpoint is not on this machine and the recipe has no checkpoint.config block"
        return Verdict(Severity.WARN, f"no model shape to plan from: {why}",
                       "add checkpoint.config to the recipe with the fields of the model's config.json "
                       "(num_hidden_layers, num_key_value_heads, head_dim, ...; see `rigctl schema recipe`)")
    weights, basis = recipe_weights(recipe, local)
    exact = "headers" in basis or ck.total_bytes is not None
    notes = (local.problems if local else [])[:3]
    extra: dict[str, Any] | None = {"checkpoint_problems": notes} if notes else None
    if not ctx.facts.gpu.available or not ctx.choice.ok or not ctx.choice.gpus:
        why = f"NVML is unavailable ({ctx.facts.gpu.error})" if not ctx.facts.gpu.available else \
            "no valid GPU layout here"
        card = assumed_gpu(recipe)
        if card is None:
            return Verdict(Severity.SKIP, f"no GPUs to plan against: {why}; the recipe names no product of a known "
                                          "size and no gpus.min_memory_mib")
        product, total, source = card
        p = plan(recipe, shape, total_bytes=total, weights=weights, weights_basis=basis, weights_exact=exact,
                 product=product, compute_capability=next(iter(recipe.gpus.compute_capability), None), local=local)
        said = (f"planned for {recipe.gpus.count} x {product} ({total // MIB:,} MiB each, from {source}; "
                f"{why})")
        return judge(p, [], extra, assumed=said)
    by_index = {g.index: g for g in ctx.facts.gpu.devices}
    chosen = [by_index[i] for i in ctx.choice.indices if i in by_index]
    sized = [g for g in chosen if g.memory_total_bytes]
    if not sized:
        return Verdict(Severity.SKIP, "NVML did not report the chosen GPUs' memory")
    smallest = min(sized, key=lambda g: g.memory_total_bytes or 0)
    receipt = matching_receipt(recipe, ctx.facts.receipts, smallest.name or "")
    extra = {**(extra or {}), "gpu_product": smallest.name or "", "receipt_key": receipt_key(recipe)}
    p = plan(recipe, shape, total_bytes=smallest.memory_total_bytes or 0, weights=weights, weights_basis=basis,
             weights_exact=exact, product=smallest.name or "", compute_capability=smallest.compute_capability,
             local=local, receipt=receipt)
    return judge(p, chosen, extra)


# --- planned against used: what `status` shows per GPU ------------------------------------------------------


@dataclass(frozen=True)
class GpuMemoryUse:
    """One GPU of a deployed service: the memory gpu-fit planned the engine to take there, and what the
    service's processes hold there now by NVML."""

    gpu: int  # NVML index
    uuid: str
    total_bytes: int | None
    planned_bytes: int | None  # gpu-memory-utilization x total (+ CUDA graphs beyond it): the engine's claim
    planned_weights_bytes: int | None  # of which weights (None: the model's shape is not known)
    planned_kv_budget_bytes: int | None  # of which KV cache
    used_bytes: int | None  # by the service's processes (None: NVML did not say, or the GPU is not there)
    basis: str


def planned_vs_used(recipe: Recipe, gpu_ids: Sequence[str], devices: Sequence[Gpu], pids: Collection[int], *,
                    local: LocalCheckpoint | None = None) -> list[GpuMemoryUse]:
    """Per GPU of a deployment (``gpu_ids``: its record's, NVML indexes or UUIDs; none recorded: the GPUs
    where ``pids`` hold memory), the memory the gpu-fit plan gives the engine there and what ``pids`` (the
    service's process tree) hold there now, from ``devices`` (NVML's GPUs with their per-process memory:
    ``host.facts.Gpu``). Pure: ``local`` is the checkpoint as ``read_checkpoint`` found it, for the weights
    from its headers (None: the recipe's size / TP and its ``checkpoint.config``)."""
    if recipe.gpus.count == 0:
        return []
    wanted = set(gpu_ids)
    if wanted:
        chosen = [g for g in devices if g.named_by(wanted)]
    else:
        chosen = [g for g in devices if any(p.pid in pids for p in g.processes)]
    shape = model_shape(recipe, local)
    if shape is not None and not shape.usable:
        shape = None
    out = []
    for g in chosen:
        mine = [p for p in g.processes if p.pid in pids]
        used = None if any(p.used_memory_bytes is None for p in mine) else sum(p.used_memory_bytes or 0 for p in mine)
        total = g.memory_total_bytes
        if total is None:
            out.append(GpuMemoryUse(g.index, g.uuid, None, None, None, None, used,
                                    "NVML did not report the GPU's memory"))
            continue
        eng = engine_settings(recipe, total)
        graphs = 0 if eng.eager else CUDA_GRAPHS[1]
        planned = int(eng.utilization * total) + graphs
        weights = kv = None
        basis = (f"{eng.utilization:g} ({eng.utilization_source}) x {_gib(total)}"
                 + (f" + up to {_gib(graphs)} CUDA graphs (an estimate)" if graphs else ""))
        if shape is not None:
            w, w_basis = recipe_weights(recipe, local)
            p = plan(recipe, shape, total_bytes=total, weights=w, weights_basis=w_basis)
            weights, kv = p.weights, p.budget
            basis += f"; weights: {w_basis}"
        out.append(GpuMemoryUse(g.index, g.uuid, total, planned, weights, kv, used, basis))
    return out
