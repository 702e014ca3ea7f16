"""`rigctl status` reads unit files with the one parser and the one "is it rigctl's" rule (issue #11): on the
real `systemd --user` testbed, status lists exactly the units `doctor --fix` would treat as rigctl's, and shows
their keys with drop-ins applied, as doctor applies them.

Before, status matched lines with regexes: `Label=rigctl.managed=true` followed by `Label=rigctl.managed=false`
(podman gives the container the last one), a reset `Label=`, or the label hidden in a continued `Description=`
all counted as rigctl's, and a drop-in that moved the port or the image was never seen."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require_or_skip
from tests.deploy import conftest as testbed  # its testbed_env, imported by name, would be collected as a test

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

PIN = "localhost/rigctl-status-probe@sha256:" + "1" * 64
DROPIN_PIN = "localhost/rigctl-status-dropin@sha256:" + "2" * 64
SERVICE = "[Service]\nRestart=no\n"  # every unit gets a doctor finding, so doctor says whether it is managed

UNITS = {
    # rigctl's, and a drop-in moves its port and image (a reset PublishPort=, then the new one)
    "rigctl-st-plain.container": f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true\n"
                                 f"PublishPort=127.0.0.1:18001:8000\nContainerName=rigctl-st-plain\n{SERVICE}",
    # rigctl's: the label's value in another case is still true for doctor
    "rigctl-st-upper.container": f"[Container]\nImage={PIN}\nLabel=rigctl.managed=TRUE\n{SERVICE}",
    # the later label wins: podman gives the container rigctl.managed=false
    "rigctl-st-false.container": f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true rigctl.recipe=x\n"
                                 f"Label=rigctl.managed=false\n{SERVICE}",
    # an empty Label= resets the list
    "rigctl-st-reset.container": f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true\nLabel=\n{SERVICE}",
    # the "label" is the continuation of Description=, not a key
    "rigctl-st-continued.container": f"[Unit]\nDescription=not ours \\\nLabel=rigctl.managed=true\n"
                                     f"[Container]\nImage={PIN}\n{SERVICE}",
    # the label only in a drop-in: a drop-in cannot make a unit rigctl's
    "rigctl-st-dropin-label.container": f"[Container]\nImage={PIN}\n{SERVICE}",
}
DROPINS = {
    "rigctl-st-plain.container.d/50-move.conf": f"[Container]\nImage={DROPIN_PIN}\nPublishPort=\n"
                                                "PublishPort=127.0.0.1:18002:8000\n",
    "rigctl-st-dropin-label.container.d/50-label.conf": "[Container]\nLabel=rigctl.managed=true\n",
}


def _json(args: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([sys.executable, "-m", "rigctl", *args, "--json"], capture_output=True, text=True,
                          env=env, timeout=60, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return done.returncode, doc


def test_status_and_doctor_agree_on_which_units_are_rigctls(tmp_path: Path) -> None:
    env = testbed.testbed_env()
    require_or_skip(testbed._manager_running(env), "no `systemd --user` manager running (.ci/testbed.sh up)")
    units = tmp_path / "config" / "containers" / "systemd"
    for name, text in {**UNITS, **DROPINS}.items():
        (units / name).parent.mkdir(parents=True, exist_ok=True)
        (units / name).write_text(text, encoding="utf-8")
    env = {**env, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}

    code, status = _json(["status", "--user"], env)
    assert code == 0, status
    listed = {s["unit"]: s for s in status["services"]}
    assert set(listed) == {"rigctl-st-plain.service", "rigctl-st-upper.service"}

    code, report = _json(["doctor", "--path", str(units)], env)
    assert code == 1, report  # every unit has Restart=no
    verdicts = {Path(f["unit"]).name: f["managed"] for f in report["findings"] if f["id"] == "restart-not-always"}
    assert set(verdicts) == set(UNITS)  # doctor judged every unit
    assert {Path(n).stem + ".service" for n, managed in verdicts.items() if managed} == set(listed)

    plain = listed["rigctl-st-plain.service"]
    assert plain["unit_file"] == str(units / "rigctl-st-plain.container")
    assert plain["image"] == DROPIN_PIN  # the drop-in's, applied after the unit file
    assert plain["endpoint"] == "http://127.0.0.1:18002"  # the drop-in reset the list and published anew
    assert plain["active"] == "inactive"  # asked of the real manager, which has no such unit loaded
