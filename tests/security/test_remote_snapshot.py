"""fleet doctor without a remote rigctl: the unit files are shipped back by a shell script over ssh and
audited here. The script runs for real (in a local `sh`, HOME pointed at a temporary home); only the
ssh hop is left out, which tests/security/test_remote_output.py covers on a loopback sshd."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from rigctl.fleet.inventory import Host
from rigctl.fleet.remote import host_doctor
from rigctl.util.proc import Completed

PIN = "docker.io/x/y@sha256:" + "0" * 64


class LocalShell:
    """The Transport protocol, running the command in `sh` here instead of on a remote host."""

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, host: Host, command: str, *, timeout: float) -> Completed:
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(self.home / "run")}
        done = subprocess.run(["sh", "-c", command], capture_output=True, timeout=timeout, env=env, check=False)
        return Completed(("sh",), done.returncode, done.stdout.decode(errors="replace"),
                         done.stderr.decode(errors="replace"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".config/containers/systemd").mkdir(parents=True)
    return tmp_path


def doctor(home: Path) -> tuple[list[dict[str, object]], dict[str, object]]:
    host = Host(name="box", ssh="box", rigctl="rigctl-not-installed-here")
    result = host_doctor(host, LocalShell(home), timeout=60)
    assert result.error is None, result.error
    return result.findings, result.data


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85", "\x0b", "\x0c", "\x1c"])
def test_shipped_units_are_split_by_systemds_line_rule(home: Path, char: str) -> None:
    unit = home / ".config/containers/systemd/hide.container"
    unit.write_text(f"[Container]\nImage={PIN}\n[Service]\nEnvironment=A=b{char}Restart=always\n")
    findings, data = doctor(home)
    assert data["units"] == [str(unit)]
    assert [f["id"] for f in findings] == ["restart-not-always"], "a line break only Python sees hid the finding"


def test_a_unit_too_large_is_listed_as_not_read(home: Path) -> None:
    big = home / ".config/containers/systemd/big.container"
    big.write_text("[Container]\nImage=" + PIN + "\nEnvironment=A=" + "x" * (2 << 20) + "\n")
    ok = home / ".config/containers/systemd/ok.container"
    ok.write_text(f"[Container]\nImage={PIN}\n[Service]\nRestart=always\n")
    findings, data = doctor(home)
    assert data["units"] == [str(ok)]
    (skip,) = data["skipped"]  # type: ignore[misc]
    assert skip["path"] == str(big) and "1.0 MiB" in skip["reason"]
    assert findings == []


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_fifos_and_devices_are_not_shipped(home: Path, kind: str) -> None:
    import os

    bad = home / ".config/containers/systemd/bad.container"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        bad.symlink_to("/dev/zero")
    findings, data = doctor(home)
    assert data["units"] == [] and findings == []
