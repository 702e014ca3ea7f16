"""A checkpoint directory other users can write (issue #31, item 3): gpu-fit reads its config.json and its
shards' safetensors headers as root. Every number from those files is bounded before it is used, layer kinds
are counted arithmetically (never a list per layer), a shard that is not a regular file inside the checkpoint
is refused before it is opened, a header's memory is bounded, and a refused header is remembered by the cache.
What a bad file costs is a note in the finding, never a crash of the check, a hang or the box's memory.

The attacks that could eat memory or time run the check in a fresh process under an address-space limit and a
timeout, with a sane checkpoint through the same limit as the control.
"""

from __future__ import annotations

import json
import os
import resource
import struct
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pytest
from tests.preflight.conftest import healthy_facts

from rigctl.host import safetensors
from rigctl.host.safetensors import HEADER_LIMIT, SummaryCache, read_checkpoint
from rigctl.preflight.finding import Severity
from rigctl.preflight.gpu_fit import engine_settings, planned_vs_used, shape_from_config
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.load import load
from rigctl.recipe.model import Recipe

REPO = Path(__file__).resolve().parents[2]
MEMORY_CEILING = 512 << 20  # the check of a sane checkpoint peaks near 100 MiB; a list per 10**100 layers takes all
SHARD = "model-00001-of-00001.safetensors"
QWEN3_8B = json.loads((REPO / "tests" / "fixtures" / "model-configs" / "qwen3-8b.json").read_text())
# openai-community/gpt2 config.json (huggingface.co/openai-community/gpt2/blob/main/config.json), its sizing keys
GPT2 = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "activation_function": "gelu_new",
        "n_ctx": 1024, "n_embd": 768, "n_head": 12, "n_inner": None, "n_layer": 12, "n_positions": 1024,
        "vocab_size": 50257, "layer_norm_epsilon": 1e-05}


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


def recipe_at(ckpt: Path, *sets: str, name: str = "qwen3-8b-vllm") -> Recipe:
    return load(name, sets=(f"checkpoint.path={ckpt}", "checkpoint.shards=1",
                            f'container.volumes=[{{"host":"{ckpt}","container":"/models/q"}}]', *sets)).recipe


def gpu_fit(ckpt: Path, *sets: str) -> Any:
    recipe = recipe_at(ckpt, *sets)
    return run_preflight(recipe, healthy_facts(recipe, "pro6000-single")).finding("gpu-fit")


def checkpoint(tmp_path: Path, config: Any = None, *, name: str = "ckpt") -> Path:
    ckpt = tmp_path / name
    ckpt.mkdir()
    if config is not None:
        (ckpt / "config.json").write_text(json.dumps(config))
    return ckpt


def shard_bytes(tensors: int = 2) -> bytes:
    header = {f"model.layers.{i}.mlp.down_proj.weight": {"dtype": "BF16", "shape": [4, 4],
                                                         "data_offsets": [32 * i, 32 * (i + 1)]}
              for i in range(tensors)}
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * 32 * tensors


# --- in a fresh process, bounded -----------------------------------------------------------------------------

RUN_CHECK = textwrap.dedent("""
    import json, sys
    from tests.preflight.conftest import healthy_facts
    from rigctl.preflight.registry import run_preflight
    from rigctl.recipe.load import load
    ckpt = sys.argv[1]
    recipe = load("qwen3-8b-vllm", sets=(f"checkpoint.path={ckpt}", "checkpoint.shards=1",
                  f'container.volumes=[{{"host":"{ckpt}","container":"/models/q"}}]')).recipe
    f = run_preflight(recipe, healthy_facts(recipe, "pro6000-single")).finding("gpu-fit")
    print(json.dumps({"severity": str(f.severity), "message": f.message, "figures": f.figures}))
""")


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CEILING, MEMORY_CEILING))


