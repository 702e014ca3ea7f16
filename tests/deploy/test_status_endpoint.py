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
