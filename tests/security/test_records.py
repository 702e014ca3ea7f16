"""rigctl's own state as hostile input (issue #10, items 5, 6 and 9): deployment records, lock files,
unit files, the licence record and the sha256 cache, with real files, symbolic links and FIFOs.

`down --remove` deletes only names, and only in its own directories: a command-line argument or a
record that points elsewhere (absolute, ``..``, ``/``, NUL, empty, another directory) is refused with
exit 3 before anything is stopped or deleted; a link planted as a unit file is removed, never its
target. Every state file read is bounded and refuses FIFOs, non-UTF-8 and deep nesting without a
traceback; every write is a fresh temporary renamed in the opened directory, never through a link.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rigctl.deploy import state as records
from rigctl.deploy.install import install_files, installed_texts, remove_files
from rigctl.deploy.state import ServiceLock
from rigctl.errors import InvalidInputError, UsageError
from rigctl.host.checksums import ChecksumCache, hash_files, sha256_file
from rigctl.host.licenses import accept, read_acceptances
from rigctl.places import Scope
from rigctl.recipe.load import load
from rigctl.render.units import render_units, write_files
from rigctl.util.safefs import RECORD_LIMIT

pytestmark = pytest.mark.timeout(120)

NAME = "sec-records-test"  # unique: as root the lock lives in /run/rigctl/locks
CONTAINER = f"rigctl-{NAME}"
UNIT_FILE = f"{CONTAINER}.container"
DEEP = b"[" * 100_000
NOT_UTF8 = b'{"recipe": "\xff\xfe"}'


def rigctl(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)


FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/systemctl.log"
case "$*" in *" show "*|show*) printf 'LoadState=loaded\\nActiveState=inactive\\nSubState=dead\\n';; esac
exit 0
"""
FAKE_PODMAN = "#!/bin/sh\nexit 125\n"  # `container inspect`: no such container


@dataclass
class Box:
    """A user's state, config and runtime dirs in tmp, and fake systemctl/podman that only log."""

    root: Path
    env: dict[str, str]

    @property
    def units(self) -> Path:
        return self.root / "config" / "containers" / "systemd"

    @property
    def states(self) -> Path:
        return self.root / "state" / "rigctl" / "deployments"

    @property
    def systemctl_calls(self) -> str:
        log = self.root / "bin" / "systemctl.log"
        return log.read_text() if log.exists() else ""

    def record(self, name: str = NAME, **changes: Any) -> dict[str, Any]:
        rec = records.DeploymentRecord(
            recipe=name, scope=Scope.USER, unit=f"rigctl-{name}.service", container=f"rigctl-{name}",
            unit_dir=str(self.units), unit_files=[f"rigctl-{name}.container"], endpoint="http://127.0.0.1:8000",
            served_name="m", image="img")
        return {**json.loads(rec.to_json()), **changes}

    def write_record(self, data: dict[str, Any] | bytes, name: str = NAME) -> Path:
        self.states.mkdir(parents=True, exist_ok=True)
        path = self.states / f"{name}.json"
        path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
        return path

    def down(self, *extra: str, name: str = NAME) -> subprocess.CompletedProcess[str]:
        return rigctl("down", "--user", "--remove", *extra, "--", name, env=self.env)


@pytest.fixture
def box(tmp_path: Path) -> Box:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("systemctl", FAKE_SYSTEMCTL), ("podman", FAKE_PODMAN)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp_path / "home"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_RUNTIME_DIR": str(tmp_path / "run"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    b = Box(tmp_path, env)
    b.units.mkdir(parents=True)
    return b


def snapshot(directory: Path) -> dict[str, bytes | str]:
    """Every entry under ``directory``: file contents, link targets."""
    out: dict[str, bytes | str] = {}
    for p in sorted(directory.rglob("*")):
        rel = str(p.relative_to(directory))
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return out


# --- item 6: a command-line name is a name, never a path ---------------------------------------------


@pytest.mark.parametrize("arg", ["{outside}/settings", "../../../outside/settings", "sub/settings", "",
                                 "Settings", "-settings", "x" * 300])
def test_down_remove_refuses_a_command_line_path(box: Box, arg: str) -> None:
    outside = box.root / "outside"
    outside.mkdir()
    (outside / "settings.json").write_text(json.dumps(box.record("settings")))
    (outside / "settings").write_text("victim\n")
    (box.units / "rigctl-settings.container").write_text("keep\n")
    before = snapshot(box.root / "outside"), snapshot(box.units)
    done = box.down(name=arg.format(outside=outside))
    assert done.returncode == 3, done.stderr
    assert "not a deployment name" in done.stderr and "Traceback" not in done.stderr
    assert (snapshot(box.root / "outside"), snapshot(box.units)) == before  # nothing deleted, no .lock made
    assert "stop" not in box.systemctl_calls


def test_down_remove_refusal_is_one_json_object(box: Box) -> None:
    done = box.down("--json", name="/etc/passwd")
    data = json.loads(done.stdout)
    assert done.returncode == 3 and data["ok"] is False and data["error"]["code"] == "invalid-input"
    assert Path("/etc/passwd").exists()