def bounded_check(ckpt: Path, tmp_path: Path, timeout: float = 60) -> dict[str, Any]:
    """gpu-fit on ``ckpt`` in a fresh process under ``MEMORY_CEILING`` and ``timeout``: its finding."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg-cache"), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", RUN_CHECK, str(ckpt)], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=timeout, check=False, preexec_fn=_limit_memory)
    assert done.returncode == 0, done.stderr[-3000:]
    got: dict[str, Any] = json.loads(done.stdout)
    assert got["severity"] != "error", got["message"]
    return got


def test_a_sane_checkpoint_passes_under_the_same_limit(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, QWEN3_8B)
    (ckpt / SHARD).write_bytes(shard_bytes())
    got = bounded_check(ckpt, tmp_path)
    assert "config.json in" in got["figures"]["basis"]["shape"]


HUGE = 10**100
LAYER_PATTERNS = {
    "full_attention_interval": {"full_attention_interval": 4},
    "sliding_window_pattern": {"sliding_window_pattern": 6, "sliding_window": 1024},
    "plain": {},
    "sliding_every_layer": {"sliding_window": 4096},
    "hybrid_override_pattern": {"hybrid_override_pattern": "M*-" * 1_000_000, "mamba_num_heads": 64},
    "layer_types": {"layer_types": ["full_attention", "linear_attention"] * 75_000},
    "kda_layers": {"linear_attn_config": {"kda_layers": list(range(300_000)), "num_heads": 32, "head_dim": 128}},
}


@pytest.mark.parametrize("pattern", LAYER_PATTERNS, ids=list(LAYER_PATTERNS))
@pytest.mark.parametrize("layers", [HUGE, 10**7, 2**63])
def test_a_huge_layer_count_is_a_note_not_a_list_per_layer(tmp_path: Path, pattern: str, layers: int) -> None:
    ckpt = checkpoint(tmp_path, {**QWEN3_8B, "num_hidden_layers": layers, **LAYER_PATTERNS[pattern]})
    got = bounded_check(ckpt, tmp_path)
    assert "num_hidden_layers" in got["message"] and "out of range" in got["message"]
    assert "the recipe's checkpoint.config" in got["figures"]["basis"]["shape"]  # planned from the recipe's block


@pytest.mark.parametrize("pattern", ["hybrid_override_pattern", "layer_types", "kda_layers"])
def test_a_huge_layer_list_with_a_sane_count_is_bounded(tmp_path: Path, pattern: str) -> None:
    ckpt = checkpoint(tmp_path, {**QWEN3_8B, **LAYER_PATTERNS[pattern]})
    got = bounded_check(ckpt, tmp_path)
    assert "config.json" in got["message"]


# --- config.json values, in this process ---------------------------------------------------------------------

OUT_OF_RANGE = [
    ("hidden_size", 10**400), ("head_dim", 10**400), ("intermediate_size", 10**400), ("vocab_size", 10**400),
    ("num_key_value_heads", 10**400), ("num_attention_heads", 10**400), ("moe_intermediate_size", 10**30),
    ("num_experts_per_tok", 10**30), ("sliding_window", 10**400), ("head_dim", -128), ("num_attention_heads", 0),
    ("num_key_value_heads", True), ("head_dim", 128.0), ("num_hidden_layers", "36"), ("num_hidden_layers", 0),
    ("num_hidden_layers", -1), ("hidden_size", [4096]), ("full_attention_interval", 0),
]


@pytest.mark.parametrize(("key", "value"), OUT_OF_RANGE, ids=[f"{k}={str(v)[:12]}" for k, v in OUT_OF_RANGE])
def test_an_out_of_range_value_is_a_note(tmp_path: Path, key: str, value: Any) -> None:
    f = gpu_fit(checkpoint(tmp_path, {**QWEN3_8B, key: value}))
    assert f.severity is not Severity.ERROR, f.message
    assert f"config.json: {key}" in f.message and len(f.message) < 4000
    assert str(10**400) not in f.message


@pytest.mark.parametrize(("key", "value"), OUT_OF_RANGE, ids=[f"{k}={str(v)[:12]}" for k, v in OUT_OF_RANGE])
def test_shape_from_config_never_raises(key: str, value: Any) -> None:
    shape = shape_from_config({**QWEN3_8B, key: value}, "config.json")
    assert any(key in note for note in shape.notes)


def test_zero_heads_do_not_plan_a_kv_cache_of_nothing(tmp_path: Path) -> None:
    f = gpu_fit(checkpoint(tmp_path, {**QWEN3_8B, "num_attention_heads": 0, "num_key_value_heads": 0,
                                      "head_dim": None}))
    assert f.severity is not Severity.ERROR and "config.json" in f.message
    assert f.figures is not None and f.figures["kv_bytes_per_sequence"] > 0  # from the recipe's block


def test_a_real_gpt2_config_plans(tmp_path: Path) -> None:
    shape = shape_from_config(GPT2, "gpt2")
    assert (shape.layers, shape.full_layers, shape.kv_heads, shape.head_dim, shape.hidden_size) == (12, 12, 12, 64, 768)
    f = gpu_fit(checkpoint(tmp_path, GPT2))
    assert f.severity is Severity.OK, f.message
    assert f.figures is not None and f.figures["kv_bytes_per_sequence"] == 2 * 12 * 12 * 64 * 2 * 32768


def test_a_model_without_a_kv_cache_does_not_crash_the_check(tmp_path: Path) -> None:
    f = gpu_fit(checkpoint(tmp_path, {**QWEN3_8B, "layer_types": ["linear_attention"] * 36}))
    assert f.severity is not Severity.ERROR, f.message


@pytest.mark.parametrize(("pattern", "want"), [
    ({"full_attention_interval": 4}, (12, 0, 36)),
    ({"full_attention_interval": 5}, (9, 0, 39)),  # 48 // 5: layers 5, 10, ... 45
    ({"sliding_window_pattern": 6, "sliding_window": 1024}, (8, 40, 0)),
    ({"layer_types": ["sliding_attention"] * 47 + ["full_attention"]}, (1, 47, 0)),
    ({"hybrid_override_pattern": "M-M*" * 12, "mamba_num_heads": 8}, (12, 0, 24)),
])
def test_layer_kinds_are_counted_as_before(pattern: dict[str, Any], want: tuple[int, int, int]) -> None:
    shape = shape_from_config({**QWEN3_8B, "num_hidden_layers": 48, **pattern}, "c")
    assert (shape.full_layers, shape.sliding_layers, shape.linear_layers) == want and not shape.notes


# --- shards: regular files inside the checkpoint only ----------------------------------------------------------

SECRET = b"SECRET!!root's own bytes"
SECRET_NUMBER = int.from_bytes(SECRET[:8], "little")


def _no_secret(text: str) -> None:
    assert f"{SECRET_NUMBER:,}" not in text and str(SECRET_NUMBER) not in text and "SECRET" not in text


@pytest.mark.parametrize("target", ["outside-file", "proc-mem", "outside-fifo", "dev-zero", "dir"])
def test_a_shard_that_is_a_link_to_elsewhere_is_refused(tmp_path: Path, target: str) -> None:
    ckpt = checkpoint(tmp_path, QWEN3_8B)
    outside = tmp_path / "outside"
    if target == "outside-file":
        outside.write_bytes(SECRET)
    elif target == "outside-fifo":
        os.mkfifo(outside)
    elif target == "dir":
        outside.mkdir()
    where = {"proc-mem": "/proc/self/mem", "dev-zero": "/dev/zero"}.get(target, str(outside))
    (ckpt / SHARD).symlink_to(where)
    got = read_checkpoint(str(ckpt), [SHARD])
    assert got.shards_read == 0 and len(got.problems) == 1 and "symbolic link" in got.problems[0]
    _no_secret(got.problems[0])
    f = gpu_fit(ckpt)
    assert f.severity is not Severity.ERROR, f.message
    _no_secret(json.dumps(f.figures) + f.message)


@pytest.mark.parametrize("kind", ["fifo", "dir", "socket"])
def test_a_shard_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path: Path, kind: str) -> None:
    ckpt = checkpoint(tmp_path, QWEN3_8B)
    if kind == "fifo":
        os.mkfifo(ckpt / SHARD)
    elif kind == "dir":
        (ckpt / SHARD).mkdir()
    else:
        import socket

        with socket.socket(socket.AF_UNIX) as s:
            s.bind(str(ckpt / SHARD))
    got = read_checkpoint(str(ckpt), [SHARD])
    assert got.shards_read == 0 and not got.missing and "not a regular file" in got.problems[0]


def test_a_config_json_link_to_elsewhere_is_refused(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path)
    (tmp_path / "other.json").write_text(json.dumps({**QWEN3_8B, "num_hidden_layers": 7}))
    (ckpt / "config.json").symlink_to(tmp_path / "other.json")
    got = read_checkpoint(str(ckpt), [])
    assert got.config is None and "symbolic link" in got.problems[0]


def test_a_hub_cache_snapshot_still_reads_through_its_blob_links(tmp_path: Path) -> None:
    repo = tmp_path / "models--Qwen--Qwen3-8B"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / ("a" * 40)
    snap.mkdir(parents=True)
    for name, data in ((SHARD, shard_bytes(3)), ("config.json", json.dumps(QWEN3_8B).encode())):
        blob = f"{len(name):064x}"
        (repo / "blobs" / blob).write_bytes(data)
        (snap / name).symlink_to(f"../../blobs/{blob}")
    got = read_checkpoint(str(snap), [SHARD])
    assert got.shards_read == 1 and got.weights.tensors == 3 and not got.problems
    assert got.config is not None and got.config["num_hidden_layers"] == 36


def test_a_hub_shaped_link_to_a_non_regular_blob_is_refused(tmp_path: Path) -> None:
    repo = tmp_path / "models--x--y"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / "main"
    snap.mkdir(parents=True)
    blob = "b" * 64
    (repo / "blobs" / blob).symlink_to("/proc/self/mem")  # a link in blobs/ is not followed either
    (snap / SHARD).symlink_to(f"../../blobs/{blob}")
    got = read_checkpoint(str(snap), [SHARD])
    assert got.shards_read == 0 and "symbolic link" in got.problems[0]


# --- headers: bounded length, bounded memory, never their bytes shown ------------------------------------------

def test_a_header_length_is_not_shown(tmp_path: Path) -> None:
    ckpt = checkpoint(tmp_path, QWEN3_8B)
    (ckpt / SHARD).write_bytes(SECRET)
    got = read_checkpoint(str(ckpt), [SHARD])
    assert len(got.problems) == 1 and "header length" in got.problems[0]
    _no_secret(got.problems[0])


def test_the_header_cap_is_what_real_checkpoints_need() -> None:
    # a GLM-5 NVFP4 shard's header is 100,000 bytes for 852 tensors (huggingface/huggingface_hub#4602); 16 MiB
    # holds ~140,000 such entries, a whole MoE checkpoint's worth in one file
    assert HEADER_LIMIT <= 16 << 20


def _write_many_entries(f: BinaryIO, size: int) -> None:
    """Distinct empty entries: the most Python objects per byte msgspec's typed decode can be made to build."""
    n = (size - 2) // 14  # '"%07x":{}' and a comma
    f.write(b"{")
    for start in range(0, n, 100_000):
        f.write(b",".join(b'"%07x":{}' % i for i in range(start, min(n, start + 100_000))))
        f.write(b"," if start + 100_000 < n else b"")
    f.write(b"}")


