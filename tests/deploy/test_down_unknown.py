"""`down` (#35 item 6): a name that is neither a deployment, a recipe nor a unit systemd knows exits 5 (as
`logs`, `verify` and `canary` do) naming the deployments it is near, and touches nothing; `down --remove`
takes the engine's log where rigctl's unit writes it, and says where it kept one it did not write."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from tests.deploy.test_up_decisions import UNIT, Box, make_recipe
from tests.fakes import FakeGpu
from typer.testing import CliRunner

from rigctl.cli.app import app
from rigctl.deploy.down import DownResult, down
from rigctl.deploy.state import DeploymentRecord, save
from rigctl.errors import DeploymentNotFoundError
from rigctl.exitcodes import ExitCode
from rigctl.places import ENGINE_LOG_SUBDIR, Dirs, Scope


def _down(box: Box, name: str, **kw: object) -> DownResult:
    return down(name, unit=f"rigctl-{name}.service", container=f"rigctl-{name}", unit_dir=box.dirs.units,
                state_dir=box.dirs.state, stop_timeout_s=10, systemd=box.systemd, podman=box.podman, gpu=FakeGpu(),
                clock=box.clock, **kw)  # type: ignore[arg-type]


def test_a_name_never_deployed_is_not_found_and_nothing_is_touched(tmp_path: Path) -> None:
    box = Box(tmp_path)
    with pytest.raises(DeploymentNotFoundError):
        _down(box, "nosuch", remove=True, unknown=DeploymentNotFoundError("nosuch is not deployed"))
    assert not [c for c in box.systemd.calls if "nosuch" in c]


def test_remove_takes_the_engine_log_rigctl_wrote(tmp_path: Path) -> None:
    box = Box(tmp_path)
    assert box.up(make_recipe(tmp_path)).ok
    log = tmp_path / "xdg-state" / ENGINE_LOG_SUBDIR / UNIT.replace(".service", ".log")
    log.parent.mkdir(parents=True)
    log.write_text("engine output\n")
    result = _down(box, "fast", remove=True, engine_log=log)
    assert not log.exists() and str(log) in result.removed and result.engine_log_kept is None


def test_remove_keeps_a_log_written_elsewhere_and_says_so(tmp_path: Path) -> None:
    box = Box(tmp_path)
    assert box.up(make_recipe(tmp_path)).ok
    log = tmp_path / "elsewhere" / "engine.log"
    log.parent.mkdir()
    log.write_text("engine output\n")
    result = _down(box, "fast", remove=True, engine_log=log)
    assert log.exists() and result.engine_log_kept == str(log) and f"engine log is kept: {log}" in result.message


def test_cli_down_of_a_typo_exits_5_with_did_you_mean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for var in ("XDG_STATE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    state = Dirs.of(Scope.USER).state
    assert str(state).startswith(str(tmp_path)), state
    os.makedirs(state, exist_ok=True)
    save(state, DeploymentRecord(recipe="zeta-chat", scope=Scope.USER, unit="rigctl-zeta-chat.service",
                                 container="rigctl-zeta-chat", unit_dir=str(Dirs.of(Scope.USER).units),
                                 unit_files=["rigctl-zeta-chat.container"], endpoint="http://127.0.0.1:18999",
                                 served_name="m", image="i@sha256:" + "0" * 64))
    result = CliRunner().invoke(app, ["down", "zeta-caht", "--user", "--json"])
    assert result.exit_code == ExitCode.NOT_FOUND, result.output
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "deployment-not-found" and "did you mean zeta-chat?" in error["fix"], error
