"""`rigctl status` reads unit files with the one parser and the one "is it rigctl's" rule (issue #11): on the
real `systemd --user` testbed, status lists exactly the units `doctor --fix` would treat as rigctl's, and shows
their keys with drop-ins applied, as doctor applies them.

Before, status matched lines with regexes: `Label=rigctl.managed=true` followed by `Label=rigctl.managed=false`
(podman gives the container the last one), a reset `Label=`, or the label hidden in a continued `Description=`
all counted as rigctl's, and a drop-in that moved the port or the image was never seen."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
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
    assert code == 7, status  # installed, never started: a rigctl unit that does not serve
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



# --- a drop-in in another quadlet directory than its unit (status took drop-ins only from the unit's own) -----
# The unit sits in the user's ~/.config/containers/systemd, its drop-in in $XDG_RUNTIME_DIR/containers/systemd:
# both are directories of the user's quadlet, which applies the drop-in (the generator itself is asked).

UNIT = f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true\nPublishPort=127.0.0.1:18011:8000\n{SERVICE}"


@dataclass
class OtherRoot:
    env: dict[str, str]
    units: Path  # the user's own quadlet directory (in tmp)
    runtime: Path  # $XDG_RUNTIME_DIR/containers/systemd: the testbed's, shared, so every name is unique
    tag: str

    def unit(self, stem: str, text: str = UNIT) -> str:
        name = f"rigctl-stx-{stem}-{self.tag}"
        (self.units / f"{name}.container").write_text(text, encoding="utf-8")
        return name

    def dropin(self, name: str, text: str) -> None:
        folder = self.runtime / f"{name}.container.d"
        folder.mkdir(parents=True)
        (folder / "50-other-root.conf").write_text(text, encoding="utf-8")

    def generated(self) -> dict[str, str]:
        """{service: generated text} as the testbed's quadlet generator writes them for this user."""
        quadlet = self.env.get("RIGCTL_QUADLET", "")
        require_or_skip(Path(quadlet).is_file(), "the testbed's quadlet generator (RIGCTL_QUADLET)")
        done = subprocess.run([quadlet, "-user", "-dryrun"], capture_output=True, text=True, env=self.env,
                              timeout=60, check=False)
        parts = re.split(r"^---(\S+)---$", done.stdout, flags=re.MULTILINE)
        return dict(zip(parts[1::2], parts[2::2], strict=True))

    def status(self) -> dict[str, dict[str, Any]]:
        code, doc = _json(["status", "--user"], self.env)
        assert code in (0, 7) and (code == 7) == bool(doc["failing"]), doc  # 7: some unit does not serve
        return {s["unit"]: s for s in doc["services"] if s["unit"].endswith(f"-{self.tag}.service")}


@pytest.fixture
def other_root(tmp_path: Path) -> Iterator[OtherRoot]:
    env = testbed.testbed_env()
    require_or_skip(testbed._manager_running(env), "no `systemd --user` manager running (.ci/testbed.sh up)")
    home = tmp_path / "home"
    units = home / ".config" / "containers" / "systemd"
    units.mkdir(parents=True)
    # HOME too: doctor reads the login's own directories (with --path each would be a realm of its own)
    env = {**env, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config"), "XDG_STATE_HOME": str(tmp_path / "s")}
    box = OtherRoot(env, units, Path(env["XDG_RUNTIME_DIR"]) / "containers" / "systemd", uuid.uuid4().hex[:10])
    try:
        yield box
    finally:
        for folder in box.runtime.glob(f"rigctl-stx-*-{box.tag}.container.d"):
            (folder / "50-other-root.conf").unlink(missing_ok=True)
            folder.rmdir()


def test_a_dropin_in_another_root_that_takes_the_label_back_unlists_the_unit(other_root: OtherRoot) -> None:
    off, kept = other_root.unit("off"), other_root.unit("kept")
    other_root.dropin(off, "[Container]\nLabel=rigctl.managed=false\n")
    generated = other_root.generated()
    assert f"SourcePath={other_root.units / off}.container" in generated[f"{off}.service"]
    assert "--label rigctl.managed=false" in generated[f"{off}.service"]  # podman labels it not rigctl's
    assert "--label rigctl.managed=true" in generated[f"{kept}.service"]

    assert set(other_root.status()) == {f"{kept}.service"}

    _, report = _json(["doctor"], other_root.env)
    verdicts = {Path(f["unit"]).stem: f["managed"] for f in report["findings"]
                if f["id"] == "restart-not-always" and Path(f["unit"]).parent == other_root.units}
    assert verdicts == {off: False, kept: True}


def test_a_dropin_in_another_root_moves_the_endpoint_status_shows(other_root: OtherRoot) -> None:
    moved = other_root.unit("port")
    other_root.dropin(moved, "[Container]\nPublishPort=\nPublishPort=127.0.0.1:18012:8000\n")
    run_line = other_root.generated()[f"{moved}.service"].split("\nExecStart=", 1)[1].split("\n", 1)[0]
    assert "--publish 127.0.0.1:18012:8000" in run_line and "18011" not in run_line

    listed = other_root.status()
    assert set(listed) == {f"{moved}.service"}
    assert listed[f"{moved}.service"]["endpoint"] == "http://127.0.0.1:18012"
    assert listed[f"{moved}.service"]["unit_file"] == str(other_root.units / f"{moved}.container")


def test_a_unit_with_service_name_is_listed_as_the_service_systemd_runs(other_root: OtherRoot) -> None:
    """quadlet runs ``ServiceName=X`` as X.service, not NAME.service: status names (and asks systemd about) the
    service that runs. It took the file's stem, the service name Unit.service already knew to be wrong."""
    renamed = f"rigctl-stx-renamed-{other_root.tag}"
    named = other_root.unit("named", UNIT.replace("[Service]", f"ServiceName={renamed}\n[Service]"))
    listed = other_root.status()
    assert set(listed) == {f"{renamed}.service"}, listed
    assert listed[f"{renamed}.service"]["unit_file"] == str(other_root.units / f"{named}.container")