def _write_repeated(f: BinaryIO, size: int, head: bytes, item: bytes, tail: bytes) -> None:
    f.write(head + item * ((size - len(head) - len(tail)) // len(item)) + tail)


HOSTILE: dict[str, Callable[[BinaryIO, int], None]] = {
    "empty-entries": _write_many_entries,
    "small-lists": lambda f, size: _write_repeated(f, size, b'{"t":{"x":[', b"[],", b"[]]}}"),
    "short-strings": lambda f, size: _write_repeated(f, size, b'{"t":{"x":[', b'"ab",', b'"ab"]}}'),
    "deep": lambda f, size: _write_repeated(f, size, b"", b"[", b""),
}
SIZES = [min(HEADER_LIMIT, 16 << 20) - 64, 48 << 20]  # at the cap, and beyond it


@pytest.mark.parametrize("shape", HOSTILE, ids=list(HOSTILE))
@pytest.mark.parametrize("size", SIZES, ids=["at-the-cap", "beyond-it"])
def test_a_hostile_header_costs_bounded_memory(tmp_path: Path, shape: str, size: int) -> None:
    ckpt = checkpoint(tmp_path, QWEN3_8B)
    with (ckpt / SHARD).open("wb") as f:
        f.write(b"\0" * 8)
        HOSTILE[shape](f, size)
        length = f.tell() - 8
        f.write(b"\0" * 64)
        f.seek(0)
        f.write(struct.pack("<Q", length))
    got = bounded_check(ckpt, tmp_path, timeout=120)
    assert "safetensors headers" not in got["figures"]["basis"]["weights"]  # refused: the recipe's size
    assert SHARD in json.dumps(got["figures"]["basis"].get("checkpoint_problems"))


# --- the cache remembers a refusal --------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [struct.pack("<Q", 2**40), struct.pack("<Q", 12) + b"not json at all",
                                 struct.pack("<Q", 4096) + b"{}"])
