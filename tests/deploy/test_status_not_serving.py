"""A dead model is never "ok": a unit that systemd keeps active while its engine does not serve (vLLM's API
server up after EngineDeadError, an engine stuck in warmup after a reboot) is ``not-serving``, failing, once
this start of it was ready before or its warmup budget is spent; within the budget it is only ``not-ready``.

The rule is pure (``deploy.status.judge`` over what systemd, the probe and the record say); the real chain
test (podman, quadlet, ``systemd --user``, the test engine switched to engine-dead while it runs) shows
`status` exiting 7 for it (before, it said ``not-ready`` and exited 0)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from tests.deploy.conftest import Rig
from tests.deploy.test_chain_canary import _deploy

from rigctl.adapters.systemd import UnitState
from rigctl.deploy.state import DeploymentRecord
from rigctl.deploy.status import FAILING, VERDICTS, judge
from rigctl.places import Scope


def _active_for(seconds: float) -> UnitState:
    """An active unit whose main process started ``seconds`` ago and has not restarted."""
    since_us = int((time.monotonic() - seconds) * 1e6)
    return UnitState(active="active", sub="running", load="loaded", result="success", restarts=0,
                     restart_policy="always", exit_status=None, main_pid=4242, active_since_mono_us=since_us,
                     source_path="/run/systemd/generator/rigctl-x.service")


def _record(budget: int | None) -> DeploymentRecord:
    return DeploymentRecord(recipe="x", scope=Scope.USER, unit="rigctl-x.service", container="rigctl-x",
                            unit_dir="/tmp/u", unit_files=["rigctl-x.container"], endpoint="http://127.0.0.1:1",
                            served_name="m", image="i@sha256:" + "0" * 64, warmup_budget_s=budget)


UNHEALTHY = "unhealthy (/health answered 503)"


def test_within_its_warmup_budget_a_unit_is_only_not_ready() -> None:
    verdict, _ = judge(_active_for(60), UNHEALTHY, record=_record(1800), exit_=None)
    assert verdict == "not-ready" and verdict not in FAILING


def test_past_its_warmup_budget_a_unit_that_never_got_ready_is_not_serving() -> None:
    verdict, said = judge(_active_for(2000), UNHEALTHY, record=_record(1800), exit_=None)
    assert verdict == "not-serving" and verdict in FAILING and verdict in VERDICTS
    assert "warmup budget of 1800 s" in said and "503" in said


def test_a_start_that_was_ready_and_no_longer_is_is_not_serving_at_once() -> None:
    ready_at = time.time() - 30  # this start's boot ended ready 30 s ago
    verdict, said = judge(_active_for(120), UNHEALTHY, record=_record(1800), exit_=None, ready_at=ready_at)
    assert verdict == "not-serving" and "was ready at" in said


def test_a_ready_boot_of_an_earlier_start_does_not_count() -> None:
    ready_at = time.time() - 600  # ready before this start (systemd restarted it since, or a reboot did)
    verdict, _ = judge(_active_for(120), UNHEALTHY, record=_record(1800), exit_=None, ready_at=ready_at)
    assert verdict == "not-ready"


def test_a_record_of_an_older_rigctl_has_no_budget_to_judge_by() -> None:
    verdict, _ = judge(_active_for(10 * 3600), UNHEALTHY, record=_record(None), exit_=None)
    assert verdict == "not-ready"


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_status_fails_for_an_engine_that_died_behind_a_live_server(rig: Rig) -> None:
    name, unit = "ns-dead", "rigctl-ns-dead.service"
    knob: Path = _deploy(rig, name, 18461)

    def row() -> tuple[int, dict[str, Any], list[str]]:
        code, doc = rig.run("status", "--user")
        found = [r for r in doc.get("services", []) if r["unit"] == unit]
        assert len(found) == 1, json.dumps(doc, indent=1)
        return code, found[0], doc["failing"]

    _, serving, failing = row()
    assert serving["verdict"] == "serving" and unit not in failing, serving

    knob.write_text("engine-dead\n")
    code, dead, failing = row()
    assert dead["verdict"] == "not-serving" and unit in failing and code == 7, dead
    assert "was ready at" in dead["verdict_detail"] and dead["active"] == "active", dead
    shown = subprocess.run([sys.executable, "-m", "rigctl", "status", "--user"], env={**rig.env, "COLUMNS": "80"},
                           capture_output=True, text=True, timeout=120, check=False)
    assert shown.returncode == 7 and f"{unit} (user)  NOT-SERVING" in shown.stdout, shown.stdout + shown.stderr

    knob.write_text("healthy\n")
    code, back, failing = row()
    assert back["verdict"] == "serving" and unit not in failing, back
