"""The commands as an operator runs them: JSON contract, exit codes, inventory replay, --checksums."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigctl.host.gather import gather_facts
from rigctl.preflight.finding import Severity
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.load import load

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def rigctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **(env or {})}, check=False)


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    return {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def test_preflight_json_contract_on_the_captured_h200(state: dict[str, str]) -> None:
    done = rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json"), "--json", env=state)
    data = json.loads(done.stdout)
    assert list(data)[:4] == ["rigctl", "command", "ok", "recipe"]
    assert data["rigctl"] == "1" and data["command"] == "preflight" and data["ok"] is False
    assert all(set(f) == {"id", "severity", "message", "fix", "figures"} for f in data["findings"])
    by_id = {f["id"]: f for f in data["findings"]}
    for gpu_check in ("gpu-driver", "gpu-count", "gpu-model", "gpu-memory", "gpu-busy", "gpu-mig", "gpu-power"):
        assert by_id[gpu_check]["severity"] == "ok", by_id[gpu_check]
    assert by_id["podman"]["severity"] == "fail"  # the lent H200 has no podman
    assert data["gpus"][0]["name"] == "NVIDIA H200"
    assert done.returncode == 1


def test_preflight_replay_of_the_busy_h200_names_the_process(state: dict[str, str]) -> None:
    done = rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200-busy.json"), "--json", env=state)
    busy = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "gpu-busy")
    assert busy["severity"] == "fail" and "python3" in busy["message"]


def test_glm_on_the_h200_fails_where_it_should(state: dict[str, str]) -> None:
    done = rigctl("preflight", "glm53-flash", "--inventory", str(FIXTURES / "h200.json"), "--json", env=state)
    by_id = {f["id"]: f for f in json.loads(done.stdout)["findings"]}
    assert by_id["gpu-count"]["severity"] == "fail" and "NVIDIA H200" in by_id["gpu-count"]["message"]
    assert by_id["license"]["severity"] == "fail"
    accepted = rigctl("preflight", "glm53-flash", "--inventory", str(FIXTURES / "h200.json"), "--json",
                      "--accept-license", "shapleymcg-license-1.0", env=state)
    by_id = {f["id"]: f for f in json.loads(accepted.stdout)["findings"]}
    assert by_id["license"]["severity"] == "ok"
    assert json.loads(Path(state["XDG_STATE_HOME"], "rigctl", "licenses.json").read_text())["accepted"][0]["id"] \
        == "shapleymcg-license-1.0"


def test_text_table_and_usage_errors(state: dict[str, str]) -> None:
    done = rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json"), env=state)
    assert done.returncode == 1 and "gpu-busy" in done.stdout and "not ready" in done.stdout
    bad = rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json"), "--force", "nope",
                 env=state)
    assert bad.returncode == 2 and "no such check" in bad.stderr


def test_inventory_here_replays(tmp_path: Path, state: dict[str, str]) -> None:
    """The README's round trip on a fresh capture, envelope and all (it gained `version`, which the loader
    refused: exit 3, `version: unknown key`); and with it, a key no capture holds is still refused."""
    done = rigctl("inventory", "--json", env=state)
    assert done.returncode == 0
    path = tmp_path / "inv.json"
    path.write_text(done.stdout)
    captured = json.loads(done.stdout)
    assert captured["command"] == "inventory" and "version" in captured
    again = rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(path), "--json", env=state)
    replayed = json.loads(again.stdout)
    assert again.returncode in (0, 1), again.stderr  # ready or not on this box: judged, not refused
    assert replayed["command"] == "preflight" and "error" not in replayed and replayed["findings"]
    text = rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(path), env=state)
    assert text.returncode in (0, 1) and "unknown key" not in text.stderr, text.stderr

    path.write_text(json.dumps({**captured, "colour": "blue"}))
    refused = rigctl("preflight", "qwen3-8b-vllm", "--inventory", str(path), env=state)
    assert refused.returncode == 3 and "colour: unknown key" in refused.stderr, refused.stderr


def test_checksums_against_a_manifest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    blobs = {f"model-0000{i}-of-00002.safetensors": os.urandom(100_000 + i) for i in (1, 2)}
    for name, data in blobs.items():
        (ckpt / name).write_bytes(data)
    manifest = {name: hashlib.sha256(data).hexdigest() for name, data in blobs.items()}
    sets = [f"checkpoint.path={ckpt}", "checkpoint.shards=2", "checkpoint.approx_bytes=null",
            f"checkpoint.total_bytes={sum(len(b) for b in blobs.values())}",
            f"checkpoint.sha256={json.dumps(manifest)}",
            f"container.volumes=[{{host: {ckpt}, container: /models/x}}]"]
    recipe = load("qwen3-8b-vllm", sets=sets).recipe
    facts = gather_facts([str(ckpt)], include_cache_dirs=False, podman_sockets=[])
    assert run_preflight(recipe, facts).finding("checkpoint").message.endswith("(add --checksums)")
    report = run_preflight(recipe, facts, checksums=True)
    assert report.finding("checkpoint").severity is Severity.OK and report.checksums == manifest
    (ckpt / "model-00002-of-00002.safetensors").write_bytes(os.urandom(100_002))  # same size, new bytes
    bad = run_preflight(recipe, gather_facts([str(ckpt)], include_cache_dirs=False, podman_sockets=[]),
                        checksums=True).finding("checkpoint")
    assert bad.severity is Severity.FAIL and "sha256 mismatch for 1 shard(s): model-00002-of-00002" in bad.message
