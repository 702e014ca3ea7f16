"""`doctor` on the real testbed audits what systemd runs, and `doctor --fix` takes effect (#25): given a
drop-in that turns Restart=always off, --fix rewrites it, reloads the user manager, reads Restart back from
it and says the fix is in effect; a killed engine is then restarted. A failed serving unit is a finding."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from tests.deploy.conftest import Rig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _units_dir(rig: Rig) -> Path:
    base = rig.env.get("XDG_CONFIG_HOME") or os.path.join(rig.env.get("HOME") or str(Path.home()), ".config")
    return Path(base) / "containers" / "systemd"


def test_doctor_fix_takes_effect_in_the_manager(rig: Rig) -> None:
    path = rig.recipe("dl-live", 18220, env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    unit = "rigctl-dl-live.service"
    dropin = _units_dir(rig) / "rigctl-dl-live.container.d" / "override.conf"
    dropin.parent.mkdir(exist_ok=True)
    dropin.write_text("[Service]\nRestart=no\n")
    rig.systemctl("daemon-reload")
    assert rig.systemctl("show", "-p", "Restart", "--value", unit).strip() == "no"

    code, report = rig.run("doctor", "--fix", "--json")
    ours = [a for a in report["fix"]["applied"] if a.get("service") == unit]
    assert ours, report["fix"]
    (applied,) = ours
    assert "restart-not-always" in applied["fixed"] and applied["reloaded"] is True, applied
    assert applied["live"].get("Restart") == "always" and applied["in_effect"] is True, applied
    assert all("<" not in step for step in applied["next_steps"])  # pasteable: real names, no placeholders
    assert rig.systemctl("show", "-p", "Restart", "--value", unit).strip() == "always"  # what systemd holds
    assert rig.systemctl("show", "-p", "NeedDaemonReload", "--value", unit).strip() == "no"

    # the fix holds where it matters: a killed engine comes back
    before = rig.systemctl("show", "-p", "NRestarts", "--value", unit).strip()
    rig.podman("kill", "--signal", "KILL", "--", "rigctl-dl-live")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if rig.systemctl("show", "-p", "NRestarts", "--value", unit).strip() != before:
            break
        time.sleep(0.5)
    assert rig.systemctl("show", "-p", "NRestarts", "--value", unit).strip() != before


def test_a_failed_serving_unit_is_a_doctor_finding_and_status_exits_7(rig: Rig) -> None:
    path = rig.recipe("dl-failed", 18221, env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    unit = "rigctl-dl-failed.service"
    dropin = _units_dir(rig) / "rigctl-dl-failed.container.d" / "override.conf"  # someone's weakened unit
    dropin.parent.mkdir(exist_ok=True)
    dropin.write_text("[Service]\nRestart=no\n")
    rig.systemctl("daemon-reload")
    rig.podman("kill", "--signal", "KILL", "--", "rigctl-dl-failed")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and rig.systemctl("show", "-p", "ActiveState", "--value", unit).strip() != "failed":
        time.sleep(0.5)
    assert rig.systemctl("show", "-p", "ActiveState", "--value", unit).strip() == "failed"

    code, report = rig.run("doctor", "--json")
    assert code == 1, report
    hits = [f for f in report["findings"] if f["id"] == "unit-failed" and "rigctl-dl-failed" in f["unit"]]
    assert hits and hits[0]["severity"] == "fail", report["findings"]
    code, status = rig.run("status", "--user")
    assert code == 7 and unit in status["failing"], status
    row = next(s for s in status["services"] if s["unit"] == unit)
    assert row["verdict"] == "failed" and row["last_exit"] is not None, row
