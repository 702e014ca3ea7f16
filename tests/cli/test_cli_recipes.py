"""The CLI as a user runs it: a real process, exit codes from one enum, one JSON envelope on stdout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigctl.exitcodes import ExitCode


def rigctl(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rigctl", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        timeout=60,
        check=False,
    )


def test_recipes_json_envelope() -> None:
    done = rigctl("recipes", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["rigctl"] == "1" and doc["command"] == "recipes" and doc["ok"] is True
    names = {r["name"] for r in doc["recipes"]}
    assert {"glm53-flash", "glm53-flash-k3-dflash2", "glm53-flash-nvfp4"} <= names


def test_recipes_text_lists_names() -> None:
    done = rigctl("recipes")
    assert done.returncode == 0
    assert "glm53-flash-k3-dflash2" in done.stdout and "1,048,576" in done.stdout


def test_show_applies_set_and_fills_publish() -> None:
    done = rigctl("show", "glm53-flash", "--set", "engine.port=8123", "--set", "container.publish=null", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["recipe"]["engine"]["port"] == 8123
    assert doc["recipe"]["container"]["publish"] == {"address": "127.0.0.1", "port": 8123}


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("name: [unclosed\n", "malformed YAML"),
        ("- 1\n", "top level must be a mapping"),
        ("name: x\n", "description: Field required"),
    ],
)
def test_validate_refuses_with_exit_3_and_no_traceback(tmp_path: Path, content: str, needle: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    done = rigctl("validate", str(bad))
    assert done.returncode == ExitCode.INVALID_INPUT
    assert needle in done.stdout
    assert "Traceback" not in done.stdout + done.stderr


def test_validate_json_lists_each_file(tmp_path: Path, repo: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((repo / "recipes" / "glm53-flash.yaml").read_text().replace("ipc: host", "ipc: host\n  shm_size: 16g"))
    done = rigctl("validate", str(repo / "recipes" / "glm53-flash.yaml"), str(bad), "--json")
    assert done.returncode == ExitCode.INVALID_INPUT
    doc = json.loads(done.stdout)
    assert doc["ok"] is False
    good, broken = doc["files"]
    assert good["ok"] is True and broken["ok"] is False
    assert any("cannot set shmsize when running in the host IPC Namespace" in p for p in broken["problems"])


def test_errors_are_json_too(tmp_path: Path) -> None:
    done = rigctl("show", "no-such-recipe", "--json")
    assert done.returncode == ExitCode.INVALID_INPUT
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and doc["error"]["code"] == "recipe-not-found"
    assert "rigctl recipes" in doc["error"]["fix"]


def test_usage_error_is_exit_2() -> None:
    assert rigctl("show").returncode == ExitCode.USAGE
    assert rigctl("no-such-command").returncode == ExitCode.USAGE
    assert rigctl("show", "glm53-flash", "--set", "novalue").returncode == ExitCode.USAGE


def test_recipes_from_another_folder(tmp_path: Path) -> None:
    done = rigctl("recipes", "--json", cwd=tmp_path)
    assert done.returncode == 0
    assert len(json.loads(done.stdout)["recipes"]) >= 4
