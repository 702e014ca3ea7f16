"""`rigctl fleet doctor --fix` reaches the hosts: on real loopback sshd hosts, a host whose `rigctl:` is a
real rigctl (this venv's) gets its managed unit rewritten by that rigctl (Restart=always, a backup kept)
and a patch for the unmanaged one; a host without rigctl is changed in no way and says why. What a
remote rigctl answers to `doctor --fix` is checked like every other remote answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rigctl.exitcodes import ExitCode

UNITS = Path(__file__).parent / "units"
MANAGED = "rigctl-qwen3-8b.container"  # Label=rigctl.managed=true, Restart=on-failure and three more fixable faults
UNMANAGED = "glm53-flash.container"  # the story's unit: Restart=on-failure, nobody's label
REAL_RIGCTL = str(Path(sys.executable).with_name("rigctl"))


def _hosts_file(fleet: Any, where: Path, programs: dict[str, str]) -> Path:
    """A hosts file naming each of ``programs``' hosts with its own `rigctl:` program."""
    lines = ["defaults:", f"  identity_file: {json.dumps(str(fleet.client_key))}",
             "hosts:"]
    for host in fleet.hosts:
        if host.name in programs:
            lines += [f"  - name: {host.name}", "    ssh: 127.0.0.1", f"    port: {host.port}",
                      f"    rigctl: {json.dumps(programs[host.name])}"]
    path = where / "hosts.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _user_units(home: Path) -> Path:
    """The host's own quadlet directory (its HOME comes from the sshd's SetEnv), with the two units."""
    units = home / ".config" / "containers" / "systemd"
    if units.exists():
        for old in units.iterdir():
            old.unlink()
    units.mkdir(parents=True, exist_ok=True)
    for name in (MANAGED, UNMANAGED):
        (units / name).write_text((UNITS / name).read_text())
    return units


