"""Safetensors headers: read bounded (a hostile header is an error naming the file, not a hang or a huge read), and
the weights per GPU they give: split by TP, replicated where the engine replicates, experts by TP or EP, packed
quantised tensors at their stored size. Each shard's summary is cached while its file is unchanged (path, size,
mtime, ctime, inode, device): a changed shard is read again, a hostile one is an error again."""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rigctl.host import safetensors
from rigctl.host.facts import HostFacts
from rigctl.host.safetensors import (
    HEADER_LIMIT,
    HeaderError,
    SummaryCache,
    Tensor,
    WeightKinds,
    read_checkpoint,
    read_header,
)
from rigctl.preflight.finding import Severity
from rigctl.preflight.gpu_fit import weights_of, weights_per_gpu
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.model import Recipe


def write_shard(path: Path, tensors: dict[str, tuple[str, list[int], int]], *, pad: bytes = b"") -> None:
    """A real safetensors layout: 8-byte little-endian length, JSON header, then the data (zeros)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape, nbytes) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode() + pad
    with path.open("wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        f.truncate(8 + len(raw) + offset)  # sparse: the data is never read


def test_reads_the_header_only(tmp_path: Path) -> None:
    shard = tmp_path / "model.safetensors"
    write_shard(shard, {"model.embed_tokens.weight": ("BF16", [1000, 64], 128_000),
                        "model.norm.weight": ("BF16", [64], 128)})
    tensors = read_header(shard)
    assert [(t.name, t.dtype, t.shape, t.nbytes) for t in tensors] == [
        ("model.embed_tokens.weight", "BF16", (1000, 64), 128_000), ("model.norm.weight", "BF16", (64,), 128)]


def framed(header: bytes) -> bytes:
    return struct.pack("<Q", len(header)) + header


@pytest.mark.parametrize(("raw", "why"), [
    (struct.pack("<Q", 2**63), "header length is more than the 16 MiB"),
    (struct.pack("<Q", HEADER_LIMIT + 1), "header length is more than the 16 MiB"),
    (struct.pack("<Q", 4096) + b"{}", "does not fit"),
    (b"\x01\x02", "shorter than the 8-byte"),
    (struct.pack("<Q", 5) + b"[1,2]", "not a JSON object"),
    (struct.pack("<Q", 4) + b"\xff\xfe{}", "not JSON"),
    (framed(json.dumps({"t": {"dtype": "F16", "shape": [2], "data_offsets": [0, 99]}}).encode()), "fall outside"),
    (framed(json.dumps({"t": {"dtype": "F16", "shape": [-1], "data_offsets": [0, 0]}}).encode()), "shape"),
    (framed(json.dumps({"t": {"dtype": "F16", "shape": [2], "data_offsets": [4, 2]}}).encode()), "fall outside"),
    (framed(json.dumps({"t": "x"}).encode()), "not an object"),
    (framed(b"[" * 100_000 + b"]" * 100_000), "not JSON"),
])
def test_hostile_headers_are_errors(tmp_path: Path, raw: bytes, why: str) -> None:
    shard = tmp_path / "bad.safetensors"
    shard.write_bytes(raw)
    with pytest.raises(HeaderError) as exc:
        read_header(shard)
    assert why in exc.value.why and str(shard) in exc.value.problems[0]


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "model.safetensors"
    os.mkfifo(fifo)
    with pytest.raises(HeaderError, match="not a regular file"):
        read_header(fifo)


def test_a_damaged_shard_falls_back_to_the_recipe_size(tmp_path: Path) -> None:
    write_shard(tmp_path / "a.safetensors", {"w": ("BF16", [4, 4], 32)})
    (tmp_path / "b.safetensors").write_bytes(struct.pack("<Q", 2**40))
    got = read_checkpoint(str(tmp_path), ["a.safetensors", "b.safetensors", "c.safetensors"])
    assert got.shards_read == 1 and got.missing == ["c.safetensors"] and "b.safetensors" in got.problems[0]


def t(name: str, shape: list[int], nbytes: int) -> Tensor:
    return Tensor(name, "BF16", tuple(shape), nbytes)


def test_weights_split_replicated_and_experts() -> None:
    tensors = [
        t("model.layers.0.self_attn.q_proj.weight", [4096, 4096], 1000),  # split
        t("model.layers.0.self_attn.kv_a_proj_with_mqa.weight", [576, 7168], 300),  # MLA down-projection: whole
        t("model.layers.0.input_layernorm.weight", [7168], 10),  # 1-D: whole
        t("model.layers.0.mlp.gate.weight", [256, 7168], 20),  # router: whole
        t("model.layers.0.mlp.experts.0.down_proj.weight", [7168, 2048], 4000),  # routed expert
        t("model.layers.0.mlp.shared_experts.down_proj.weight", [7168, 2048], 400),  # shared expert: split
    ]
    w = weights_per_gpu(tensors, tp=2)
    assert (w.split_bytes, w.replicated_bytes, w.expert_bytes) == (1400, 330, 4000)
    assert w.bytes_per_gpu == 1400 // 2 + 330 + 4000 // 2
    assert weights_per_gpu(tensors, tp=2, ep_ranks=4).bytes_per_gpu == 1400 // 2 + 330 + 4000 // 4


def test_quantised_tensors_count_their_stored_bytes() -> None:
    packed = Tensor("model.layers.0.mlp.experts.0.up_proj.weight_packed", "U8", (2048, 3584), 2048 * 3584)
    assert weights_per_gpu([packed], tp=1).bytes_per_gpu == 2048 * 3584  # 4-bit pairs in U8: stored size


def test_the_check_uses_headers_and_config_on_this_machine(tmp_path: Path, recipe_with: Callable[..., Recipe],
                                                           facts_for: Callable[..., HostFacts]) -> None:
    ckpt = tmp_path / "Qwen3-8B"
    ckpt.mkdir()
    cfg = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "model-configs" / "qwen3-8b.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 18}))  # this machine's copy wins
    for i in (1, 2):
        write_shard(ckpt / f"model-{i:05d}-of-00002.safetensors",
                    {f"model.layers.{i}.mlp.down_proj.weight": ("BF16", [4096, 12288], 2 * 4096 * 12288),
                     f"model.layers.{i}.input_layernorm.weight": ("BF16", [4096], 8192)})
    recipe = recipe_with("qwen3-8b-vllm", f"checkpoint.path={ckpt}", "checkpoint.shards=2",
                         f"container.volumes=[{{\"host\":\"{ckpt}\",\"container\":\"/models/q\"}}]")
    f = run_preflight(recipe, facts_for(recipe, "pro6000-single")).finding("gpu-fit")
    assert f.severity is Severity.OK and f.figures is not None
    assert f.figures["weights_bytes_per_gpu"] == 2 * (2 * 4096 * 12288 + 8192)
    assert f.figures["kv_bytes_per_sequence"] == 2 * 18 * 8 * 128 * 2 * 32768
    assert "safetensors headers of 2 shard(s)" in f.figures["basis"]["weights"]
    assert "config.json in" in f.figures["basis"]["shape"]


# --- the cache of shard summaries ----------------------------------------------------------------------------

SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]


def two_shards(tmp_path: Path) -> Path:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    write_shard(ckpt / SHARDS[0], {"model.layers.0.self_attn.q_proj.weight": ("BF16", [64, 64], 8192),
                                   "model.layers.0.input_layernorm.weight": ("BF16", [64], 128)})
    write_shard(ckpt / SHARDS[1], {"model.layers.1.mlp.experts.0.up_proj.weight": ("BF16", [64, 64], 8192),
                                   "model.layers.1.mlp.gate.weight": ("BF16", [4, 64], 512)})
    return ckpt


def test_unchanged_shards_come_from_the_cache(tmp_path: Path) -> None:
    ckpt, cache_file = two_shards(tmp_path), tmp_path / "cache" / "safetensors.json"
    first = read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    assert first.shards_read == 2 and first.shards_cached == 0
    assert first.weights == WeightKinds(tensors=4, split=8192, replicated=128 + 512, experts=8192)
    again = read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))  # a new process: from the file
    assert again.shards_read == 2 and again.shards_cached == 2 and again.weights == first.weights
    assert weights_of(again.weights, tp=2).bytes_per_gpu == 8192 // 2 + 640 + 8192 // 2
    entry = json.loads(cache_file.read_text())["shards"][str(ckpt / SHARDS[0])]
    st = (ckpt / SHARDS[0]).stat()
    assert (entry["size"], entry["mtime_ns"], entry["ino"]) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_a_shard_replaced_in_place_is_read_again_and_a_hostile_one_refused(tmp_path: Path) -> None:
    ckpt, cache_file = two_shards(tmp_path), tmp_path / "cache.json"
    read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    shard = ckpt / SHARDS[1]
    st = shard.stat()
    # the same size, the same inode, the mtime put back: only the ctime tells that the bytes changed
    hostile = struct.pack("<Q", 2**40).ljust(st.st_size, b" ")
    with shard.open("r+b") as f:
        f.write(hostile)
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert shard.stat().st_size == st.st_size and shard.stat().st_ino == st.st_ino
    got = read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    assert got.shards_read == 1 and got.shards_cached == 1 and SHARDS[1] in got.problems[0]
    assert "header length is more than the 16 MiB" in got.problems[0]
    again = read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))  # refused again, from the cache
    assert again.problems == got.problems


def test_a_rewritten_shard_counts_what_it_holds_now(tmp_path: Path) -> None:
    ckpt, cache_file = two_shards(tmp_path), tmp_path / "cache.json"
    read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    write_shard(ckpt / SHARDS[0], {"model.layers.0.self_attn.q_proj.weight": ("BF16", [128, 64], 16384)})
    got = read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    assert got.shards_cached == 1 and got.weights.split == 16384 and got.weights.tensors == 3


@pytest.mark.parametrize("damage", [
    b"not json", b"[1, 2]", json.dumps({"version": 1, "shards": {"x": {"size": "big"}}}).encode(), b"\xff\xfe",
    json.dumps({"version": 2, "shards": {}}).encode(),
])
def test_a_damaged_cache_counts_as_empty_and_is_rewritten(tmp_path: Path, damage: bytes) -> None:
    ckpt, cache_file = two_shards(tmp_path), tmp_path / "cache.json"
    cache_file.write_bytes(damage)
    got = read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    assert got.shards_read == 2 and got.shards_cached == 0 and not got.problems
    assert read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file)).shards_cached == 2


def test_a_fifo_for_a_cache_is_not_waited_on(tmp_path: Path) -> None:
    ckpt, cache_file = two_shards(tmp_path), tmp_path / "cache.json"
    os.mkfifo(cache_file)
    assert read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file)).shards_read == 2


def test_entries_made_under_other_rules_are_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ckpt, cache_file = two_shards(tmp_path), tmp_path / "cache.json"
    read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    monkeypatch.setattr(safetensors, "RULES", "other-rules")
    assert read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file)).shards_cached == 0


def test_the_cache_keeps_the_newest_entries(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(safetensors, "CACHE_ENTRIES", 1)
    ckpt, cache_file = two_shards(tmp_path), tmp_path / "cache.json"
    read_checkpoint(str(ckpt), SHARDS, cache=SummaryCache(cache_file))
    assert list(json.loads(cache_file.read_text())["shards"]) == [str(ckpt / SHARDS[1])]


def test_the_check_caches_in_rigctls_cache_directory(tmp_path: Path, own_cache: Path,
                                                     recipe_with: Callable[..., Recipe],
                                                     facts_for: Callable[..., HostFacts]) -> None:
    ckpt = two_shards(tmp_path)
    recipe = recipe_with("qwen3-8b-vllm", f"checkpoint.path={ckpt}", "checkpoint.shards=2",
                         f"container.volumes=[{{\"host\":\"{ckpt}\",\"container\":\"/models/q\"}}]")
    facts = facts_for(recipe, "pro6000-single")
    first = run_preflight(recipe, facts).finding("gpu-fit")
    assert (own_cache / "rigctl" / "safetensors.json").is_file()
    again = run_preflight(recipe, facts).finding("gpu-fit")
    assert first.figures is not None and again.figures is not None
    assert "2 unchanged since rigctl's cache read them" in again.figures["basis"]["weights"]
    assert again.figures["weights_bytes_per_gpu"] == first.figures["weights_bytes_per_gpu"]


# --- the fast reader (msgspec's typed decode) against the exact one (json and the checks in Python) --------------

def _kinds_or_why(path: Path) -> tuple[str, Any]:
    try:
        return "kinds", safetensors.read_kinds(path)[0]
    except HeaderError as exc:
        return "refused", exc.why


def _exact(path: Path) -> tuple[str, Any]:
    try:
        return "kinds", safetensors.summarize(read_header(path))
    except HeaderError as exc:
        return "refused", exc.why


ENTRY = {"dtype": "BF16", "shape": [4, 4], "data_offsets": [0, 32]}
ODD_HEADERS = [  # accepted by the exact reader; the fast one accepts them or leaves them to it
    {"__metadata__": {"format": "pt", "shape": "not a list", "data_offsets": "x"}},
    {"__metadata__": {"nan": float("nan")}},
    {"__metadata__": None},
    {"t": {**ENTRY, "dtype": "F8_E4M3FNUZ"}},  # a dtype this rigctl does not know: any short string is taken
    {"t": {**ENTRY, "extra": [[[1]]]}},
    {"modèle.couche.0.poids": ENTRY, "model.layers.0.mlp.experts.0.w": ENTRY},
    {"t": {**ENTRY, "shape": []}, "u": {**ENTRY, "shape": [0, 3]}},
    {"t": {**ENTRY, "data_offsets": [32, 32]}},
    {"t": ENTRY, "t2": ENTRY, "model.layers.0.mlp.gate.weight": ENTRY, "model.norm.weight": {**ENTRY, "shape": [16]}},
]
BAD_HEADERS = [  # refused by both, for the exact reader's reason
    {"t": {**ENTRY, "shape": [True]}}, {"t": {**ENTRY, "shape": [1.0]}}, {"t": {**ENTRY, "data_offsets": [0, 32.0]}},
    {"t": {**ENTRY, "data_offsets": [0, 10**30]}}, {"t": {**ENTRY, "shape": [1] * 17}}, {"t": {**ENTRY, "dtype": 3}},
    {"t": {**ENTRY, "dtype": "X" * 33}}, {"t": {"shape": [1], "data_offsets": [0, 2]}}, {"t": {**ENTRY, "shape": None}},
    {"t": {**ENTRY, "data_offsets": [0]}}, {"t": [1, 2]}, {"t": ENTRY, "u": 5},
]


@pytest.mark.parametrize("header", ODD_HEADERS + BAD_HEADERS, ids=[str(i) for i in range(len(ODD_HEADERS + BAD_HEADERS))])
def test_the_fast_reader_agrees_with_the_exact_one(tmp_path: Path, header: dict[str, Any]) -> None:
    shard = tmp_path / "x.safetensors"
    raw = json.dumps(header).encode()
    shard.write_bytes(framed(raw) + b"\0" * 64)
    assert _kinds_or_why(shard) == _exact(shard)
    if header in BAD_HEADERS:
        assert _exact(shard)[0] == "refused"


@pytest.mark.parametrize("raw", [
    b'{"__metadata__":{"x":"\xff"},"t":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}}',  # skipped, not UTF-8
    b'{"t":{"dtype":"BF16","shape":[4],"data_offsets":[0,8]}} trailing',
    b'{"t":{"dtype":"BF16","shape":[4],"data_offsets":[0,8],"x":' + b"[" * 5000 + b"]" * 5000 + b"}}",
])
def test_bytes_the_fast_reader_leaves_to_the_exact_one(tmp_path: Path, raw: bytes) -> None:
    shard = tmp_path / "x.safetensors"
    shard.write_bytes(framed(raw) + b"\0" * 64)
    assert _kinds_or_why(shard) == _exact(shard)


def test_a_plain_header_takes_the_fast_reader(tmp_path: Path) -> None:
    header = {"__metadata__": {"format": "pt"}, "model.layers.0.mlp.experts.0.up_proj.weight": ENTRY,
              "model.layers.0.self_attn.q_proj.weight": ENTRY, "model.norm.weight": {**ENTRY, "shape": [16]}}
    raw = json.dumps(header).encode()
    assert safetensors._fast_kinds(raw, 64) == WeightKinds(tensors=3, split=32, replicated=32, experts=32)
    assert safetensors._fast_kinds(raw, 31) is None  # an offset past the data: the exact reader says why
