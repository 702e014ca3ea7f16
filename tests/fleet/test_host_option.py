"""`rigctl --host NAME <command>` runs the command on an inventory host over real ssh (loopback sshd)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rigctl.exitcodes import ExitCode

REMOTE_RIGCTL = str(Path(sys.executable).with_name("rigctl"))

pytestmark = pytest.mark.integration


def rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_host_option_runs_remotely_in_json_and_text(ssh_fleet: Any, private_control_dir: Callable[[], Path]) -> None:
    inventory = str(ssh_fleet.inventory(rigctl=REMOTE_RIGCTL))
    done = rigctl("--hosts", inventory, "--host", "box00", "recipes", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["command"] == "recipes" and doc["ok"] is True and doc["host"] == "box00"
    assert "glm53-flash" in {r["name"] for r in doc["recipes"]}

    text = rigctl("--hosts", inventory, "--host", "box00", "recipes")
    assert text.returncode == 0, text.stderr
    assert "glm53-flash-k3-dflash2" in text.stdout

    # the remote exit status comes back: an invalid recipe name is exit 3 there and here
    bad = rigctl("--hosts", inventory, "--host", "box00", "show", "no-such-recipe", "--json")
    assert bad.returncode == ExitCode.INVALID_INPUT
    assert json.loads(bad.stdout)["error"]["code"] == "recipe-not-found"


def test_unreachable_host_is_a_clean_error(ssh_fleet: Any, private_control_dir: Callable[[], Path]) -> None:
    inventory = str(ssh_fleet.inventory(rigctl=REMOTE_RIGCTL))
    done = rigctl("--hosts", inventory, "--host", "down", "status", "--json")
    assert done.returncode != 0
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and "unreachable" in doc["error"]["message"]
    assert "Traceback" not in done.stderr
    unknown = rigctl("--hosts", inventory, "--host", "nobody", "status", "--json")
    assert unknown.returncode in {ExitCode.INVALID_INPUT, ExitCode.USAGE}


def test_fleet_swap_runs_the_remote_swap_on_each_host(
    ssh_fleet: Any, private_control_dir: Callable[[], Path], tmp_path: Path
) -> None:
    inventory = str(ssh_fleet.inventory(rigctl=REMOTE_RIGCTL))
    # nothing is deployed on these hosts under this state dir: each remote swap refuses, the down host is
    # reported, and neither hides the other
    done = rigctl("fleet", "swap", "qwen3-8b-vllm", "glm53-flash", "--hosts", inventory, "--only", "box00",
                  "--only", "down", "--json")
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert doc["command"] == "fleet swap"
    by_name = {h["name"]: h for h in doc["hosts"]}
    assert by_name["down"]["reachable"] is False
    box = by_name["box00"]
    assert box["via"] == "rigctl" and box["ok"] is False
    assert box["data"]["command"] == "swap"
    assert box["summary"][0].startswith("swap qwen3-8b-vllm glm53-flash: ")
    assert "not deployed" in json.dumps(box["data"]) or "no deployment" in json.dumps(box["data"])
