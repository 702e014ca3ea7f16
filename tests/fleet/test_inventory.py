"""The host inventory: strict loading, defaults, selection, and the ssh command line it yields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigctl.cli.app import app
from rigctl.errors import InvalidInputError, UsageError
from rigctl.fleet.loader import load_inventory
from rigctl.fleet.ssh import OpenSsh


def test_inventory_is_strict(tmp_path: Path) -> None:
    bad = tmp_path / "hosts.yaml"
    bad.write_text("hosts:\n  - name: a\n    ssh: -oProxyCommand=evil\n  - name: a\n    ssh: b\n    colour: red\n")
    with pytest.raises(InvalidInputError) as err:
        load_inventory(bad)
    text = "\n".join(err.value.problems)
    assert f"{bad}: hosts.0.ssh" in text
    assert "hosts.1.colour: unknown key" in text


def test_inventory_defaults_tags_and_selection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "rigctl"
    config.mkdir()
    (config / "hosts.yaml").write_text(
        "defaults:\n  user: ops\n  ssh_options: {StrictHostKeyChecking: accept-new}\n"
        "hosts:\n  - {name: desk, ssh: gpu-desk, tags: [blackwell, tp2]}\n"
        "  - {name: rack, ssh: 10.0.0.13, port: 2222, user: root, tags: [hopper]}\n"
    )
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    inventory = load_inventory()
    (desk,) = inventory.select(tags=["blackwell"])
    assert (desk.user, desk.ssh_options, desk.rigctl) == ("ops", {"StrictHostKeyChecking": "accept-new"}, "rigctl")
    assert inventory.get("rack").user == "root"
    with pytest.raises(UsageError, match="no such host"):
        inventory.select(names=["nope"])
    argv = OpenSsh(tmp_path).argv(inventory.get("rack"), "true")
    assert argv[-3:] == ["--", "10.0.0.13", "true"]
    assert "BatchMode=yes" in argv
    assert "ControlMaster=auto" in argv
    assert f"ControlPath={tmp_path}/%C" in argv
    assert argv[argv.index("-p") : argv.index("-p") + 2] == ["-p", "2222"]


def test_missing_inventory_is_an_input_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["fleet", "status", "--hosts", str(tmp_path / "none.yaml"), "--json"])
    assert result.exit_code == 3
    assert json.loads(result.stdout)["error"]["code"] == "invalid-input"


def test_control_dir_falls_back_when_the_runtime_dir_is_too_long(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rigctl.fleet.ssh import control_dir

    deep = tmp_path / ("x" * 60)
    deep.mkdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(deep))
    chosen = control_dir()
    assert len(str(chosen)) + 41 < 104  # room for ssh's %C socket name
    assert not str(chosen).startswith(str(deep))
    assert chosen.stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(("ssh", "problem"), [
    ("10.0.0.13:2222", "'10.0.0.13:2222' looks like host:port, which ssh would take as one host name: write "
                       "10.0.0.13 and put 2222 in port:"),
    ("ops@rack:22", "write ops@rack and put 22 in port:"),
    ("[fd00::13]:2222", "'[fd00::13]:2222' carries a port, which ssh would take as part of the host name: write "
                        "fd00::13 and put 2222 in port:"),
    ("ops@[fd00::13]", "ssh takes an IPv6 address without brackets: write ops@fd00::13"),
    ("rack]", "brackets belong only around an IPv6 address"),
])
def test_a_port_in_the_destination_is_refused_pointing_to_port(tmp_path: Path, ssh: str, problem: str) -> None:
    bad = tmp_path / "hosts.yaml"
    bad.write_text(f"hosts:\n  - {{name: rack, ssh: '{ssh}'}}\n")
    with pytest.raises(InvalidInputError) as err:
        load_inventory(bad)
    (line,) = err.value.problems
    assert line.startswith(f"{bad}: hosts.0.ssh: ")
    assert problem in line
    result = CliRunner().invoke(app, ["fleet", "status", "--hosts", str(bad), "--json"])
    assert result.exit_code == 3
    assert problem in json.loads(result.stdout)["error"]["message"]


@pytest.mark.parametrize("ssh", ["fd00::13", "ops@fe80::1%eth0", "gpu-desk", "ops@10.0.0.13"])
def test_plain_destinations_and_bare_ipv6_are_taken(tmp_path: Path, ssh: str) -> None:
    good = tmp_path / "hosts.yaml"
    good.write_text(f"hosts:\n  - {{name: rack, ssh: '{ssh}', port: 2222}}\n")
    host = load_inventory(good).get("rack")
    assert OpenSsh(tmp_path).argv(host, "true")[-3:] == ["--", ssh, "true"]


def test_ssh_options_refuse_option_like_jump_hosts_and_control_characters(tmp_path: Path) -> None:
    bad = tmp_path / "hosts.yaml"
    bad.write_text("defaults:\n  ssh_options: {ProxyJump: 'bastion,-oProxyCommand=x'}\n"
                   "hosts:\n  - {name: a, ssh: a, ssh_options: {LocalCommand: \"x\\e[2J\"}}\n"
                   "  - {name: b, ssh: b, ssh_options: {proxyjump: -J}}\n")
    with pytest.raises(InvalidInputError) as err:
        load_inventory(bad)
    text = "\n".join(err.value.problems)
    assert f"{bad}: defaults.ssh_options: ProxyJump: a jump host may not start with '-'" in text
    assert f"{bad}: hosts.0.ssh_options.LocalCommand: String should match" in text
    assert f"{bad}: hosts.1.ssh_options: proxyjump: a jump host may not start with '-'" in text
