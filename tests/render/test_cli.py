"""rigctl render on the command line: text, JSON, --out, errors."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from rigctl.cli.app import app  # the shared app with every command registered

runner = CliRunner()


def test_render_text_shows_file_and_install_path() -> None:
    result = runner.invoke(app, ["render", "glm53-flash"])
    assert result.exit_code == 0, result.output
    assert "### rigctl-glm53-flash.container (installs as /etc/containers/systemd/rigctl-glm53-flash.container)" in (
        result.output
    )
    assert "Restart=always" in result.output
    assert "note (assumed): no GPU ids given" in result.output


def test_render_json_and_out(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "glm53-flash", "--json", "--out", str(tmp_path), "--gpus", "GPU-a,GPU-b",
                                 "--podman-version", "4.3", "--quadlet-version", "5.4", "--scope", "user"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["command"] == "render" and data["ok"] is True
    (entry,) = data["files"]
    assert entry["name"] == "rigctl-glm53-flash.container"
    assert entry["path"] == str(tmp_path / "rigctl-glm53-flash.container")
    assert entry["install_path"].endswith("/containers/systemd/rigctl-glm53-flash.container")
    assert (tmp_path / entry["name"]).read_text() == entry["text"]
    assert "AddDevice=nvidia.com/gpu=GPU-a" in entry["text"]
    assert "WantedBy=default.target" in entry["text"]
    assert data["service"] == "rigctl-glm53-flash.service"
    assert any(n["kind"] == "adapted" for n in data["notes"])


def test_render_set_override() -> None:
    result = runner.invoke(app, ["render", "glm53-flash", "--json", "--set", "container.env.USE_REPLAYSSM='0'"])
    assert result.exit_code == 0, result.output
    assert "Environment=USE_REPLAYSSM=0" in json.loads(result.output)["files"][0]["text"]


def test_render_refusal_is_an_error_without_traceback() -> None:
    result = runner.invoke(app, ["render", "glm53-flash", "--json", "--podman-version", "4.3"])
    assert result.exit_code == 3
    data = json.loads(result.output)
    assert data["ok"] is False
    assert data["error"]["code"] == "render-refused"
    assert "--quadlet-version" in data["error"]["fix"]


def test_render_bad_version_and_scope() -> None:
    assert runner.invoke(app, ["render", "glm53-flash", "--podman-version", "five"]).exit_code == 3
    assert runner.invoke(app, ["render", "glm53-flash", "--scope", "global"]).exit_code == 2


def test_render_spells_the_scope_as_every_command_does() -> None:
    """--user / --system on render as on up, preflight and the rest (--scope, the old spelling, still works and
    means the same); both at once is a usage error, and --system renders as any user (it only prints)."""
    base = ["render", "glm53-flash", "--json", "--gpus", "GPU-a,GPU-b", "--podman-version", "5.4"]

    def unit(*flags: str) -> str:
        done = runner.invoke(app, [*base, *flags])
        assert done.exit_code == 0, done.output
        return str(json.loads(done.output)["files"][0]["text"])

    assert unit("--user") == unit("--scope", "user") and "WantedBy=default.target" in unit("--user")
    assert unit("--system") == unit("--scope", "system") and "WantedBy=multi-user.target" in unit("--system")
    for clash in (["--user", "--system"], ["--user", "--scope", "system"], ["--system", "--scope", "user"]):
        done = runner.invoke(app, [*base, *clash])
        assert done.exit_code == 2 and "exclude each other" in done.output, (clash, done.output)