def test_a_refused_header_is_not_read_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bad: bytes) -> None:
    ckpt = checkpoint(tmp_path, QWEN3_8B)
    (ckpt / SHARD).write_bytes(bad)
    cache_file = tmp_path / "cache.json"
    first = read_checkpoint(str(ckpt), [SHARD], cache=SummaryCache(cache_file))
    assert first.shards_read == 0 and len(first.problems) == 1
    reads: list[int] = []
    real = os.pread
    shard = (ckpt / SHARD).stat()

    def counted(fd: int, n: int, offset: int) -> bytes:
        if os.fstat(fd).st_ino == shard.st_ino:
            reads.append(n)
        return real(fd, n, offset)

    monkeypatch.setattr(safetensors.os, "pread", counted)
    again = read_checkpoint(str(ckpt), [SHARD], cache=SummaryCache(cache_file))
    assert again.problems == first.problems and not reads
    monkeypatch.undo()
    os.utime(ckpt / SHARD)  # changed: read (and refused) again
    third = read_checkpoint(str(ckpt), [SHARD], cache=SummaryCache(cache_file))
    assert third.problems == first.problems


# --- engine args: a fraction is a fraction ----------------------------------------------------------------------

BAD_FRACTIONS = ["10", "1.5", "0", "-0.5", "nan", "inf", "1e400", "90%"]


