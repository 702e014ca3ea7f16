"""A deployment carries what it needs to be re-checked (issue #35 item 1): its record keeps the recipe as
deployed (the file's absolute path, a digest of the file, the validated recipe itself), so `verify NAME`, the
canary's run and `swap` work from any directory and after the file moved; a file changed since is said, never
silently used. A canary run that cannot load a recipe at all records a failed run with its reason."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.deploy.test_up_decisions import Box, make_recipe
from tests.fakes import plan_of, small_recipe_file

from rigctl.deploy import history
from rigctl.deploy import state as records
from rigctl.deploy.up import UpOptions, up
from rigctl.places import Scope
from rigctl.recipe.load import load

pytestmark = pytest.mark.timeout(120)

NAME = "rr-moved"


def test_up_records_the_recipe_as_deployed(tmp_path: Path, monkeypatch: Any) -> None:
    box = Box(tmp_path)
    recipe = make_recipe(tmp_path)
    here = tmp_path / "cwd"
    here.mkdir()
    source = Path("..") / "fast-0.yaml"  # relative, with `..`, as `up ../fast-0.yaml` passes it
    monkeypatch.chdir(here)
    res = up(plan_of(recipe), recipe_source=str(source), adapters=box.adapters, dirs=box.dirs,
             options=UpOptions(verify=False))
    assert res.ok
    record = records.load_record(box.dirs.state, "fast")
    assert record is not None
    assert record.recipe_source == str(tmp_path / "fast-0.yaml")  # absolute, `..` resolved
    assert record.recipe_sha256 == hashlib.sha256((tmp_path / "fast-0.yaml").read_bytes()).hexdigest()
    assert record.recipe_deployed == recipe.model_dump(mode="json")


def _env(tmp_path: Path) -> dict[str, str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text("#!/bin/sh\ncase \"$*\" in *show*) printf 'LoadState=loaded\\n"
                                       "ActiveState=active\\nSubState=running\\n';; esac\nexit 0\n")
    (bin_dir / "podman").write_text("#!/bin/sh\nexit 125\n")
    for p in bin_dir.iterdir():
        p.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"),
            "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "XDG_RUNTIME_DIR": str(tmp_path / "run"), "XDG_CACHE_HOME": str(tmp_path / "cache")}


def _deployed(tmp_path: Path, *, keep_copy: bool) -> tuple[dict[str, str], Path, Path]:
    """A record of NAME made from a recipe file in tmp_path/r; (env, the state dir, the recipe file)."""
    env = _env(tmp_path)
    rdir = tmp_path / "r"
    rdir.mkdir()
    path = small_recipe_file(rdir, NAME, port=1)
    recipe = load(str(path)).recipe
    state = tmp_path / "state" / "rigctl" / "deployments"
    units = tmp_path / "config" / "containers" / "systemd"
    state.mkdir(parents=True)
    units.mkdir(parents=True)
    record = records.DeploymentRecord(
        recipe=NAME, scope=Scope.USER, unit=f"rigctl-{NAME}.service", container=f"rigctl-{NAME}",
        unit_dir=str(units), unit_files=[f"rigctl-{NAME}.container"], endpoint="http://127.0.0.1:1",
        served_name="test-model", image=recipe.image, recipe_source=str(path))
    if keep_copy:
        record.recipe_sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
        record.recipe_deployed = recipe.model_dump(mode="json")
    records.save(state, record)
    return env, state, path


def rigctl(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=90, check=False)


def test_verify_name_uses_the_records_recipe_after_the_file_moved(tmp_path: Path) -> None:
    env, _, path = _deployed(tmp_path, keep_copy=True)
    path.rename(path.with_suffix(".old"))
    done = rigctl("verify", NAME, "--user", "--checks", "health", "--json", env=env, cwd=tmp_path)
    doc = json.loads(done.stdout)
    # the checks ran against the recorded endpoint (nothing answers there: health fails, exit 1), not exit 3
    assert done.returncode == 1, done.stdout + done.stderr
    assert doc["command"] == "verify" and doc["checks"][0]["id"] == "health"
    assert f"{path} is gone" in done.stderr and "as deployed" in done.stderr


def test_a_recipe_changed_on_disk_is_said_and_not_used(tmp_path: Path) -> None:
    env, _, path = _deployed(tmp_path, keep_copy=True)
    path.write_text(path.read_text().replace("test-model", "another-model"))
    done = rigctl("verify", NAME, "--user", "--checks", "health", "--json", env=env, cwd=tmp_path / "r")
    doc = json.loads(done.stdout)
    assert doc["endpoint"]["model"] == "test-model", doc["endpoint"]  # the deployed recipe's, not the file's
    assert f"{path} changed since {NAME} was deployed" in done.stderr


def test_a_canary_run_that_cannot_load_a_recipe_is_a_recorded_failed_run(tmp_path: Path) -> None:
    env, state, path = _deployed(tmp_path, keep_copy=False)  # a record of an older rigctl: no copy
    history.save_canary(state, NAME, history.CanaryState(config=history.CanaryConfig(
        600, ["health"], "restart", 1, 5, installed_at=1.0)))
    path.unlink()
    done = rigctl("canary", NAME, "--run-once", "--user", "--json", env=env, cwd=tmp_path)
    assert done.returncode not in (0, 1), done.stdout + done.stderr  # not a check's failure: the unit is failed
    after = history.canary_state(state, NAME)
    assert after.counts["runs"] == 1 and after.counts["failures"] == 1 and after.counts["restarts"] == 0
    last = after.last
    assert last is not None and last["ok"] is False and last["failed_check"] == "recipe"
    assert str(path) in (last["reason"] or "")
    summary = after.summary()
    assert summary is not None and summary["last_result"] == "fail"