def _rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def _one_json(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    assert isinstance(doc, dict)
    return doc


def test_fix_through_the_remote_rigctl_and_nothing_where_there_is_none(
    ssh_fleet: Any, private_control_dir: Any, tmp_path: Path
) -> None:
    with_rigctl, without = ssh_fleet.hosts[0], ssh_fleet.hosts[1]
    assert Path(REAL_RIGCTL).is_file()
    fixed_dir, bare_dir = _user_units(with_rigctl.home), _user_units(without.home)
    bare_before = {p.name: p.read_bytes() for p in bare_dir.iterdir()}
    unmanaged_before = (fixed_dir / UNMANAGED).read_bytes()
    inventory = str(_hosts_file(ssh_fleet, tmp_path, {with_rigctl.name: REAL_RIGCTL,
                                                       without.name: "/nonexistent/bin/rigctl"}))

    done = _rigctl("fleet", "doctor", "--fix", "--hosts", inventory, "--json")
    doc = _one_json(done)
    hosts = {h["name"]: h for h in doc["hosts"]}

    # the host with rigctl: its rigctl rewrote the managed unit, kept a backup, and left the other a patch
    fixed = hosts[with_rigctl.name]
    assert fixed["via"] == "rigctl", fixed
    assert fixed["error"] is None
    fix = fixed["data"]["fix"]
    assert fix["error"] is None
    (applied,) = fix["applied"]
    assert applied["unit"] == str(fixed_dir / MANAGED)
    assert "restart-not-always" in applied["fixed"]
    (backup,) = applied["backups"]
    assert Path(backup).read_text() == (UNITS / MANAGED).read_text()  # the backup is the unit as it was
    text = (fixed_dir / MANAGED).read_text()
    assert "Restart=always" in text and "Restart=on-failure" not in text
    assert (fixed_dir / UNMANAGED).read_bytes() == unmanaged_before  # not rigctl's: only a patch
    (patch,) = fix["patches"]
    assert patch["unit"] == str(fixed_dir / UNMANAGED)
    assert patch["fixed"] == ["restart-not-always"]
    assert "not managed by rigctl" in patch["why"]
    assert "+Restart=always" in patch["patch"] and "-Restart=on-failure" in patch["patch"]
    remaining = {(f["unit"], f["id"]) for f in fix["remaining"] if f["severity"] == "fail"}
    assert remaining == {(str(fixed_dir / UNMANAGED), "restart-not-always")}
    assert fixed["ok"] is False  # the unmanaged unit still fails

    # the host without rigctl: audited from the shipped files, changed in no way, and it says why
    bare = hosts[without.name]
    assert bare["via"] == "ssh", bare
    assert f"rigctl is not installed on {without.name}" in bare["data"]["fix"]["error"]
    assert bare["data"]["fix"]["applied"] == []
    assert {p["unit"] for p in bare["data"]["fix"]["patches"]} == {str(bare_dir / MANAGED), str(bare_dir / UNMANAGED)}
    assert {p.name: p.read_bytes() for p in bare_dir.iterdir()} == bare_before  # no rewrite, no backup
    assert done.returncode == ExitCode.CHECKS_FAILED

    # the text view says the same per host; run again, the managed unit needs nothing any more
    text_run = _rigctl("fleet", "doctor", "--fix", "--hosts", inventory)
    assert text_run.returncode == ExitCode.CHECKS_FAILED, text_run.stderr
    out = text_run.stdout
    assert f"left untouched: {fixed_dir / UNMANAGED} (not managed by rigctl" in out
    assert f"fixed {fixed_dir / MANAGED}" not in out  # already fixed by the first run
    assert f"--fix changed nothing: rigctl is not installed on {without.name}" in out
    assert len(list(fixed_dir.glob(f"{MANAGED}*.bak*"))) == 1  # nothing rewritten the second time


def _fake_rigctl(where: Path, document: dict[str, Any], rc: int) -> tuple[Path, Path]:
    """A remote "rigctl" that answers ``document`` (as rigctl would print it) and records its argv."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "out").write_text(json.dumps({"rigctl": "1", "command": "doctor", "ok": rc == 0, **document}))
    args = where / "args"
    script = where / "rigctl"
    script.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" > '{args}'\ncat '{where / 'out'}'\nexit {rc}\n")
    script.chmod(0o755)
    return script, args


FINDING = {"unit": "/u/a.container", "id": "restart-not-always", "severity": "fail", "message": "m", "fix": "f",
           "where": "/u/a.container", "line": 3, "managed": True, "autofix": True}
APPLIED = {"unit": "/u/a.container", "files": ["/u/a.container"], "backups": ["/u/a.container.bak"],
           "fixed": ["restart-not-always"], "patch": "--- a\n+++ b\n",
           # what doctor --fix says of the manager after its reload (doctor.checkup.AppliedFix)
           "service": "a.service", "scope": "system", "reloaded": True, "expected": {"Restart": "always"},
           "live": {"Restart": "always"}, "in_effect": True, "needs_restart": False, "restarted": False,
           "next_steps": [], "problem": None}


@pytest.mark.parametrize(("fix", "expect"), [
    (None, "fix: missing"),
    ({"applied": [{**APPLIED, "backups": "/u/a.container.bak"}], "patches": [], "remaining": []}, "backups"),
    ({"applied": [], "patches": [{"unit": "/u/b.container", "fixed": ["x"], "patch": 7}], "remaining": []}, "patch"),
    ({"applied": [], "patches": [], "remaining": [{**FINDING, "severity": "bad"}]}, "severity"),
])
def test_a_malformed_fix_report_is_a_failing_finding(
    ssh_fleet: Any, private_control_dir: Any, tmp_path: Path, fix: dict[str, Any] | None, expect: str
) -> None:
    document: dict[str, Any] = {"findings": [FINDING], "units": ["/u/a.container"], "counts": {"fail": 0}}
    if fix is not None:
        document["fix"] = fix
    script, args = _fake_rigctl(tmp_path / "p", document, 0)
    inventory = _hosts_file(ssh_fleet, tmp_path, {ssh_fleet.hosts[2].name: str(script)})
    done = _rigctl("fleet", "doctor", "--fix", "--hosts", str(inventory), "--json")
    doc = _one_json(done)
    assert done.returncode == ExitCode.CHECKS_FAILED
    assert args.read_bytes().split(b"\0")[:-1] == [b"doctor", b"--fix", b"--json"]
    (host,) = doc["hosts"]
    assert host["ok"] is False  # the remote said ok, but an answer with a wrong shape cannot be taken
    bad = [f for f in host["findings"] if f["id"] == "remote-malformed-answer"]
    assert len(bad) == 1 and bad[0]["severity"] == "fail"
    assert expect in bad[0]["message"]


def test_a_well_formed_fix_report_is_taken_as_it_is(ssh_fleet: Any, private_control_dir: Any, tmp_path: Path) -> None:
    fix = {"applied": [APPLIED], "patches": [], "error": None, "restart": False, "remaining": []}
    document = {"findings": [FINDING], "units": ["/u/a.container"], "counts": {"fail": 0}, "fix": fix}
    script, _ = _fake_rigctl(tmp_path / "p", document, 0)
    inventory = _hosts_file(ssh_fleet, tmp_path, {ssh_fleet.hosts[2].name: str(script)})
    done = _rigctl("fleet", "doctor", "--fix", "--hosts", str(inventory), "--json")
    doc = _one_json(done)
    assert done.returncode == ExitCode.OK, doc
    (host,) = doc["hosts"]
    assert host["ok"] is True  # what it found was fixed: nothing remains
    assert host["findings"] == [FINDING]
    assert host["data"]["fix"] == fix


def test_a_remote_applied_fix_is_read_in_doctor_s_own_shape() -> None:
    """One shape at both ends: what a local doctor --fix writes (asdict of doctor.checkup.AppliedFix) is what the
    fleet reads back, field for field, and strictly (a value of another type is refused, not coerced)."""
    from dataclasses import asdict, fields

    from pydantic import ValidationError

    from rigctl.doctor.checkup import AppliedFix
    from rigctl.fleet.doctor_answer import RemoteApplied

    written = asdict(AppliedFix(**APPLIED))
    assert set(RemoteApplied.model_fields) == {f.name for f in fields(AppliedFix)} == set(written)
    assert RemoteApplied.model_validate({**written, "newer": 1}).model_dump() == written
    for wrong in ({"reloaded": 1}, {"live": {"Restart": 3}}, {"files": "/u/a.container"}):
        with pytest.raises(ValidationError):
            RemoteApplied.model_validate({**written, **wrong})
