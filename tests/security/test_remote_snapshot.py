"""fleet doctor without a remote rigctl: the unit files are shipped back by a shell script over ssh and
audited here. The script runs for real (in a local `sh`, HOME pointed at a temporary home); only the
ssh hop is left out, which tests/security/test_remote_output.py covers on a loopback sshd."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from rigctl.fleet.host_doctor import host_doctor
from rigctl.fleet.inventory import Host
from rigctl.fleet.snapshot import LINK_NOT_READ, OTHER_HOMES_NOTE
from rigctl.util.proc import Completed

PIN = "docker.io/x/y@sha256:" + "0" * 64


class LocalShell:
    """The Transport protocol, running the command in `sh` here instead of on a remote host."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.answers: list[bytes] = []  # everything the script sent back: what would reach the operator

    def run(self, host: Host, command: str, *, timeout: float) -> Completed:
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "XDG_RUNTIME_DIR": str(self.home / "run")}
        done = subprocess.run(["sh", "-c", command], capture_output=True, timeout=timeout, env=env, check=False)
        self.answers.append(done.stdout)
        return Completed(("sh",), done.returncode, done.stdout.decode(errors="replace"),
                         done.stderr.decode(errors="replace"))


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / ".config/containers/systemd").mkdir(parents=True)
    return tmp_path


def doctor(home: Path) -> tuple[list[dict[str, object]], dict[str, object]]:
    findings, data, _, _ = doctor_answer(home)
    return findings, data


def doctor_answer(home: Path) -> tuple[list[dict[str, object]], dict[str, object], list[str], bytes]:
    """doctor's findings, data and summary, and the raw answer of the script."""
    host = Host(name="box", ssh="box", rigctl="rigctl-not-installed-here")
    shell = LocalShell(home)
    result = host_doctor(host, shell, timeout=60)
    assert result.error is None, result.error
    (answer,) = shell.answers
    return result.findings, result.data, result.summary, answer


@pytest.fixture
def secret(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A file only root reads, outside every unit directory: what a planted name or link points at."""
    path = tmp_path_factory.mktemp("secret") / "shadow"
    path.write_text("root:SECRET-HASH-9c1e:19000::::::\n[Service]\nExecStart=/usr/bin/podman run x\n")
    path.chmod(0o600)
    return path


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


def test_a_path_with_newlines_does_not_ship_the_file_it_spells(home: Path, secret: Path) -> None:
    units = home / ".config/containers/systemd"
    ok = units / "ok.container"
    ok.write_text(f"[Container]\nImage={PIN}\n[Service]\nRestart=always\n")
    trap = Path(f"{units}/x\n{secret}\n")  # find prints .../x<NL>/.../shadow<NL>/y.container as one path
    trap.mkdir(parents=True)
    (trap / "y.container").write_text(f"[Container]\nImage={PIN}\n")
    findings, data, _, answer = doctor_answer(home)
    assert b"SECRET-HASH" not in answer, "the script shipped the file a path with newlines spells"
    assert data["units"] == [str(ok)] and data["skipped"] == [] and findings == []


def test_a_unit_file_that_is_a_link_is_not_read(home: Path, secret: Path) -> None:
    units = home / ".config/containers/systemd"
    ok = units / "ok.container"
    ok.write_text(f"[Container]\nImage={PIN}\n[Service]\nRestart=always\n")
    (units / "leak.container").symlink_to(secret)
    (units / "ok.container.d").mkdir()
    (units / "ok.container.d" / "leak.conf").symlink_to(secret)
    (home / ".config/systemd/user").mkdir(parents=True)
    (home / ".config/systemd/user" / "leak.service").symlink_to(secret)  # mentions podman: an engine's, say
    findings, data, _, answer = doctor_answer(home)
    assert b"SECRET-HASH" not in answer, "the script read a unit file through a link"
    assert data["units"] == [str(ok)] and findings == []
    # named as not read, with the reason; a .service link (systemd's aliases are links) silently
    skipped = data["skipped"]
    assert isinstance(skipped, list)
    assert sorted(skipped, key=str) == [{"path": str(units / name), "reason": LINK_NOT_READ}
                               for name in ("leak.container", "ok.container.d/leak.conf")]


def test_the_result_says_other_users_homes_were_not_audited_when_run_as_root(home: Path) -> None:
    _, _, summary, _ = doctor_answer(home)
    assert (OTHER_HOMES_NOTE in summary) is (os.geteuid() == 0)  # as any other user, rigctl reads no home either