@pytest.mark.parametrize("bad", ["", "a/b", "/abs", "..", ".", "../x", "x\0y", "UPPER", "x" * 64])
def test_record_names_are_names_in_every_entry_point(tmp_path: Path, bad: str) -> None:
    victim = tmp_path / "x.json"
    victim.write_text("{}")
    assert records.load_record(tmp_path / "state", bad) is None  # no record can have such a name
    with pytest.raises(InvalidInputError):
        records.delete(tmp_path / "state", bad)
    with pytest.raises(InvalidInputError):
        records.record_path(tmp_path / "state", bad)
    assert victim.read_text() == "{}"


# --- item 6: a record names only files of its own deployment, in this scope's quadlet dir -------------


def _outside_victims(box: Box) -> Path:
    outside = box.root / "outside"
    outside.mkdir(exist_ok=True)
    (outside / "victim.container").write_text("victim\n")
    return outside


RECORD_ATTACKS: dict[str, Callable[[Box, Path], dict[str, Any]]] = {
    "absolute unit file": lambda b, o: {"unit_files": [str(o / "victim.container")]},
    "dot-dot unit file": lambda b, o: {"unit_files": ["../../../outside/victim.container"]},
    "unit file with a slash": lambda b, o: {"unit_files": [f"sub/{UNIT_FILE}"]},
    "empty unit file": lambda b, o: {"unit_files": [""]},
    "NUL in unit file": lambda b, o: {"unit_files": [f"{UNIT_FILE}\0x"]},
    "another deployment's file": lambda b, o: {"unit_files": ["rigctl-other.container"]},
    "unit with a path": lambda b, o: {"unit": "../../outside/victim.service"},
    "unit that is an option": lambda b, o: {"unit": "--all.service"},
    "container with a path": lambda b, o: {"container": "../x"},
    "relative unit dir": lambda b, o: {"unit_dir": "outside"},
    "dot-dot unit dir": lambda b, o: {"unit_dir": f"{b.units}/../../../outside"},
    "recipe naming another": lambda b, o: {"recipe": "other"},
    "unit files not a list": lambda b, o: {"unit_files": "victim.container"},
    "scope not a scope": lambda b, o: {"scope": "galaxy"},
}


@pytest.mark.parametrize("attack", sorted(RECORD_ATTACKS))
def test_down_remove_refuses_a_record_pointing_elsewhere(box: Box, attack: str) -> None:
    outside = _outside_victims(box)
    (box.units / UNIT_FILE).write_text("mine\n")
    (box.units / "rigctl-other.container").write_text("other\n")
    record = box.write_record(box.record(**RECORD_ATTACKS[attack](box, outside)))
    before = snapshot(box.root / "outside"), snapshot(box.units), record.read_bytes()
    done = box.down()
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert str(record) in done.stderr and "not a sound deployment record" in done.stderr
    assert "fix: move" in done.stderr and "Traceback" not in done.stderr
    assert (snapshot(box.root / "outside"), snapshot(box.units), record.read_bytes()) == before
    assert "stop" not in box.systemctl_calls


def test_down_remove_refuses_a_record_whose_unit_dir_is_another_directory(box: Box) -> None:
    outside = _outside_victims(box)
    (outside / UNIT_FILE).write_text("victim\n")
    record = box.write_record(box.record(unit_dir=str(outside)))
    done = box.down()
    assert done.returncode == 3 and f"not in this scope's quadlet directory {box.units}" in done.stderr
    assert (outside / UNIT_FILE).read_text() == "victim\n" and record.exists()
    assert "stop" not in box.systemctl_calls  # refused before anything was stopped


def test_down_remove_of_a_linked_unit_file_removes_the_link_only(box: Box) -> None:
    outside = _outside_victims(box)
    (box.units / UNIT_FILE).symlink_to(outside / "victim.container")
    record = box.write_record(box.record())
    done = box.down("--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["removed"] == [str(box.units / UNIT_FILE)]
    assert not os.path.lexists(box.units / UNIT_FILE) and not record.exists()
    assert (outside / "victim.container").read_text() == "victim\n"
    assert "daemon-reload" in box.systemctl_calls


def test_down_remove_refuses_a_linked_record(box: Box) -> None:
    outside = _outside_victims(box)
    target = outside / "victim.json"
    target.write_text(json.dumps(box.record()))
    box.states.mkdir(parents=True)
    (box.states / f"{NAME}.json").symlink_to(target)
    (box.units / UNIT_FILE).write_text("mine\n")
    done = box.down()
    assert done.returncode == 3 and "symbolic link" in done.stderr
    assert target.exists() and os.path.islink(box.states / f"{NAME}.json") and (box.units / UNIT_FILE).exists()


def test_remove_files_checks_every_name_before_removing_any(tmp_path: Path) -> None:
    (tmp_path / "a.container").write_text("a\n")
    (tmp_path / "sub.container").mkdir()
    for names in (["a.container", "../a.container"], ["a.container", ""], ["a.container", "x/y"],
                  ["a.container", "x\0y"], ["a.container", "sub.container"]):
        with pytest.raises(InvalidInputError):
            remove_files(tmp_path, names)
        assert (tmp_path / "a.container").read_text() == "a\n"
    assert remove_files(tmp_path / "missing", ["a.container"]) == []


# --- lock files: created in the lock dir, never through a link --------------------------------------


def test_a_planted_lock_link_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    locks = tmp_path / "locks"
    locks.mkdir()
    (locks / "svc.lock").symlink_to(victim)
    with pytest.raises(InvalidInputError, match="symbolic link"):
        ServiceLock("svc", "down svc", locks).acquire()
    assert victim.read_text() == "precious\n"  # was truncated and overwritten through the link before


def test_a_planted_lock_fifo_or_directory_is_refused_without_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo.lock")
    (tmp_path / "dir.lock").mkdir()
    for service in ("fifo", "dir"):
        with pytest.raises(InvalidInputError):
            ServiceLock(service, "up", tmp_path).acquire()


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "x\0y", ".."])
def test_lock_names_are_plain_names(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidInputError):
        ServiceLock(bad, "up", tmp_path)


