"""The podman-kube flavour, for real: the manifests rigctl renders run under `podman kube play` (podman 4.3,
the test-engine image pinned by digest), answer `rigctl verify --url`, and come down again; the quadlet
.kube unit runs them under `systemd --user` and Restart=always brings the engine back after it exits 0.
Every wait is bounded and everything started is removed in `finally`."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.deploy.conftest import Rig, shared_prefix_load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

QUADLET_VERSION = "5.4"  # the testbed's generator (.ci/get-quadlet.sh)


def _podman(rig: Rig, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], env=rig.env, capture_output=True, text=True, timeout=timeout,
                          check=False)


def _podman_version(rig: Rig) -> str:
    done = _podman(rig, "version", "--format", "{{.Client.Version}}", timeout=30)
    assert done.returncode == 0, done.stderr
    match = re.match(r"(\d+\.\d+)", done.stdout.strip())
    assert match, done.stdout
    return match.group(1)


def _render(rig: Rig, recipe: Path, out: Path) -> dict[str, Any]:
    code, doc = rig.run("render", str(recipe), "--target", "podman-kube", "--podman-version", _podman_version(rig),
                        "--quadlet-version", QUADLET_VERSION, "--scope", "user", "--out", str(out))
    assert code == 0, doc
    assert all(r["ok"] for r in doc["lint"]), doc["lint"]
    return doc


def _wait_serving(url: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(url + "/v1/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    pytest.fail(f"{url} did not serve within {seconds} s")


def _engine_container(rig: Rig, prefix: str) -> str:
    done = _podman(rig, "ps", "--format", "{{.Names}}", timeout=30)
    names = [n for n in done.stdout.split() if n.startswith(prefix) and n.endswith("-engine")]
    assert len(names) == 1, done.stdout
    return names[0]


def _show(rig: Rig, unit: str, prop: str) -> str:
    return rig.systemctl("show", "-p", prop, "--value", unit).strip()


def test_kube_play_runs_verifies_and_comes_down(rig: Rig, tmp_path: Path) -> None:
    recipe = rig.recipe("rk-play", 18471, env={"FAKE_VLLM_WARMUP_SECONDS": "2"})
    doc = _render(rig, recipe, tmp_path / "out")
    manifest = Path(doc["files"][0]["path"])
    assert manifest.name == "rigctl-rk-play.podman.yaml"
    try:
        played = _podman(rig, "kube", "play", str(manifest))
        assert played.returncode == 0, played.stderr
        _wait_serving("http://127.0.0.1:18471", 60)

        ports = _podman(rig, "ps", "--format", "{{.Names}} {{.Ports}}", timeout=30).stdout
        assert "127.0.0.1:18471->8000/tcp" in ports  # loopback only, as the recipe publishes it
        assert "0.0.0.0:18471" not in ports
        engine = _engine_container(rig, "rigctl-rk-play")
        # the liveness probe podman built from the manifest passes (an httpGet probe would need curl)
        health = _podman(rig, "healthcheck", "run", engine, timeout=30)
        assert health.returncode == 0, health.stdout + health.stderr
        inspect = _podman(rig, "inspect", engine, "--format",
                          "{{.HostConfig.RestartPolicy.Name}} {{.Config.StopTimeout}}", timeout=30)
        assert inspect.stdout.split() == ["on-failure", "10"]  # restartPolicy; the recipe's stop timeout

        code, verified = rig.run("verify", "--url", "http://127.0.0.1:18471/v1", "--model", "test-model",
                                 "--checks", "health,models,smoke,repetition", timeout=120)
        assert code == 0, verified
        assert {c["id"]: c["status"] for c in verified["checks"]}["smoke"] == "pass"
    finally:
        down = _podman(rig, "kube", "down", str(manifest))
    assert down.returncode == 0, down.stderr
    assert "rigctl-rk-play" not in _podman(rig, "ps", "-a", "--format", "{{.Names}}", timeout=30).stdout
    with pytest.raises(httpx.HTTPError):
        httpx.get("http://127.0.0.1:18471/v1/models", timeout=2)


def test_kube_unit_under_systemd_restarts_after_exit_zero(rig: Rig) -> None:
    recipe = rig.recipe("rk-unit", 18472, env={
        "FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_MODE": "crash-under-load", "FAKE_VLLM_CRASH_CONCURRENCY": "6",
        "FAKE_VLLM_CRASH_EXIT_CODE": "0", "FAKE_VLLM_TOKEN_DELAY": "0.05",
    })
    unit = "rigctl-rk-unit.service"
    config_home = Path(rig.env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    quadlet_dir = config_home / "containers" / "systemd"  # where the testbed's user generator looks
    doc = _render(rig, recipe, quadlet_dir)
    installed = [Path(f["path"]) for f in doc["files"]]
    assert [p.name for p in installed] == ["rigctl-rk-unit.podman.yaml", "rigctl-rk-unit.kube"]
    assert all(Path(f["install_path"]).parent == quadlet_dir for f in doc["files"])
    assert doc["service"] == unit
    try:
        rig.systemctl("daemon-reload")
        assert "podman kube play" in rig.systemctl("cat", unit)
        rig.systemctl("start", unit)
        assert _show(rig, unit, "ActiveState") == "active", rig.systemctl("status", unit)
        _wait_serving("http://127.0.0.1:18472", 60)
        assert _show(rig, unit, "NRestarts") == "0"

        # the engine dies under shared-prefix load and exits 0, as vLLM's API server does
        shared_prefix_load("http://127.0.0.1:18472", 8)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and int(_show(rig, unit, "NRestarts") or 0) < 1:
            time.sleep(0.5)
        assert int(_show(rig, unit, "NRestarts")) >= 1, rig.systemctl("status", unit)
        _wait_serving("http://127.0.0.1:18472", 60)  # serving again
        assert _show(rig, unit, "ActiveState") == "active"
    finally:
        rig.systemctl("stop", unit)
        _podman(rig, "kube", "down", str(installed[0]))  # ExecStopPost did; should it not have, here
        for path in installed:
            path.unlink(missing_ok=True)
        rig.systemctl("daemon-reload")
    assert _show(rig, unit, "LoadState") == "not-found"
    assert "rigctl-rk-unit" not in _podman(rig, "ps", "-a", "--format", "{{.Names}}", timeout=30).stdout
