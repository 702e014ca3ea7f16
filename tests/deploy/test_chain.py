"""The whole deployment chain, for real: render -> quadlet generator -> systemd --user -> podman (4.3, or 5.4
on the podman 5 testbed) -> the test engine in a locally built image, pinned by digest. Every wait is
bounded."""

from __future__ import annotations

import time

import httpx
import pytest
from tests.deploy.conftest import Rig, shared_prefix_load

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _status_of(rig: Rig, unit: str) -> dict[str, object]:
    """``unit``'s row of `status`; the exit code is 7 (SERVICE_DOWN) exactly when some rigctl unit of this
    manager does not serve (another test's may be among them), and that unit is then in ``failing``."""
    code, doc = rig.run("status", "--user")
    assert code in (0, 7), doc
    assert (code == 7) == bool(doc["failing"]) and doc["ok"] is (code == 0), doc
    row = next((s for s in doc["services"] if s["unit"] == unit), {})
    assert (unit in doc["failing"]) == (row.get("verdict") in ("not-serving", "restarting", "failed", "down")), doc
    return row


def test_happy_path_up_status_idempotent_down(rig: Rig) -> None:
    path = rig.recipe("rt-happy", 18201, env={"FAKE_VLLM_WARMUP_SECONDS": "2"})
    code, doc = rig.run("up", str(path), "--user")
    assert code == 0, doc
    assert doc["ok"] is True and doc["action"] == "installed"
    assert doc["wait"]["status"] == "ready"
    assert {c["id"]: c["status"] for c in doc["checks"]["results"]}["smoke"] == "pass"
    assert doc["endpoint"] == "http://127.0.0.1:18201"
    assert httpx.get("http://127.0.0.1:18201/v1/models", timeout=5).json()["data"][0]["id"] == "test-model"

    # The same recipe again on a healthy deployment: nothing changes, the engine is not restarted.
    pid_before = rig.systemctl("show", "-p", "MainPID", "--value", "rigctl-rt-happy.service").strip()
    code, again = rig.run("up", str(path), "--user")
    assert code == 0, again
    assert again["action"] == "unchanged"
    assert rig.systemctl("show", "-p", "MainPID", "--value", "rigctl-rt-happy.service").strip() == pid_before

    row = _status_of(rig, "rigctl-rt-happy.service")
    assert row["health"] == "ready" and row["active"] == "active"
    assert row["restart_policy"] == "always" and row["restarts"] == 0
    assert row["model"] == "test-model" and row["endpoint"] == "http://127.0.0.1:18201"
    assert str(row["image_digest"]).startswith("sha256:") and row["image_digest"] in rig.image
    assert row["gpu_memory_mib"] is None  # no NVML here: "n/a", not an error

    # verify by recipe reaches the installed deployment, even when the recipe file has moved on since
    edited = rig.recipe("rt-happy", 18299, env={"FAKE_VLLM_WARMUP_SECONDS": "2"})
    code, verified = rig.run("verify", str(edited), "--checks", "health,models,smoke,repetition")
    assert code == 0, verified
    assert verified["endpoint"]["url"] == "http://127.0.0.1:18201"

    code, logs = rig.run("logs", "rt-happy", "--user")
    assert code == 0 and any("Starting vLLM API server" in ln["text"] for ln in logs["lines"])

    code, down = rig.run("down", "rt-happy", "--user")
    assert code == 0 and down["stopped"] and down["container_gone"], down
    code, again = rig.run("down", "rt-happy", "--user")  # idempotent while its record is kept
    assert code == 0 and "already stopped" in again["message"], again
    code, down = rig.run("down", "rt-happy", "--user", "--remove")
    assert code == 0, down
    assert down["stopped"] and down["removed"]
    assert down["gpus_released"] is None and down["gpu_ids"] == []
    assert _status_of(rig, "rigctl-rt-happy.service") == {}
    # removed, the name is no deployment here any more: like `systemctl stop` of a unit not loaded, not found (5);
    # a `down` again without --remove (the record kept) is still "nothing to do", exit 0
    code, twice = rig.run("down", "rt-happy", "--user", "--remove")
    assert code == 5 and twice["error"]["code"] == "deployment-not-found", twice


