"""The canary on the real chain (podman 4.3, quadlet, `systemd --user`, the test engine): a healthy engine keeps
passing; the same running engine switched to word salad (the test engine's --mode-file, read before each
answer) fails the first run after the switch, which `status --json` and `rigctl metrics` show; with
--on-failure restart it is restarted exactly once; `down` removes the timer, the service and the records.

The container runs this checkout's test engine (mounted over the image's copy), so the knob exists whatever
engine the image was built with. The test interval (3 s) is allowed on the test bed only (RIGCTL_TESTBED=1).
Every wait is bounded; nothing here depends on how fast a run is, only on the order of runs."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.deploy.conftest import REPO, Rig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]



def _config_home(rig: Rig) -> Path:
    """Where rigctl (run with the rig's environment) puts user units: $XDG_CONFIG_HOME, else ~/.config; the
    same rule on both flavours (the podman 5 root has its own /root)."""
    return Path(rig.env.get("XDG_CONFIG_HOME") or Path(rig.env["HOME"]) / ".config")


def _state_home(rig: Rig) -> Path:
    return Path(rig.env.get("XDG_STATE_HOME") or Path(rig.env["HOME"]) / ".local" / "state")


def _user_units(rig: Rig) -> Path:
    return _config_home(rig) / "systemd" / "user"


def _engine_dir(rig: Rig) -> tuple[Path, Path]:
    engine = rig.workdir / "engine"
    if not engine.is_dir():
        engine.mkdir()
        shutil.copy(REPO / "tests" / "engine" / "fake_vllm.py", engine / "engine.py")
        shutil.copy(REPO / ".ci" / "testbed" / "vllm-entrypoint.py", engine / "entrypoint.py")
    knob = rig.workdir / "knob"
    knob.mkdir(exist_ok=True)
    return engine, knob


def _recipe(rig: Rig, name: str, port: int, **env: str) -> Path:
    """A recipe of the test engine in this checkout, whose answers the knob file switches while it runs."""
    engine, knob = _engine_dir(rig)
    rig.env["RIGCTL_TESTBED"] = "1"
    return rig.recipe(name, port, env={"FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_MODE_FILE": "/knob/mode", **env},
                      container={"publish": {"port": port}, "volumes": [
                          {"host": str(rig.ckpt), "container": "/models/test"},
                          {"host": str(engine), "container": "/opt/rigctl-test-engine"},
                          {"host": str(knob), "container": "/knob"}]})


def _deploy(rig: Rig, name: str, port: int) -> Path:
    code, doc = rig.run("up", str(_recipe(rig, name, port)), "--user")
    assert code == 0, json.dumps(doc, indent=1)  # whole: a failed warmup's reason is deep in the document
    return rig.workdir / "knob" / "mode"


def _canary(rig: Rig, unit: str) -> dict[str, Any]:
    code, doc = rig.run("status", "--user")
    # 7 while a unit does not serve (the canary's restart of a word-salad engine is such a moment)
    assert code in (0, 7) and (code == 7) == bool(doc["failing"]), doc
    row = next((s for s in doc["services"] if s["unit"] == unit), {})
    return row.get("canary") or {}


def _wait(rig: Rig, unit: str, done: Any, what: str, limit_s: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + limit_s
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = _canary(rig, unit)
        if done(seen):
            return seen
        time.sleep(1)
    raise AssertionError(f"{what}: not within {limit_s} s; canary {seen}")


def _metrics(rig: Rig, name: str) -> dict[str, float]:
    done = subprocess.run([*rig_cmd(), "metrics", "--user"], env=rig.env, capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    out = {}
    for family in text_string_to_metric_families(done.stdout):
        for sample in family.samples:
            if sample.labels.get("deployment") == name:
                out[sample.name] = sample.value
    return out


def rig_cmd() -> list[str]:
    import sys

    return [sys.executable, "-m", "rigctl"]


def _runs(rig: Rig, name: str) -> list[dict[str, Any]]:
    path = _state_home(rig) / "rigctl" / "deployments" / "history" / f"{name}.canary.json"
    return json.loads(path.read_text())["runs"] if path.exists() else []


def _failed_since(rig: Rig, name: str, unit: str, switched: float) -> list[dict[str, Any]]:
    """The runs that began after the switch, once the canary has failed and one such run is recorded.

    A run already under way at the switch may read either answer, so only later ones are judged."""
    _wait(rig, unit, lambda c: c.get("last_result") == "fail" and any(r["at"] > switched for r in _runs(rig, name)),
          "a failing canary run that began after the switch")
    return [r for r in _runs(rig, name) if r["at"] > switched]


def test_canary_passes_then_catches_word_salad_restarts_once_and_down_removes_it(rig: Rig) -> None:
    name, unit = "cn-salad", "rigctl-cn-salad.service"
    knob = _deploy(rig, name, 18451)
    code, doc = rig.run("canary", name, "--user", "--every", "3s", "--timeout", "3s", "--on-failure", "restart",
                        "--after", "2")
    assert code == 0, doc
    assert doc["action"] == "installed" and doc["timer"] == "rigctl-cn-salad-canary.timer"
    units = Path(doc["unit_dir"])
    assert units == _user_units(rig), doc
    files = [units / "rigctl-cn-salad-canary.timer", units / "rigctl-cn-salad-canary.service"]
    assert all(f.is_file() for f in files)
    verify = subprocess.run(["systemd-analyze", "--user", "verify", *map(str, files)], env=rig.env,
                            capture_output=True, text=True, timeout=60, check=False)
    assert verify.returncode == 0, verify.stderr

    # healthy: it keeps passing
    passing = _wait(rig, unit, lambda c: (c.get("counts") or {}).get("runs", 0) >= 2, "two runs")
    assert passing["last_result"] == "pass" and passing["consecutive_failures"] == 0, passing
    assert all(r["ok"] for r in _runs(rig, name)), _runs(rig, name)
    assert passing["last_ttft_ms"] is not None
    figures = _metrics(rig, name)
    assert figures["rigctl_canary_ok"] == 1 and figures["rigctl_up"] == 1
    pid_before = rig.systemctl("show", "-p", "MainPID", "--value", unit).strip()

    # the same running engine switched to word salad: the first run that starts after the switch fails
    switched = time.time()
    knob.write_text("word-salad\n")
    after = _failed_since(rig, name, unit, switched)
    assert after and not after[0]["ok"], after
    failing = _canary(rig, unit)
    assert failing["last_failure_reason"], failing
    assert any(r["failed_check"] in ("smoke", "repetition") for r in after), after
    figures = _metrics(rig, name)
    assert figures["rigctl_canary_ok"] == 0
    assert figures["rigctl_canary_failures_total"] >= 1

    # after 2 failures in a row: restarted once; the engine still talks salad, and is not restarted again
    restarted = _wait(rig, unit, lambda c: c.get("restarts") == 1, "the restart")
    assert restarted["last_restart"]["unit"] == unit
    _wait(rig, unit, lambda c: c.get("consecutive_failures", 0) >= 6, "four more failing runs", limit_s=120)
    final = _canary(rig, unit)
    assert final["restarts"] == 1 and final["counts"]["restarts"] == 1, final
    assert rig.systemctl("show", "-p", "MainPID", "--value", unit).strip() != pid_before  # it was restarted
    journal = subprocess.run(["journalctl", "--user", "-u", "rigctl-cn-salad-canary.service", "--no-pager"],
                             env=rig.env, capture_output=True, text=True, timeout=30, check=False).stdout
    if "canary cn-salad:" in journal:  # the testbed's user manager runs without journald: nothing to read there
        assert journal.count("restarting rigctl-cn-salad.service once") == 1

    code, down = rig.run("down", name, "--user", "--remove")
    assert code == 0, down
    removed = "\n".join(down["canary_removed"])
    assert "cn-salad-canary.timer" in removed and "cn-salad-canary.service" in removed
    assert "cn-salad.canary.json" in removed and "cn-salad.boots.json" in removed
    assert not any(f.exists() for f in files)
    assert rig.systemctl("show", "-p", "LoadState", "--value", "rigctl-cn-salad-canary.timer").strip() == "not-found"


def test_canary_fails_a_hung_engine_whose_health_answers_and_off_removes_it(rig: Rig) -> None:
    name, unit = "cn-hang", "rigctl-cn-hang.service"
    knob = _deploy(rig, name, 18452)
    code, doc = rig.run("status", "--user")
    row = next(s for s in doc["services"] if s["unit"] == unit)
    assert row["last_boot"]["status"] == "ready" and row["last_boot"]["total_s"] > 0, row  # the boot history
    assert row["last_boot"]["phases"][0]["phase"] == "starting"
    code, doc = rig.run("canary", name, "--user", "--every", "3s", "--timeout", "4s")
    assert code == 0, doc
    _wait(rig, unit, lambda c: c.get("last_result") == "pass", "a passing run")
    switched = time.time()
    knob.write_text("hang\n")
    after = _failed_since(rig, name, unit, switched)
    assert _canary(rig, unit)["restarts"] == 0  # --on-failure none: only recorded
    assert after and not after[0]["ok"] and after[0]["failed_check"] in ("timeout", "smoke"), after  # the first run
    assert _metrics(rig, name)["rigctl_canary_ok"] == 0
    code, health = rig.run("verify", name, "--user", "--checks", "health")
    assert code == 0, health  # /health still says 200: only the canary's content check sees it
    code, off = rig.run("canary", name, "--user", "--off")
    assert code == 0 and off["action"] == "removed", off
    assert _canary(rig, unit) == {}
    assert rig.systemctl("show", "-p", "LoadState", "--value", "rigctl-cn-hang-canary.timer").strip() == "not-found"


def test_swap_moves_the_canary_and_a_rollback_leaves_it_on_the_old_deployment(rig: Rig) -> None:
    port, a, b = 18453, "cn-swap-a", "cn-swap-b"
    _deploy(rig, a, port)
    code, doc = rig.run("canary", a, "--user", "--every", "2s", "--timeout", "3s", "--checks", "health,smoke",
                        "--on-failure", "restart", "--after", "1")
    assert code == 0, doc
    units = Path(doc["unit_dir"])
    _wait(rig, f"rigctl-{a}.service", lambda c: c.get("last_result") == "pass", f"a passing run of {a}'s canary")

    # swapped: the canary now watches B, with A's settings; A's units and record are gone
    code, swapped = rig.run("swap", a, str(_recipe(rig, b, port)), "--user", timeout=240)
    assert code == 0 and swapped["outcome"] == "swapped", swapped
    assert not (units / f"rigctl-{a}-canary.timer").exists() and not (units / f"rigctl-{a}-canary.service").exists()
    assert rig.systemctl("show", "-p", "LoadState", "--value", f"rigctl-{a}-canary.timer").strip() == "not-found"
    assert rig.systemctl("is-active", f"rigctl-{b}-canary.timer").strip() == "active"
    service = (units / f"rigctl-{b}-canary.service").read_text()
    assert f"After=rigctl-{b}.service" in service and f"canary {b} --run-once --user" in service
    moved = _wait(rig, f"rigctl-{b}.service", lambda c: c.get("last_result") == "pass", f"{b}'s canary passing")
    assert (moved["interval_s"], moved["checks"], moved["on_failure"]) == (2, ["health", "smoke"], "restart")
    assert _runs(rig, a) == []
    assert [s["step"] for s in swapped["steps"]] == ["preflight-to", "canary-pause", "stop-from", "gpu-release",
                                                      "up-to", "remove-from", "canary-move"], swapped

    # rolled back: the canary stays on B, paused while B was stopped, and runs again once B is back
    record_path = _state_home(rig) / "rigctl" / "deployments" / f"{b}.json"
    before = json.loads(record_path.read_text())
    start = time.time()
    code, back = rig.run("swap", b, str(_recipe(rig, "cn-swap-c", port, FAKE_VLLM_MODE="word-salad")), "--user",
                         timeout=240)
    end = time.time()
    assert code == 4 and back["outcome"] == "rolled-back", back
    assert not (units / "rigctl-cn-swap-c-canary.timer").exists()
    assert rig.systemctl("is-active", f"rigctl-{b}-canary.timer").strip() == "active"
    during = [r for r in _runs(rig, b) if start <= r["at"] <= end]
    assert all(r["ok"] for r in during), during  # no run judged B while the swap had it stopped
    again = _wait(rig, f"rigctl-{b}.service", lambda c: (c.get("last_run_at") or 0) > end, f"{b}'s canary again")
    assert again["last_result"] == "pass" and again["restarts"] == 0, again
    steps = [s["step"] for s in back["steps"]]
    assert steps[1] == "canary-pause" and steps[-2:] == ["restore-from", "canary-resume"], back
    # B's record after the rollback is B's deployment as it was: its recipe digest, install time, host facts
    after = json.loads(record_path.read_text())
    for key in ("recipe_sha256", "installed_at", "planned_on", "recipe_deployed", "engine_cache"):
        assert after.get(key) == before.get(key), key


def test_the_canary_compares_with_what_verify_export_wrote(rig: Rig) -> None:
    name, unit = "cn-base", "rigctl-cn-base.service"
    knob = _deploy(rig, name, 18454)
    export = rig.workdir / "cn-base.export.json"
    code, verified = rig.run("verify", name, "--user", "--checks", "smoke,repetition,determinism,soak",
                             "--export", str(export), timeout=300)
    assert code == 0, verified
    doc = json.loads(export.read_text())
    assert doc["rigctl"]["recipe"] == name and doc["completed"] >= 1  # vllm bench serve's keys, and rigctl's
    answers = doc["rigctl"]["answers"]
    assert {a["source"] for a in answers} >= {"smoke[0]", "determinism[0]"}, answers

    code, doc = rig.run("canary", name, "--user", "--every", "2s", "--timeout", "5s", "--checks",
                        "health,smoke,repetition", "--baseline", str(export))
    assert code == 0 and doc["settings"]["baseline"]["answers"] == len(answers), doc
    passing = _wait(rig, unit, lambda c: c.get("last_result") == "pass", "a run that matches the export")
    assert passing["baseline"]["answers"] == len(answers) and passing["baseline"]["source"] == str(export)
    assert {"id": "baseline", "status": "pass"} in _runs(rig, name)[-1]["checks"]

    # other answers, none of them wrong or looping: verify's own checks pass, the canary's baseline does not
    switched = time.time()
    knob.write_text("drift\n")
    code, again = rig.run("verify", name, "--user", "--checks", "smoke,repetition,determinism")
    assert code == 0, again
    failed = _wait(rig, unit, lambda c: c.get("last_result") == "fail", "the canary seeing the changed answers")
    assert "the answer changed since `verify --export`" in failed["last_failure_reason"], failed
    # a run's "at" is when it began: one that began just before the switch may have asked after it
    run = next(r for r in _runs(rig, name) if r["at"] + r["duration_s"] > switched and not r["ok"])
    assert run["failed_check"] == "baseline"
    assert [c["status"] for c in run["checks"] if c["id"] != "baseline"] == ["pass", "pass", "pass"], run
    assert _metrics(rig, name)["rigctl_canary_ok"] == 0

    # the engine's answers back as exported: the canary passes again
    knob.write_text("healthy\n")
    _wait(rig, unit, lambda c: c.get("last_result") == "pass", "the canary passing again")


def test_up_again_pauses_the_canary_while_it_replaces_the_engine(rig: Rig) -> None:
    name, unit = "cn-redeploy", "rigctl-cn-redeploy.service"
    _deploy(rig, name, 18456)
    code, doc = rig.run("canary", name, "--user", "--every", "2s", "--timeout", "3s", "--checks", "health,smoke")
    assert code == 0, doc
    _wait(rig, unit, lambda c: c.get("last_result") == "pass", "a passing run")
    start = time.time()
    code, again = rig.run("up", str(_recipe(rig, name, 18456, FAKE_VLLM_TOKEN_DELAY="0.003")), "--user")
    end = time.time()
    assert code == 0 and again["action"] == "replaced", again
    during = [r for r in _runs(rig, name) if start <= r["at"] <= end]
    assert all(r["ok"] for r in during), during  # the engine stopped on purpose is no failure
    assert rig.systemctl("is-active", f"rigctl-{name}-canary.timer").strip() == "active"
    after = _wait(rig, unit, lambda c: (c.get("last_run_at") or 0) > end, "a run after the new engine is up")
    assert after["last_result"] == "pass" and after["consecutive_failures"] == 0, after


def test_a_canary_of_a_relative_recipe_keeps_running_after_the_file_moved(rig: Rig) -> None:
    """`up ../NAME.yaml` from another directory, then the recipe file renamed: the canary's runs (and `verify NAME`
    from anywhere) use the recipe the deployment record keeps, so they go on passing; before, every run exited 3
    before recording anything and status kept showing green."""
    name, unit = "cn-moved", "rigctl-cn-moved.service"
    path = _recipe(rig, name, 18456)
    below = path.parent / "below"
    below.mkdir(exist_ok=True)
    done = subprocess.run([*rig_cmd(), "up", f"../{path.name}", "--user", "--json"], env=rig.env, cwd=below,
                          capture_output=True, text=True, timeout=180, check=False)
    rig.deployed.append(name)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    code, doc = rig.run("canary", name, "--user", "--every", "3s", "--timeout", "3s")
    assert code == 0, doc
    _wait(rig, unit, lambda c: (c.get("counts") or {}).get("runs", 0) >= 1, "a first run")
    moved = time.time()
    path.rename(path.with_suffix(".moved"))
    _wait(rig, unit, lambda c: any(r["at"] > moved for r in _runs(rig, name)), "a run after the file moved")
    after = [r for r in _runs(rig, name) if r["at"] > moved]
    assert after and all(r["ok"] for r in after), after
    code, doc = rig.run("status", "--user")
    row = next(s for s in doc["services"] if s["unit"] == unit)
    assert row["verdict"] == "serving" and not (row["canary"] or {}).get("failing"), row
    assert code == 0, doc
    elsewhere = subprocess.run([*rig_cmd(), "verify", name, "--user", "--json"], env=rig.env, cwd="/",
                               capture_output=True, text=True, timeout=180, check=False)
    assert elsewhere.returncode == 0, elsewhere.stdout[-3000:] + elsewhere.stderr[-2000:]
    assert str(path) in elsewhere.stderr  # the file it was deployed from is gone, and said