@pytest.mark.parametrize("value", BAD_FRACTIONS)
def test_gpu_memory_utilization_outside_0_1_is_refused(tmp_path: Path, value: str) -> None:
    ckpt = checkpoint(tmp_path, QWEN3_8B)
    f = gpu_fit(ckpt, f'engine.args=["--gpu-memory-utilization","{value}"]')
    assert f.severity is Severity.FAIL, f.message
    assert "--gpu-memory-utilization" in f.message and "(0, 1]" in f.message
    recipe = recipe_at(ckpt, f'engine.args=["--gpu-memory-utilization={value}"]')
    settings = engine_settings(recipe, 96 << 30)
    assert 0 < settings.utilization <= 1 and settings.problem is not None
    facts = healthy_facts(recipe, "pro6000-single")
    for use in planned_vs_used(recipe, ["0"], facts.gpu.devices, set()):
        assert use.planned_bytes is None or use.total_bytes is None or use.planned_bytes <= 2 * use.total_bytes


def test_a_fraction_in_range_is_taken(tmp_path: Path) -> None:
    recipe = recipe_at(checkpoint(tmp_path), 'engine.args=["--gpu-memory-utilization","1"]')
    settings = engine_settings(recipe, 96 << 30)
    assert settings.utilization == 1.0 and settings.problem is None


@pytest.mark.parametrize(("flag", "value"), [("--max-num-batched-tokens", "9" * 5000), ("--max-num-seqs", "²"),
                                             ("--max-num-seqs", "0"), ("--max-num-batched-tokens", "10" * 20)])
def test_other_engine_numbers_are_bounded(tmp_path: Path, flag: str, value: str) -> None:
    f = gpu_fit(checkpoint(tmp_path, QWEN3_8B), f'engine.args=["{flag}","{value}"]')
    assert f.severity is not Severity.ERROR, f.message