def test_changed_recipe_replaces_unit_and_restarts(rig: Rig) -> None:
    path = rig.recipe("rt-change", 18202, env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    path = rig.recipe("rt-change", 18202, env={"FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_MAX_MODEL_LEN": "4096"})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    assert doc["action"] == "replaced" and doc["wait"]["status"] == "ready"
    unit = rig.systemctl("cat", "rigctl-rt-change.service")
    assert "FAKE_VLLM_MAX_MODEL_LEN=4096" in unit


def test_death_during_warmup_reported_with_signature(rig: Rig) -> None:
    path = rig.recipe("rt-die", 18203, env={
        "FAKE_VLLM_WARMUP_SECONDS": "8", "FAKE_VLLM_DIE_AFTER": "1.5", "FAKE_VLLM_EXIT_CODE": "0",
        "FAKE_VLLM_DIE_MESSAGE": "ValueError: ReplaySSM prefill source/state row count mismatch",
    })
    code, doc = rig.run("up", str(path), "--user")
    assert code == 4, doc
    assert doc["ok"] is False and doc["wait"]["status"] == "died"
    assert doc["wait"]["exit_status"] == 0  # a clean exit during warmup is still a death
    assert any("ReplaySSM" in line for line in doc["wait"]["last_lines"])
    assert [s["id"] for s in doc["signatures"]] == ["replayssm-row-mismatch"]
    assert doc["signatures"][0]["remedy"].startswith("set USE_REPLAYSSM=0")
    assert doc["stopped_after_failure"] is True
    # The dead container is gone (--rm), but rigctl kept its last words for `logs` and `status`.
    code, logs = rig.run("logs", "rt-die", "--user")
    assert code == 0 and logs["signatures"] and logs["signatures"][0]["id"] == "replayssm-row-mismatch"
    row = _status_of(rig, "rigctl-rt-die.service")
    assert row["last_failure"]["signatures"] == ["replayssm-row-mismatch"]
    assert row["verdict"] == "down"  # a model that never came up is not "ok": status exits 7 for it


def test_stall_reported(rig: Rig) -> None:
    # The test engine prints nothing between its first and second boot phase for most of 60 s.
    path = rig.recipe("rt-stall", 18204, env={"FAKE_VLLM_WARMUP_SECONDS": "120"},
                      service={"stall_budget_s": 5, "warmup_budget_s": 90})
    code, doc = rig.run("up", str(path), "--user")
    assert code == 4, doc
    assert doc["wait"]["status"] == "stalled"
    assert "stall budget 5 s" in doc["wait"]["detail"]


def test_exit_zero_under_load_is_restarted_by_systemd(rig: Rig) -> None:
    path = rig.recipe("rt-crash", 18205, env={
        "FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_MODE": "crash-under-load", "FAKE_VLLM_CRASH_CONCURRENCY": "6",
        "FAKE_VLLM_CRASH_EXIT_CODE": "0", "FAKE_VLLM_TOKEN_DELAY": "0.05",
    })
    code, doc = rig.run("up", str(path), "--user")
    assert code == 0, doc
    shared_prefix_load("http://127.0.0.1:18205", 8)

    deadline = time.monotonic() + 90
    row: dict[str, object] = {}
    while time.monotonic() < deadline:
        row = _status_of(rig, "rigctl-rt-crash.service")
        if isinstance(row.get("restarts"), int) and int(str(row["restarts"])) >= 1 and row["health"] == "ready":
            break
        time.sleep(1)
    assert int(str(row["restarts"])) >= 1, row  # exit 0 did not leave it down: Restart=always brought it back
    assert row["restart_policy"] == "always"
    assert row["health"] == "ready", row
    assert row["last_exit"]["said"] == "exit 0", row  # status says how the crashed engine ended

    # The crashed container was removed (--rm), but its output is in the unit's engine log: `logs` shows
    # the crash and the restart's output, now from the running container and, after `down`, from the log.
    code, logs = rig.run("logs", "rt-crash", "--user")
    assert code == 0 and [s["id"] for s in logs["signatures"]][:1] == ["replayssm-row-mismatch"], logs
    assert [ln["source"] for ln in logs["lines"] if "ReplaySSM" in ln["text"]][:1] == ["podman"]
    code, doc = rig.run("down", "rt-crash", "--user")
    assert code == 0, doc
    code, logs = rig.run("logs", "rt-crash", "--user")
    assert code == 0, logs
    crash = [ln for ln in logs["lines"] if "ReplaySSM" in ln["text"]]
    assert crash and {ln["source"] for ln in crash} == {"engine-log"}, logs["lines"][-5:]
    assert logs["signatures"][0]["id"] == "replayssm-row-mismatch"


def test_rendered_for_the_testbeds_podman_runs(rig: Rig) -> None:
    path = rig.recipe("rt-podman43", 18206, env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    generated = rig.systemctl("cat", "rigctl-rt-podman43.service")
    if rig.flavour == "podman5":
        # what quadlets/ holds: systemd hears from podman once the engine is healthy; no cid clean-up needed
        assert "--sdnotify=healthy" in generated and "--health-on-failure kill" in generated
        assert "rm -f %t/%N.cid" not in generated
    else:
        assert "--sdnotify=healthy" not in generated  # podman 4.3.1 would refuse it (exit 125)
        assert "rm -f %t/%N.cid" in generated
    assert "Notify=healthy" not in (rig.workdir / "rt-podman43.yaml").read_text()
    # A second start of the same unit must not trip over podman 4.3's stale %t/%N.cid.
    rig.systemctl("restart", "rigctl-rt-podman43.service")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _status_of(rig, "rigctl-rt-podman43.service").get("health") != "ready":
        time.sleep(0.5)
    assert _status_of(rig, "rigctl-rt-podman43.service")["health"] == "ready"


def test_ipc_host_with_shm_size_refused_before_boot(rig: Rig) -> None:
    path = rig.recipe("rt-ipc", 18207, container={"ipc": "host", "shm_size": "1g"})
    code, doc = rig.run("up", str(path), "--user")
    assert code == 3, doc
    assert "cannot set shmsize when running in the host IPC Namespace" in doc["error"]["message"]
    assert rig.systemctl("show", "-p", "LoadState", "--value", "rigctl-rt-ipc.service").strip() == "not-found"


def test_ctrl_c_during_warmup_says_what_is_installed_and_up_again_attaches(rig: Rig) -> None:
    import signal
    import subprocess
    import sys

    path = rig.recipe("rt-int", 18208, env={"FAKE_VLLM_WARMUP_SECONDS": "12"})
    # Python leaves SIGINT ignored when its parent ignored it (a background job); make Ctrl-C real.
    boot = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            f"sys.argv = ['rigctl', 'up', {str(path)!r}, '--user']; runpy.run_module('rigctl', run_name='__main__')")
    proc = subprocess.Popen([sys.executable, "-c", boot], env=rig.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    # The engine is warming up once its container runs. (Not "the unit is active": with podman 5's
    # Notify=healthy the unit stays activating until warmup ends, and up would be done by then.)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not rig.container_running("rigctl-rt-int"):
        time.sleep(0.2)
    assert proc.poll() is None, "up finished before the engine was seen warming up"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "fully installed" in err and "keeps warming it up" in err
    # up again on the same, still-warming unit watches it instead of restarting it
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    assert doc["action"] == "attached" and doc["wait"]["status"] == "ready"
