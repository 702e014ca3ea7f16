"""What only the podman 5 testbed (`.ci/testbed.sh up --podman 5`: podman 5.4.2, quadlet 5.4, systemd 257) can
show for real: the unit rigctl renders by default (Notify=healthy, HealthOnFailure=kill, CDI AddDevice) run
as written. An unhealthy engine is killed by podman and restarted by systemd; a GPU named by UUID reaches
the container through podman's own CDI resolver (the testbed's spec maps a stand-in device to /dev/null).
NVML is the one thing faked, from a captured box, since there is no GPU here. Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.deploy.conftest import REPO, Rig
from tests.support.on_capture import rigctl_on_capture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BOX = REPO / "tests" / "fixtures" / "inventory" / "boxes" / "pro6000-matched.json"


@pytest.fixture
def rig5(rig: Rig) -> Rig:
    if rig.flavour != "podman5":
        # not a missing component: the podman 4.3 testbed cannot run these, and CI's podman 5 pass does
        pytest.skip("podman 5 only: .ci/testbed.sh up --podman 5, then .ci/testbed.sh exec --podman 5 -- pytest ...")
    return rig


def _props(rig: Rig, unit: str, *names: str) -> dict[str, str]:
    out = rig.systemctl("show", "-p", ",".join(names), unit)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _engine_pid(rig: Rig, container: str) -> int:
    """The engine's pid on this machine: the container's init (RunInit) has it as its child."""
    init = int(rig.podman("container", "inspect", "--format", "{{.State.Pid}}", "--", container).strip())
    children = Path(f"/proc/{init}/task/{init}/children").read_text().split()
    return int(children[0]) if children else init


def test_unhealthy_engine_is_killed_by_podman_and_restarted_by_systemd(rig5: Rig) -> None:
    # The rendered checks run every 30 s, 5 retries: minutes. The recipe's own PodmanArgs (after quadlet's
    # flags, so they win) make them 2 s apart, 2 retries, so the test takes seconds; the keys are the unit's.
    path = rig5.recipe("rt-unhealthy", 18221, env={"FAKE_VLLM_WARMUP_SECONDS": "1"},
                       container={"extra_podman_args": ["--health-interval=2s", "--health-retries=2",
                                                        "--health-timeout=2s"]})
    code, doc = rig5.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    unit = "rigctl-rt-unhealthy.service"
    generated = rig5.systemctl("cat", unit)
    assert "--sdnotify=healthy" in generated and "--health-on-failure kill" in generated
    # Notify=healthy: active once a health check passed. rigctl's own wait may see the engine answer first,
    # so the startup check (every 2 s) is given a bounded moment to agree.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _props(rig5, unit, "ActiveState")["ActiveState"] != "active":
        time.sleep(0.5)
    assert _props(rig5, unit, "ActiveState")["ActiveState"] == "active"
    first = rig5.podman("container", "inspect", "--format", "{{.Id}}", "--", "rigctl-rt-unhealthy").strip()

    os.kill(_engine_pid(rig5, "rigctl-rt-unhealthy"), signal.SIGSTOP)  # alive, but answers nothing
    deadline = time.monotonic() + 120
    props: dict[str, str] = {}
    while time.monotonic() < deadline:
        props = _props(rig5, unit, "ActiveState", "SubState", "NRestarts")
        if int(props.get("NRestarts") or 0) >= 1 and props["ActiveState"] == "active":
            break
        time.sleep(1)
    assert int(props.get("NRestarts") or 0) >= 1, props  # podman killed it; Restart=always brought it back
    assert props["ActiveState"] == "active", props  # and healthy again (Notify=healthy)
    again = rig5.podman("container", "inspect", "--format", "{{.Id}}", "--", "rigctl-rt-unhealthy").strip()
    assert again and again != first  # a new container, not the stopped one resumed
    code, status = rig5.run("status", "--user")
    row = next(s for s in status["services"] if s["unit"] == unit)
    assert row["health"] == "ready" and row["restarts"] >= 1, row


def _capture_with_gpu(tmp: Path, uuid: str) -> Path:
    capture = json.loads(BOX.read_text())
    capture["devices"] = capture["devices"][:1]
    capture["count"] = 1
    capture["devices"][0]["nvmlDeviceGetUUID"] = {"ok": uuid}
    capture.pop("p2p", None)
    capture.pop("topology", None)
    path = tmp / "one-gpu.json"
    path.write_text(json.dumps(capture))
    return path


def _rigctl_with_gpu(rig: Rig, capture: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = rigctl_on_capture(capture, *args, "--json", env=rig.env)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        return done.returncode, {"stdout": done.stdout, "stderr": done.stderr}


def test_gpu_by_uuid_goes_through_podmans_cdi_resolver(rig5: Rig) -> None:
    uuid = rig5.env["RIGCTL_TESTBED_CDI_GPU"]  # the device the testbed's /etc/cdi spec names
    capture = _capture_with_gpu(rig5.workdir, uuid)
    path = rig5.recipe("rt-cdi", 18222, env={"FAKE_VLLM_WARMUP_SECONDS": "1"}, gpus={"count": 1})
    try:
        code, doc = _rigctl_with_gpu(rig5, capture, "up", str(path), "--user", "--gpus", uuid)
        assert code == 0, doc
        assert doc["gpu_ids"] == [uuid]
        assert f"AddDevice=nvidia.com/gpu={uuid}" in Path(doc["unit_files"][0]).read_text()
        assert f"--device nvidia.com/gpu={uuid}" in rig5.systemctl("cat", "rigctl-rt-cdi.service")
        # What the spec's containerEdits put in, seen by the engine itself (its /proc: `podman exec` on this
        # testbed shows another /dev): the stand-in device node and the device's own variable.
        pid = _engine_pid(rig5, "rigctl-rt-cdi")
        assert Path(f"/proc/{pid}/root/dev/nvidia-testbed0").is_char_device()
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"RIGCTL_TESTBED_CDI_DEVICE={uuid}".encode() in environ
    finally:
        _rigctl_with_gpu(rig5, capture, "down", "rt-cdi", "--user", "--remove")


def test_gpu_the_cdi_spec_does_not_name_never_starts(rig5: Rig) -> None:
    uuid = "GPU-0badc0de-0000-4000-8000-000000000000"  # a GPU NVML sees but no CDI spec lists
    capture = _capture_with_gpu(rig5.workdir, uuid)
    path = rig5.recipe("rt-cdi-missing", 18223, env={"FAKE_VLLM_WARMUP_SECONDS": "1"}, gpus={"count": 1})
    try:
        code, doc = _rigctl_with_gpu(rig5, capture, "up", str(path), "--user", "--gpus", uuid)
        assert code != 0, doc
        said = json.dumps(doc)
        assert uuid in said and "cdi" in said.lower(), doc
        assert not rig5.container_running("rigctl-rt-cdi-missing")
    finally:
        _rigctl_with_gpu(rig5, capture, "down", "rt-cdi-missing", "--user", "--remove")


def test_up_keeps_the_engines_memory_receipt_and_the_next_up_plans_from_it(rig5: Rig) -> None:
    """#32 on the real chain: the test engine prints vLLM V1's memory lines while it boots; `up` keeps them
    beside the plan (its JSON, the record, `status`, `metrics`), and the next `up` of the same settings on the
    same GPU plans its KV budget from that receipt."""
    uuid = rig5.env["RIGCTL_TESTBED_CDI_GPU"]
    capture = _capture_with_gpu(rig5.workdir, uuid)
    config = {"model_type": "llama", "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 2,
              "head_dim": 64, "hidden_size": 512, "intermediate_size": 1024, "vocab_size": 32000}
    engine_env = {"FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_WEIGHTS_GIB": "0.0001", "FAKE_VLLM_KV_GIB": "84.5",
                  "FAKE_VLLM_KV_TOKENS": "1384448"}
    path = rig5.recipe("rt-receipt", 18224, env=engine_env, gpus={"count": 1}, checkpoint={"config": config})
    try:
        code, doc = _rigctl_with_gpu(rig5, capture, "up", str(path), "--user", "--gpus", uuid)
        assert code == 0, doc
        first = doc["memory"]
        assert first["receipt"]["kv_available_bytes"] == int(84.5 * 2**30), first
        assert first["receipt"]["kv_tokens"] == 1_384_448 and first["engine"] == "vllm"
        low, high = first["planned"]["kv_budget_low_bytes"], first["planned"]["kv_budget_high_bytes"]
        assert low <= int(84.5 * 2**30) <= high and first["disagrees"] is None, first
        assert first["planned"]["from_receipt"] is False

        code, status = _rigctl_with_gpu(rig5, capture, "status", "--user")
        row = next(s for s in status["services"] if s["unit"] == "rigctl-rt-receipt.service")
        assert row["memory"]["receipt"] == first["receipt"] and row["memory"]["planned"] == first["planned"]
        metrics = subprocess.run([sys.executable, "-m", "rigctl", "metrics", "--user"], env=rig5.env,
                                 capture_output=True, text=True, timeout=60, check=False).stdout
        assert 'rigctl_kv_budget_receipt_bytes{deployment="rt-receipt"' in metrics

        # the same settings (only the container's environment changed): planned from the receipt
        again_path = rig5.recipe("rt-receipt", 18224, env={**engine_env, "FAKE_VLLM_TOKEN_DELAY": "0.002"},
                                 gpus={"count": 1}, checkpoint={"config": config})
        code, again = _rigctl_with_gpu(rig5, capture, "up", str(again_path), "--user", "--gpus", uuid)
        assert code == 0 and again["action"] == "replaced", again
        fit = next(f for f in again["preflight"] if f["id"] == "gpu-fit")
        assert "receipt" in fit["figures"]["basis"], fit
        assert fit["figures"]["kv_budget_bytes_per_gpu"] == int(84.5 * 2**30)
        assert again["memory"]["planned"]["from_receipt"] is True
    finally:
        _rigctl_with_gpu(rig5, capture, "down", "rt-receipt", "--user", "--remove")
