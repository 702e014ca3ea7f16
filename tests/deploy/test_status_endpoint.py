"""`rigctl status --json` shows, for a unit without a deployment record, the endpoint its PublishPort= gives, as a
client on this host reaches it: a port published on every address over loopback, an IPv6 address bracketed
(status had its own PublishPort regex and showed http://0.0.0.0:PORT and http://[::]:PORT). The units are real
files in the user's quadlet directory, found and parsed as status finds and parses every unit; no testbed is
needed (the manager and podman may not answer: the endpoint is read from the unit)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)

PIN = "localhost/rigctl-endpoint-probe@sha256:" + "3" * 64
PUBLISHED = {  # PublishPort= -> the endpoint status shows
    "0.0.0.0:18301:8000": "http://127.0.0.1:18301",
    "[::]:18302:8000": "http://[::1]:18302",
    "[::1]:18303:8000": "http://[::1]:18303",
    "127.0.0.1:18304:8000": "http://127.0.0.1:18304",
    "18305:8000": "http://127.0.0.1:18305",  # no address: every address, as podman reads it
    "127.0.0.1::8000": None,  # podman picks the host port: none to show
    "8000": None,
}


def test_status_json_shows_the_endpoint_a_client_uses(tmp_path: Path) -> None:
    units = tmp_path / "config" / "containers" / "systemd"
    units.mkdir(parents=True)
    names = {}
    for i, spec in enumerate(PUBLISHED):
        name = f"rigctl-endpoint-{i}"
        (units / f"{name}.container").write_text(
            f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true\nContainerName={name}\n"
            f"PublishPort={spec}\n[Service]\nRestart=always\n")
        names[f"{name}.service"] = spec
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "rigctl", "status", "--user", "--json"], env=env,
                          capture_output=True, text=True, timeout=90, check=False)
    # the units are installed, never started: rigctl units that do not serve make status exit 7 (SERVICE_DOWN)
    assert done.returncode == 7, done.stderr
    shown = {row["unit"]: row["endpoint"] for row in json.loads(done.stdout)["services"] if row["unit"] in names}
    assert shown == {unit: PUBLISHED[spec] for unit, spec in names.items()}


def test_a_unit_whose_manager_does_not_answer_is_not_ok(tmp_path: Path) -> None:
    """No manager to ask (an empty runtime directory, no session bus): status cannot say the model serves, so it
    fails (exit 7, ok false, the unit in ``failing``) and the text says what it does not know, never ``None``."""
    units = tmp_path / "config" / "containers" / "systemd"
    units.mkdir(parents=True)
    (units / "rigctl-unasked.container").write_text(
        f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true\nContainerName=rigctl-unasked\n"
        f"PublishPort=127.0.0.1:18306:8000\n[Service]\nRestart=always\n")
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if k not in ("DBUS_SESSION_BUS_ADDRESS", "XDG_RUNTIME_DIR")}
    env |= {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_RUNTIME_DIR": str(runtime), "COLUMNS": "80"}

    def status(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rigctl", "status", "--user", *extra], env=env,
                              capture_output=True, text=True, timeout=90, check=False)

    done = status("--json")
    assert done.returncode == 7, done.stderr
    doc = json.loads(done.stdout)
    (row,) = [r for r in doc["services"] if r["unit"] == "rigctl-unasked.service"]
    assert (doc["ok"], row["verdict"], doc["failing"]) == (False, "unknown", ["rigctl-unasked.service"])
    # the policy the file asks for, said as the file's: the manager that runs it did not answer
    assert (row["restart_policy"], row["restart_policy_from"], row["restarts"]) == ("always", "unit file", None)
    text = status()
    assert text.returncode == 7, text.stderr
    assert "rigctl-unasked.service (user)  UNKNOWN" in text.stdout and "restarts ? (Restart=always in the unit file)" in text.stdout, text.stdout
    assert "None" not in text.stdout, text.stdout
