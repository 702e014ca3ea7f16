"""`rigctl --hosts FILE fleet ...` (#15): the root's --hosts is the fleet's inventory, by one rule: the
subcommand's own --hosts wins, else the root's, else the default path. Against real loopback sshd hosts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

REMOTE_RIGCTL = str(Path(sys.executable).with_name("rigctl"))


def rigctl(*args: str, config: Path) -> subprocess.CompletedProcess[str]:
    """rigctl with its config home at ``config`` (where the default hosts.yaml is looked for)."""
    env = {**os.environ, "XDG_CONFIG_HOME": str(config)}
    done = subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=150,
                          env=env, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def hosts_of(done: subprocess.CompletedProcess[str]) -> set[str]:
    doc = json.loads(done.stdout)
    assert doc["command"] == "fleet status", doc
    return {h["name"] for h in doc["hosts"]}


def test_the_roots_hosts_is_the_fleets_inventory(
    ssh_fleet: Any, private_control_dir: Callable[[], Path], tmp_path: Path
) -> None:
    config = tmp_path / "config"  # no default hosts.yaml here: a fleet command without any --hosts fails
    root_file = ssh_fleet.inventory(names=["box00", "box01"], include_down=False, rigctl=REMOTE_RIGCTL)
    own_file = ssh_fleet.inventory(names=["box02"], include_down=False, rigctl=REMOTE_RIGCTL)

    before = rigctl("fleet", "status", "--json", config=config)
    assert before.returncode == 3 and json.loads(before.stdout)["ok"] is False  # the default: not there

    done = rigctl("--hosts", str(root_file), "fleet", "status", "--json", config=config)
    assert done.returncode == 0, done.stdout + done.stderr
    assert hosts_of(done) == {"box00", "box01"}
    assert f"rigctl fleet status: inventory: {root_file} (rigctl hosts file; 2 of 2 host(s))" in done.stderr

    text = rigctl("--hosts", str(root_file), "fleet", "status", config=config)
    assert text.returncode == 0, text.stdout + text.stderr
    assert text.stdout.splitlines()[0] == f"inventory: {root_file} (rigctl hosts file; 2 of 2 host(s))"
    assert "== box00 " in text.stdout and "== box01 " in text.stdout

    both = rigctl("--hosts", str(root_file), "fleet", "status", "--hosts", str(own_file), "--json", config=config)
    assert both.returncode == 0, both.stdout + both.stderr
    assert hosts_of(both) == {"box02"}  # the subcommand's own wins

    (config / "rigctl").mkdir(parents=True)
    (config / "rigctl" / "hosts.yaml").write_text(own_file.read_text())
    default = rigctl("fleet", "status", "--json", config=config)
    assert default.returncode == 0, default.stdout + default.stderr
    assert hosts_of(default) == {"box02"}  # neither: the default path