# --- item 5/9: every read of a deployment record is bounded and fails clearly --------------------------


def _fifo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)


def _huge(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(size)  # sparse: no disk used


DAMAGE: dict[str, Callable[[Path], object]] = {
    "fifo": _fifo,
    "not UTF-8": lambda p: p.write_bytes(NOT_UTF8),
    "deep nesting": lambda p: p.write_bytes(DEEP),
    "deep objects": lambda p: p.write_bytes(b'{"a":' * 50_000),
    "not JSON": lambda p: p.write_bytes(b"{broken"),
    "wrong types": lambda p: p.write_text(json.dumps({"recipe": 5, "unit_files": {"a": 1}, "accepted": 7, "files": 3})),
    "a list": lambda p: p.write_text("[1, 2]"),
    "too big": lambda p: _huge(p, RECORD_LIMIT + 1),
    "huge integer": lambda p: p.write_text('{"recipe": ' + "9" * 5000 + "}"),
}


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_record_is_a_clear_error_naming_the_file(box: Box, damage: str) -> None:
    path = box.states / f"{NAME}.json"
    box.states.mkdir(parents=True)
    DAMAGE[damage](path)
    (box.units / UNIT_FILE).write_text("mine\n")
    for args in (("down", NAME, "--user"), ("down", NAME, "--user", "--remove")):
        done = rigctl(*args, env=box.env)
        assert done.returncode == 3, (damage, done.stdout, done.stderr)
        assert f"{path}: not a sound deployment record" in done.stderr and "Traceback" not in done.stderr
        assert "fix: move" in done.stderr
    as_json = rigctl("down", NAME, "--user", "--json", env=box.env)
    assert as_json.returncode == 3 and json.loads(as_json.stdout)["error"]["code"] == "invalid-input"
    assert (box.units / UNIT_FILE).exists() and os.path.lexists(path)
    # `status` neither hangs nor crashes on it, and never leaves it out silently: it names it and fails (#31)
    status = rigctl("status", "--user", "--json", env=box.env)
    doc = json.loads(status.stdout)
    assert status.returncode == 7 and doc["services"] == [] and doc["ok"] is False, status.stderr
    assert [r["path"] for r in doc["unreadable_records"]] == [str(path)]
    assert "not a sound deployment record" in doc["unreadable_records"][0]["why"]
    text = rigctl("status", "--user", env={**box.env, "COLUMNS": "400"})
    assert text.returncode == 7 and f"UNREADABLE RECORD {path}: not a sound deployment record" in text.stdout


def test_status_skips_fifo_linked_and_huge_unit_files_without_blocking(box: Box) -> None:
    os.mkfifo(box.units / "rigctl-fifo.container")
    (box.units / "rigctl-link.container").symlink_to("/dev/zero")
    _huge(box.units / "rigctl-huge.container", 2 * 1024 * 1024)
    (box.units / "rigctl-real.container").write_text("[Container]\nLabel=rigctl.managed=true\nImage=i\n")
    done = rigctl("status", "--user", "--json", env=box.env)
    # the one readable unit is installed, never started: a rigctl unit that does not serve is exit 7
    assert done.returncode == 7, done.stderr
    assert [s["unit"] for s in json.loads(done.stdout)["services"]] == ["rigctl-real.service"]


# --- licences ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", sorted(DAMAGE))
def test_a_damaged_license_record_is_a_problem_not_a_traceback(tmp_path: Path, damage: str) -> None:
    store = tmp_path / "licenses.json"
    DAMAGE[damage](store)
    accepted, problem = read_acceptances(store)
    assert accepted == [] and problem is not None and problem.startswith(f"{store}: not a license record")
    with pytest.raises(InvalidInputError, match="not a license record"):
        accept("some-license", path=store)


def test_a_damaged_license_record_is_named_by_the_license_check(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    fixture = Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "h200.json"
    _fifo(tmp_path / "state" / "rigctl" / "licenses.json")
    done = rigctl("preflight", "glm53-flash", "--inventory", str(fixture), "--json", env=env)
    lic = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "license")
    assert lic["severity"] == "fail" and "cannot be read" in lic["message"] and "a FIFO" in lic["message"]
    accepting = rigctl("preflight", "glm53-flash", "--inventory", str(fixture), "--accept-license",
                       "shapleymcg-license-1.0", env=env)
    assert accepting.returncode == 3 and "licenses.json" in accepting.stderr and "Traceback" not in accepting.stderr


def test_accepting_replaces_a_linked_license_record_without_writing_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim.json"
    victim.write_text('{"accepted": []}')
    store = tmp_path / "state" / "licenses.json"
    store.parent.mkdir()
    store.symlink_to(victim)
    accept("a-license", path=store)
    assert not store.is_symlink() and "a-license" in store.read_text()
    assert victim.read_text() == '{"accepted": []}'
    assert [p.name for p in store.parent.iterdir()] == ["licenses.json"]  # no temporary left behind


# --- the sha256 cache: any damage counts as empty -----------------------------------------------------

CACHE_DAMAGE: dict[str, Callable[[Path], object]] = {
    **DAMAGE,
    "files a list": lambda p: p.write_text('{"files": [1]}'),
    "entries strings": lambda p: p.write_text('{"files": {"/x": "abc"}}'),
    "size a string": lambda p: p.write_text('{"files": {"/x": {"size": "1", "mtime_ns": 1, "sha256": "' + "a" * 64
                                            + '"}}}'),
}


@pytest.mark.parametrize("damage", sorted(CACHE_DAMAGE))
def test_a_damaged_checksum_cache_counts_as_empty_and_is_replaced(tmp_path: Path, damage: str) -> None:
    shard = tmp_path / "model.safetensors"
    shard.write_bytes(b"weights")
    cache_file = tmp_path / "cache" / "sha256.json"
    cache_file.parent.mkdir()
    CACHE_DAMAGE[damage](cache_file)
    hashed = hash_files([shard], cache=ChecksumCache(cache_file))
    assert not hashed[0].cached and len(hashed[0].sha256) == 64
    again = hash_files([shard], cache=ChecksumCache(cache_file))  # the rewritten cache is sound
    assert again[0].cached and again[0].sha256 == hashed[0].sha256


def test_a_wrong_typed_cache_entry_for_the_very_file_is_not_trusted(tmp_path: Path) -> None:
    shard = tmp_path / "s"
    shard.write_bytes(b"x")
    st = shard.stat()
    cache_file = tmp_path / "c.json"
    cache_file.write_text(json.dumps({"files": {str(shard): {"size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                                             "sha256": ["not", "a", "digest"]}}}))
    assert not hash_files([shard], cache=ChecksumCache(cache_file))[0].cached


def test_the_cache_is_saved_beside_a_link_not_through_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    cache_file = tmp_path / "cache" / "sha256.json"
    cache_file.parent.mkdir()
    cache_file.symlink_to(victim)
    shard = tmp_path / "s"
    shard.write_bytes(b"x")
    hash_files([shard], cache=ChecksumCache(cache_file))
    assert victim.read_text() == "precious\n" and not cache_file.is_symlink()


def test_hashing_a_fifo_shard_is_refused_not_blocked(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "shard")
    with pytest.raises(InvalidInputError, match="FIFO"):
        sha256_file(tmp_path / "shard")


# --- unit installs and `render --out`: one atomic write, never through a link -------------------------


def test_install_replaces_a_planted_link_and_leaves_identical_files_alone(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    units = tmp_path / "units"
    units.mkdir()
    (units / "a.container").symlink_to(victim)
    (units / "b.container").write_text("same\n")
    inode = (units / "b.container").stat().st_ino
    result = install_files(units, {"a.container": "new\n", "b.container": "same\n"})
    assert [p.name for p in result.written] == ["a.container"] and [p.name for p in result.unchanged] == ["b.container"]
    assert not (units / "a.container").is_symlink() and (units / "a.container").read_text() == "new\n"
    assert victim.read_text() == "precious\n" and (units / "b.container").stat().st_ino == inode
    assert sorted(p.name for p in units.iterdir()) == ["a.container", "b.container"]


def test_install_refuses_names_that_are_not_plain_and_a_directory_in_the_way(tmp_path: Path) -> None:
    for name in ("../escape.container", "a/b.container", "", "x\0.container"):
        with pytest.raises(InvalidInputError):
            install_files(tmp_path / "units", {name: "x\n"})
    (tmp_path / "units" / "d.container").mkdir(parents=True)
    with pytest.raises(InvalidInputError, match="directory"):
        install_files(tmp_path / "units", {"d.container": "x\n"})
    assert not (tmp_path / "escape.container").exists()


def test_installed_texts_refuses_a_fifo_or_link_instead_of_blocking(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "f.container")
    (tmp_path / "l.container").symlink_to("/etc/hostname")
    for name in ("f.container", "l.container"):
        with pytest.raises(InvalidInputError):
            installed_texts(tmp_path, [name])
    assert installed_texts(tmp_path, ["missing.container"]) == {"missing.container": None}


def test_write_files_replaces_a_link_and_refuses_a_file_as_out(tmp_path: Path) -> None:
    rendered = render_units(load("qwen3-8b-vllm").recipe, podman_version=(5, 4))
    name = rendered.files[0].name
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / name).symlink_to(victim)
    write_files(rendered.files, out)
    assert victim.read_text() == "precious\n" and (out / name).read_text() == rendered.files[0].text
    with pytest.raises(UsageError):
        write_files(rendered.files, victim)


def test_render_out_pointing_at_a_file_is_a_usage_error(tmp_path: Path) -> None:
    target = tmp_path / "a-file"
    target.write_text("keep\n")
    for out in (target, target / "below"):
        done = rigctl("render", "qwen3-8b-vllm", "--out", str(out), env=dict(os.environ))
        assert done.returncode == 2 and "--out" in done.stderr and "Traceback" not in done.stderr
    assert target.read_text() == "keep\n"


def test_records_round_trip_and_are_written_atomically(tmp_path: Path) -> None:
    rec = records.DeploymentRecord(recipe=NAME, scope=Scope.USER, unit=f"{CONTAINER}.service", container=CONTAINER,
                                   unit_dir="/x/units", unit_files=[UNIT_FILE], endpoint="http://127.0.0.1:1",
                                   served_name="m", image="i")
    states = tmp_path / "states"
    states.mkdir()
    (states / f"{NAME}.json").symlink_to(tmp_path / "victim")
    records.save(states, rec)
    assert not (tmp_path / "victim").exists() and records.load_record(states, NAME) == rec
    assert records.all_records(states) == [rec]
    bad = records.DeploymentRecord(**{**rec.__dict__, "unit_files": ["../../etc/x.container"]})
    with pytest.raises(InvalidInputError):
        records.save(states, bad)


@pytest.mark.parametrize("engine_log", ["relative/x.log", "/var/lib/rigctl/logs/../../../etc/shadow",
                                        "/var/lib/rigctl/logs/x.txt", "/a/\0b.log"])
def test_a_record_naming_an_odd_engine_log_is_refused(tmp_path: Path, engine_log: str) -> None:
    # `logs` reads the file a record names: only a plain absolute .log path is taken from one
    rec = records.DeploymentRecord(recipe=NAME, scope=Scope.USER, unit=f"{CONTAINER}.service", container=CONTAINER,
                                   unit_dir="/x/units", unit_files=[UNIT_FILE], endpoint="http://127.0.0.1:1",
                                   served_name="m", image="i", engine_log=engine_log)
    assert any(p.startswith("engine_log ") for p in rec.problems())
    fine = records.DeploymentRecord(**{**rec.__dict__, "engine_log": "/var/lib/rigctl/logs/rigctl-x.log"})
    assert fine.problems() == []


# --- issue #31: canary and boot history, and the deployment record, as hostile input -------------------
#
# Each view reads the same files: `status`, `metrics` and `canary NAME` are driven through the real CLI on
# one deployment whose records were damaged or written by hostile engine output.

HOSTILE_TEXT = "a\x1b[31mred\x1b]8;;http://x\x07link\r\nnext\u009bc\u2028\u202e\ufeff\ud800z"
CONTROLS = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff\ud800-\udfff]")


def deployed(box: Box, name: str = NAME, **changes: Any) -> Path:
    (box.units / f"rigctl-{name}.container").write_text("[Container]\nLabel=rigctl.managed=true\nImage=img\n")
    return box.write_record(box.record(name, **changes), name)


def canary_record(box: Box, doc: dict[str, Any] | bytes, name: str = NAME) -> Path:
    path = box.states / "history" / f"{name}.canary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(doc if isinstance(doc, bytes) else json.dumps(doc).encode())
    return path


def sound_canary(**changes: Any) -> dict[str, Any]:
    run = {"at": 1_700_000_000.0, "ok": False, "duration_s": 1.5, "checks": [{"id": "smoke", "status": "fail"}],
           "failed_check": "smoke", "reason": "salad", "ttft_ms": 12.0, "itl_ms": 2.0, "action": "restarted"}
    return {"version": 1, "deployment": NAME,
            "config": {"every_s": 600, "checks": ["smoke"], "on_failure": "restart", "after": 2, "timeout_s": 60,
                       "installed_at": 1_699_999_000.0, "baseline": None},
            "runs": [run], "consecutive_failures": 1, "restarted_in_streak": True,
            "restarts": [{"at": 1_700_000_000.0, "unit": f"{CONTAINER}.service", "after_failures": 2,
                          "reason": "salad"}],
            "counts": {"runs": 3, "failures": 1, "restarts": 1}, **changes}


def boots_record(box: Box, boots: list[dict[str, Any]], name: str = NAME) -> None:
    path = box.states / "history" / f"{name}.boots.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"version": 1, "deployment": name, "boots": boots}))


def sound_boot(**changes: Any) -> dict[str, Any]:
    return {"at": 1_699_999_500.0, "recipe_digest": "sha256:r", "image": "img", "image_digest": None,
            "status": "ready", "total_s": 42.0, "phases": [{"phase": "loading", "s": 40.0}], **changes}


def views(box: Box, name: str = NAME) -> dict[str, subprocess.CompletedProcess[str]]:
    return {"status": rigctl("status", "--user", env=box.env),
            "status --json": rigctl("status", "--user", "--json", env=box.env),
            "metrics": rigctl("metrics", "--user", env=box.env),
            "canary": rigctl("canary", name, "--user", env=box.env),
            "canary --json": rigctl("canary", name, "--user", "--json", env=box.env)}


def exposition_samples(text: str) -> list[Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def no_crash(done: dict[str, subprocess.CompletedProcess[str]]) -> None:
    for command, ran in done.items():
        assert "Traceback" not in ran.stderr and ran.returncode not in (70, 2), (command, ran.returncode, ran.stderr)


# item 5: a record that cannot be read is a failing, visible state

def _too_big(box: Box) -> Path:
    doc = sound_canary()
    doc["padding"] = "x" * (RECORD_LIMIT + 10)  # valid JSON, past what its reader accepts
    return canary_record(box, doc)


def _linked(box: Box) -> Path:
    target = box.root / "elsewhere.json"
    target.write_text(json.dumps(sound_canary()))
    path = box.states / "history" / f"{NAME}.canary.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)
    return path


UNREADABLE: dict[str, Callable[[Box], Path]] = {
    "too big": _too_big,
    "not JSON": lambda b: canary_record(b, b"{broken"),
    "not UTF-8": lambda b: canary_record(b, NOT_UTF8),
    "a list": lambda b: canary_record(b, b"[1, 2]"),
    "a link": _linked,
    "settings damaged": lambda b: canary_record(b, sound_canary(config={"every_s": "600", "checks": ["smoke"]})),
    "baseline damaged": lambda b: canary_record(b, sound_canary(config={**sound_canary()["config"],
                                                                        "baseline": {"answers": [{"x": 1}]}})),
}


@pytest.mark.parametrize("damage", sorted(UNREADABLE))
def test_an_unreadable_canary_record_is_failing_in_every_view(box: Box, damage: str) -> None:
    deployed(box)
    UNREADABLE[damage](box)
    done = views(box)
    no_crash(done)
    assert "has no canary" not in done["canary"].stdout
    assert "cannot be read" in done["canary"].stdout and done["canary"].returncode == 1, done["canary"]
    shown = json.loads(done["canary --json"].stdout)
    assert shown["ok"] is False and shown["canary"]["unreadable"], shown
    assert "canary: cannot be read" in done["status"].stdout, done["status"].stdout
    service = json.loads(done["status --json"].stdout)["services"][0]
    assert service["canary"]["unreadable"]
    ok = [s.value for s in exposition_samples(done["metrics"].stdout) if s.name == "rigctl_canary_ok"]
    assert ok == [0], done["metrics"].stdout


# items 6 and 7: hostile strings reach no view raw, and never break the exposition

def test_hostile_strings_in_the_records_are_shown_escaped_and_parse_as_prometheus(box: Box) -> None:
    deployed(box, served_name=HOSTILE_TEXT, image=HOSTILE_TEXT,
             last_failure={"status": HOSTILE_TEXT, "detail": HOSTILE_TEXT, "signatures": [HOSTILE_TEXT]})
    doc = sound_canary()
    doc["config"]["checks"] = [HOSTILE_TEXT]
    doc["runs"][0].update(reason=HOSTILE_TEXT, failed_check=HOSTILE_TEXT, action=HOSTILE_TEXT,
                          checks=[{"id": HOSTILE_TEXT, "status": HOSTILE_TEXT}])
    doc["restarts"][0].update(reason=HOSTILE_TEXT, unit=HOSTILE_TEXT)
    canary_record(box, doc)
    boots_record(box, [sound_boot(status=HOSTILE_TEXT, image=HOSTILE_TEXT,
                                  phases=[{"phase": HOSTILE_TEXT, "s": 1.0}])])
    done = views(box)
    no_crash(done)
    for command in ("status", "canary", "metrics"):
        out = done[command].stdout
        assert not CONTROLS.search(out), (command, out)
    assert "salad" not in done["canary"].stdout and "\\x1b[31mred" in done["canary"].stdout
    samples = exposition_samples(done["metrics"].stdout)
    info = [s for s in samples if s.name == "rigctl_deployment_info"]
    assert len(info) == 1 and info[0].labels["deployment"] == NAME and "\\x1b[31mred" in info[0].labels["model"]
    assert {s.name for s in samples} >= {"rigctl_up", "rigctl_canary_ok", "rigctl_canary_runs_total"}
    textfile = box.root / "prom"
    textfile.mkdir()
    written = rigctl("metrics", "--user", "--textfile", str(textfile), env=box.env)
    assert written.returncode == 0 and "Traceback" not in written.stderr, written.stderr
    assert len(exposition_samples((textfile / "rigctl.prom").read_text())) == len(samples)


def test_a_lone_surrogate_in_an_engines_error_is_kept_and_shown_escaped(box: Box, tmp_path: Path) -> None:
    """verify reads it from the engine's JSON error; the canary keeps it as the failure's reason; every
    view afterwards shows it escaped."""
    import http.server
    import threading

    class Engine(http.server.BaseHTTPRequestHandler):
        def _send(self, code: int, body: str) -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.startswith("/v1/models"):
                self._send(200, json.dumps({"data": [{"id": "m", "max_model_len": 4096}]}))
            else:
                self._send(200, "{}")

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self._send(500, '{"error": {"message": "bad \\ud800 \\u001b[31m \\u2028 x"}}')

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        for extra in ((), ("--json",)):
            done = rigctl("verify", "--url", url, "--model", "m", "--checks", "health,smoke", *extra, env=box.env)
            assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
            assert not CONTROLS.search(done.stdout) and "\\ud800" in done.stdout, done.stdout
        from rigctl.deploy import canary, history

        deployed(box)
        state_dir = box.states
        history.save_canary(state_dir, NAME, history.CanaryState(config=history.CanaryConfig(
            600, ["smoke"], "none", 2, 60)))

        def probe(request_timeout_s: float) -> canary.CanaryVerdict:
            reason = "'The capital of France is': POST /v1/completions answered 500: bad \ud800 \x1b[31m x"
            return canary.CanaryVerdict(False, [], "smoke", reason)

        canary.run_once(NAME, engine_unit=f"{CONTAINER}.service", scope=Scope.USER, state_dir=state_dir, probe=probe,
                        systemd=None, lock=lambda: None)  # type: ignore[arg-type]
    finally:
        server.shutdown()
    done = views(box)
    no_crash(done)
    for command in ("status", "canary"):
        assert "\\ud800" in done[command].stdout and not CONTROLS.search(done[command].stdout), done[command].stdout


# item 7: every number read from a record or a history is bounded and typed

DAMAGED_NUMBERS: dict[str, Any] = {
    "negative": -5, "huge": 10**400, "huge float": 1e308, "nan string": "NaN", "inf string": "inf",
    "nan": float("nan"), "infinity": float("-inf"), "bool": True, "numeric string": "12", "object": {"a": 1},
    "list": [1], "null": None,
}


def _damage_history(box: Box, value: Any) -> None:
    doc = sound_canary()
    for key in ("every_s", "timeout_s", "after", "installed_at"):
        doc["config"][key] = value
    for key in ("at", "duration_s", "ttft_ms", "itl_ms"):
        doc["runs"][0][key] = value
    doc["runs"].append({**doc["runs"][0], "ok": value})
    doc["consecutive_failures"] = value
    doc["restarted_in_streak"] = value
    doc["restarts"][0].update(at=value, after_failures=value)
    doc["counts"] = {"runs": value, "failures": value, "restarts": value}
    canary_record(box, doc)
    boots_record(box, [sound_boot(at=value), sound_boot(total_s=value),
                       sound_boot(phases=[{"phase": "loading", "s": value}])])


@pytest.mark.parametrize("value", sorted(DAMAGED_NUMBERS))
def test_damaged_history_numbers_crash_no_view(box: Box, value: str) -> None:
    deployed(box)
    _damage_history(box, DAMAGED_NUMBERS[value])
    done = views(box)
    no_crash(done)
    for command in ("status", "canary"):
        assert done[command].returncode in (0, 1, 7) and not CONTROLS.search(done[command].stdout), done[command]
    samples = exposition_samples(done["metrics"].stdout)
    assert all(math.isfinite(s.value) and 0 <= s.value < 1e15 for s in samples), done["metrics"].stdout


@pytest.mark.parametrize("value", sorted(DAMAGED_NUMBERS))
@pytest.mark.parametrize("field", ["installed_at", "stopped_at", "warmup_budget_s", "last_failure.exit_status",
                                   "last_failure.at"])
def test_damaged_record_numbers_crash_no_view(box: Box, field: str, value: str) -> None:
    damaged = DAMAGED_NUMBERS[value]
    changes: dict[str, Any] = ({"last_failure": {"status": "died", "detail": "x", field.split(".")[1]: damaged,
                                                 **({"exit_status": 137} if field.endswith(".at") else {})}}
                               if field.startswith("last_failure.") else {field: damaged})
    deployed(box, **changes)
    canary_record(box, sound_canary())
    for command in ("status", "metrics"):
        ran = rigctl(command, "--user", env=box.env)
        assert "Traceback" not in ran.stderr and ran.returncode in (0, 7), (command, ran.returncode, ran.stderr)
        assert not CONTROLS.search(ran.stdout)
        if command == "metrics":
            assert all(math.isfinite(s.value) for s in exposition_samples(ran.stdout))


def test_the_reader_bounds_each_number_of_the_canary_record() -> None:
    """One reader: what comes out of it is typed and bounded, whatever was in the file."""
    from rigctl.deploy import history

    for value in DAMAGED_NUMBERS.values():
        for key in ("at", "duration_s", "ttft_ms", "itl_ms"):
            run = history.read_run({**sound_canary()["runs"][0], key: value})
            assert run is not None
            got = run[key]
            assert got is None or (type(got) is float and math.isfinite(got) and 0 <= got < 1e12), (key, value, got)
        if not isinstance(value, bool):
            assert history.read_run({**sound_canary()["runs"][0], "ok": value}) is None


# item 5: a record is refused at write when its reader would refuse it

def test_a_baseline_whose_record_would_be_too_large_is_refused_up_front(tmp_path: Path) -> None:
    from rigctl.deploy import canary, history

    # fits the export's own limit as written, but not once re-encoded as \\uXXXX in the record
    text = "é" * (RECORD_LIMIT // 12)
    baseline = {"recipe": "demo", "model": "m", "date": "2026-01-01", "image_digest": None, "source": "/x.json",
                "answers": [{"source": f"smoke[{i}]", "prompt": "p", "messages": None, "max_tokens": 16, "text": text}
                            for i in range(5)]}
    assert len(json.dumps(baseline, ensure_ascii=False).encode()) < RECORD_LIMIT
    units, states = tmp_path / "units", tmp_path / "state"

    class Systemd:
        def __getattr__(self, name: str) -> Callable[..., None]:
            raise AssertionError(f"systemd asked to {name} for a canary that was refused")

    with pytest.raises(InvalidInputError, match="too large"):
        canary.install("demo", engine_unit="rigctl-demo.service", every_s=600, checks=["smoke"], on_failure="none",
                       after=2, timeout_s=60, command=["/usr/bin/python3"], unit_dir=units, state_dir=states,
                       systemd=Systemd(), now=1.0, baseline=baseline)  # type: ignore[arg-type]
    assert not units.exists() or not list(units.iterdir())
    assert history.canary_state(states, "demo").summary() is None
    # and the writer itself refuses what its reader would refuse, the file left as it was
    history.save_canary(states, "demo", history.CanaryState(config=history.CanaryConfig(600, ["smoke"], "none", 2, 60)))
    before = (states / "history" / "demo.canary.json").read_bytes()
    big = history.CanaryState(config=history.CanaryConfig(600, ["smoke"], "none", 2, 60, baseline=baseline))
    with pytest.raises(InvalidInputError, match="too large"):
        history.save_canary(states, "demo", big)
    assert (states / "history" / "demo.canary.json").read_bytes() == before


def test_a_deployment_record_too_large_to_read_back_is_refused_at_write(tmp_path: Path) -> None:
    rec = records.DeploymentRecord(recipe=NAME, scope=Scope.USER, unit=f"{CONTAINER}.service", container=CONTAINER,
                                   unit_dir="/x/units", unit_files=[UNIT_FILE], endpoint="http://127.0.0.1:1",
                                   served_name="m", image="i", last_failure={"detail": "\u00e9" * (RECORD_LIMIT // 5)})
    with pytest.raises(InvalidInputError, match="too large"):
        records.save(tmp_path, rec)
    assert not (tmp_path / f"{NAME}.json").exists()


# item 7: --every and --timeout are parsed strictly

@pytest.mark.parametrize("args", [("--every", "²m"), ("--every", "٣m"), ("--every", "9" * 5000),
                                  ("--every", "1e3"), ("--every", "-5m"), ("--every", "0m"), ("--every", "8d"),
                                  ("--every", "10m", "--timeout", "³s"), ("--every", "10m", "--timeout", "10000000000s"),
                                  ("--every", "10m", "--timeout", "0s"), ("--every", "10m", "--timeout", "2d"),
                                  ("--every", "10m", "--after", "100000000")])
def test_canary_spans_are_parsed_strictly(box: Box, args: tuple[str, ...]) -> None:
    deployed(box)
    done = rigctl("canary", NAME, "--user", *args, env=box.env)
    assert done.returncode == 2 and "Traceback" not in done.stderr, (done.returncode, done.stderr)
    shown = args[-1] if len(args[-1]) < 60 else args[-1][:20]
    assert shown in done.stderr, done.stderr
    assert not (box.root / "config" / "systemd").exists()  # nothing installed


# item 7: the interpreter a root canary unit runs must be root's alone

def test_a_root_canary_refuses_an_interpreter_someone_else_controls(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from rigctl import invocation
    from rigctl.deploy import canary

    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    python = venv / "python"
    python.symlink_to(sys.executable)
    if os.geteuid() == 0:
        os.chown(tmp_path / "venv", 1000, 1000)  # a user's venv: its .pth files would run as root
    monkeypatch.setattr(invocation, "is_root", lambda: True)
    with pytest.raises(UsageError) as refused:
        canary.command_for("demo", Scope.SYSTEM, str(python))
    assert str(python) in str(refused.value) and refused.value.fix and "root" in refused.value.fix
    trusted = "/usr/bin/python3"
    if os.path.exists(trusted) and invocation.program_refusal(trusted) is None:
        assert canary.command_for("demo", Scope.SYSTEM, trusted)[0] == trusted
