"""`--accept-license` as an operator types it (#15): only the recipe's own license is accepted, and the
record names a person (user name and uid), when, and which license. Preflight replays a captured
inventory, so no GPU is needed; the license record goes to a private XDG_STATE_HOME."""

from __future__ import annotations

import datetime as dt
import json
import os
import pwd
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rigctl.exitcodes import ExitCode

pytestmark = pytest.mark.timeout(120)

INVENTORY = str(Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "h200.json")
GLM_LICENSE = "shapleymcg-license-1.0"


@pytest.fixture
def state(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("SUDO_USER", "SUDO_UID")}
    return {**env, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def record_file(state: dict[str, str]) -> Path:
    return Path(state["XDG_STATE_HOME"], "rigctl", "licenses.json")


def preflight(state: dict[str, str], recipe: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", "preflight", recipe, "--inventory", INVENTORY, *args],
                          capture_output=True, text=True, timeout=90, env=state, check=False)


def findings(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    return {f["id"]: f for f in json.loads(done.stdout)["findings"]}


def test_another_license_is_refused_in_text(state: dict[str, str]) -> None:
    done = preflight(state, "glm53-flash", "--accept-license", "mit")
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert f"this recipe's license is {GLM_LICENSE}" in done.stderr
    assert f"--accept-license {GLM_LICENSE}" in done.stderr  # the fix names the right one
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not record_file(state).exists()


def test_another_license_is_refused_in_json(state: dict[str, str]) -> None:
    done = preflight(state, "glm53-flash", "--accept-license", "mit", "--json")
    assert done.returncode == ExitCode.USAGE
    doc = json.loads(done.stdout)
    assert doc["command"] == "preflight" and doc["ok"] is False and doc["error"]["code"] == "usage"
    assert f"this recipe's license is {GLM_LICENSE}" in doc["error"]["message"]
    assert f"--accept-license {GLM_LICENSE}" in doc["error"]["fix"]
    assert not record_file(state).exists()


def test_one_wrong_id_among_several_records_none(state: dict[str, str]) -> None:
    done = preflight(state, "glm53-flash", "--accept-license", f"{GLM_LICENSE},mit", "--json")
    assert done.returncode == ExitCode.USAGE and "'mit'" in json.loads(done.stdout)["error"]["message"]
    assert not record_file(state).exists()


def test_a_recipe_that_needs_no_acceptance_says_so(state: dict[str, str]) -> None:
    done = preflight(state, "qwen3-8b-vllm", "--accept-license", "mit", "--json")
    assert done.returncode == ExitCode.USAGE
    error = json.loads(done.stdout)["error"]
    assert "this recipe's license is apache-2.0" in error["message"] and "needs no license acceptance" in error["fix"]


def test_the_recipes_license_is_recorded_with_who_when_and_which(state: dict[str, str]) -> None:
    before = dt.datetime.now(dt.UTC).replace(microsecond=0)
    refused = preflight(state, "glm53-flash", "--json")
    assert findings(refused)["license"]["severity"] == "fail"
    done = preflight(state, "glm53-flash", "--accept-license", GLM_LICENSE, "--json")
    assert findings(done)["license"]["severity"] == "ok", done.stdout
    [record] = json.loads(record_file(state).read_text())["accepted"]
    uid = os.geteuid()
    by = f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    assert record["id"] == GLM_LICENSE and record["recipe"] == "glm53-flash" and record["by"] == by
    assert before <= dt.datetime.fromisoformat(record["accepted_at"]) <= dt.datetime.now(dt.UTC)
    assert f"accepted by {by}" in findings(done)["license"]["message"]


def test_under_sudo_the_person_behind_it_is_recorded(state: dict[str, str]) -> None:
    if os.geteuid() != 0:
        pytest.skip("sudo's variables are believed only by a process running as root")
    env = {**state, "SUDO_USER": "alice", "SUDO_UID": "1000"}
    done = preflight(env, "glm53-flash", "--accept-license", GLM_LICENSE, "--json")
    assert findings(done)["license"]["severity"] == "ok", done.stdout
    [record] = json.loads(record_file(state).read_text())["accepted"]
    assert record["by"] == f"alice (uid 1000) via sudo as {pwd.getpwuid(0).pw_name} (uid 0)"
