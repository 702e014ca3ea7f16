"""The engine cache on the real chain (#36): the test engine compiles for FAKE_VLLM_COMPILE_SECONDS unless its
artifact is in $VLLM_CACHE_ROOT, which the unit mounts from the manager's cache directory. The first boot is
cold; `up` after `down` (not --remove) and systemd's restart after a kill are warm and measurably faster;
`status` shows both times; `down --remove` takes the cache with it."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.deploy.conftest import Rig
from tests.deploy.test_chain_canary import _engine_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

COMPILE_S = 5.0


def _cache_root(rig: Rig) -> Path:
    return Path(rig.env.get("XDG_CACHE_HOME") or Path(rig.env["HOME"]) / ".cache") / "rigctl" / "engine-cache"


def _row(rig: Rig, unit: str) -> dict[str, Any]:
    _code, doc = rig.run("status", "--user")
    return next(s for s in doc["services"] if s["unit"] == unit)


def _ready_within(port: int, limit_s: float) -> float:
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1.0).status_code == 200:
                return time.monotonic() - start
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"not serving within {limit_s} s")


def test_a_warm_cache_makes_every_later_boot_faster_and_down_remove_takes_it(rig: Rig) -> None:
    name, unit, port = "ec-warm", "rigctl-ec-warm.service", 18461
    engine, _knob = _engine_dir(rig)  # this checkout's test engine, mounted over the image's copy
    path = rig.recipe(name, port, env={"FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_COMPILE_SECONDS": str(COMPILE_S)},
                      container={"publish": {"port": port}, "volumes": [
                          {"host": str(rig.ckpt), "container": "/models/test"},
                          {"host": str(engine), "container": "/opt/rigctl-test-engine"}]})
    code, doc = rig.run("up", str(path), "--user")
    assert code == 0, doc
    row = _row(rig, unit)
    cache = row["engine_cache"]
    assert cache is not None and cache["dir"].startswith(str(_cache_root(rig))), cache
    shutil.rmtree(cache["dir"], ignore_errors=True)  # this image's cache may be warm from an earlier run

    # cold: the compile step runs and leaves its artifact
    code, doc = rig.run("down", name, "--user")
    assert code == 0, doc
    code, doc = rig.run("up", str(path), "--user")
    assert code == 0, doc
    row = _row(rig, unit)
    cold = row["engine_cache"]["boots"]["cold"]["total_s"]
    assert cold >= COMPILE_S, row["engine_cache"]
    assert row["engine_cache"]["files"] >= 1 and row["engine_cache"]["bytes"] > 0
    assert any(p["phase"] == "compiling" for p in row["last_boot"]["phases"]), row["last_boot"]

    # up after down (not --remove): warm
    code, doc = rig.run("down", name, "--user")
    assert code == 0 and Path(cache["dir"]).is_dir(), doc
    code, doc = rig.run("up", str(path), "--user")
    assert code == 0, doc
    boots = _row(rig, unit)["engine_cache"]["boots"]
    assert boots["warm"]["total_s"] < cold - COMPILE_S / 2, boots

    # a restart after a kill (systemd's, not rigctl's): warm too
    rig.podman("kill", "--", f"rigctl-{name}")
    time.sleep(1.5)  # the old engine's port closes; RestartSec is 1 s on the test bed
    assert _ready_within(port, 60) < cold - COMPILE_S / 2

    # --remove takes the cache (no other deployment mounts it)
    code, doc = rig.run("down", name, "--user", "--remove")
    assert code == 0 and cache["dir"] in doc["removed"] and not Path(cache["dir"]).exists(), doc


def test_a_compile_that_prints_nothing_but_works_is_no_stall(rig: Rig) -> None:
    """Silence past the stall budget while the engine's processes spend CPU (a compile, an autotune) is work,
    not a stall; the same silence asleep is one (test_chain.test_stall_reported)."""
    name, port = "ec-busy", 18462
    engine, _knob = _engine_dir(rig)
    path = rig.recipe(name, port, env={"FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_COMPILE_SECONDS": "14",
                                       "FAKE_VLLM_COMPILE_BUSY": "1"},
                      service={"stall_budget_s": 5, "warmup_budget_s": 90},
                      container={"publish": {"port": port}, "engine_cache": False, "volumes": [
                          {"host": str(rig.ckpt), "container": "/models/test"},
                          {"host": str(engine), "container": "/opt/rigctl-test-engine"}]})
    code, doc = rig.run("up", str(path), "--user")
    assert code == 0 and doc["wait"]["status"] == "ready", doc.get("wait") or doc
    assert doc["wait"]["elapsed_s"] >= 14
    rig.run("down", name, "--user", "--remove")
