"""`doctor --fix` run as root must never be a way in (issue #10, items 1, 2, 4, 5 and 10).

Every test builds real files, links, FIFOs and directories owned by other uids in tmp_path, runs the
real doctor (as a library call or as a separate `python -m rigctl` process, bounded in time) and
checks what is on disk afterwards.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rigctl.doctor.audit import audit
from rigctl.doctor.checkup import doctor
from rigctl.doctor.discover import path_roots
from rigctl.doctor.fix import FileChange, rewrite
from rigctl.doctor.host_state import DoctorFacts, unpinned_images
from rigctl.errors import UsageError
from rigctl.host.unitdirs import Root, collect, default_roots
from rigctl.host.unitsnapshot import local_snapshot
from rigctl.util.safefs import InvalidInputError

PIN = "docker.io/x/y@sha256:" + "0" * 64
MANAGED = f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true\n[Service]\nRestart=no\n"
UNMANAGED = f"[Container]\nImage={PIN}\n[Service]\nRestart=no\n"
NO_HOST = DoctorFacts()
ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to make files owned by other users")


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """The real command in its own process: a hang shows as a timeout, not a stuck test run."""
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True,
                          timeout=timeout, check=False)


def secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir(exist_ok=True)
    target = outside / "authorized_keys"
    target.write_text("secret\n")
    target.chmod(0o600)
    return target


def fix(units: Path) -> dict[str, object]:
    done = cli("doctor", "--fix", "--json", "--path", str(units))
    assert done.returncode in (0, 1), done.stderr
    data: dict[str, object] = json.loads(done.stdout)
    return data


# --- 1. the backup is never written through a link, and never overwritten ------------------------------


@pytest.mark.parametrize("shape", ["to-file", "dangling", "to-directory", "relative", "chain"])
def test_bak_link_is_never_followed(tmp_path: Path, shape: str) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "b.container").write_text(MANAGED)
    target = secret(tmp_path)
    bak = units / "b.container.bak"
    if shape == "to-file":
        bak.symlink_to(target)
    elif shape == "dangling":
        bak.symlink_to(tmp_path / "outside" / "created-by-root")
    elif shape == "to-directory":
        bak.symlink_to(tmp_path / "outside")
    elif shape == "relative":
        bak.symlink_to(Path("..") / "outside" / "authorized_keys")
    else:
        (units / "hop").symlink_to(target)
        bak.symlink_to(units / "hop")
    before = {p.name: (p.read_bytes(), p.stat().st_mode) for p in (tmp_path / "outside").iterdir()}

    data = fix(units)

    after = {p.name: (p.read_bytes(), p.stat().st_mode) for p in (tmp_path / "outside").iterdir()}
    assert after == before, "a file outside the unit directory changed"
    assert bak.is_symlink(), "the planted link itself must stay as it was"
    assert "Restart=always" in (units / "b.container").read_text()
    (applied,) = data["fix"]["applied"]  # type: ignore[index]
    assert applied["backups"] == [str(units / "b.container.bak.1")]
    assert (units / "b.container.bak.1").read_text() == MANAGED


def test_second_fix_keeps_the_first_backup(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    unit = units / "b.container"
    unit.write_text(MANAGED)
    fix(units)
    first_fixed = unit.read_text()
    unit.write_text(first_fixed.replace("Restart=always", "Restart=on-failure"))
    fix(units)
    assert (units / "b.container.bak").read_text() == MANAGED  # the original survives
    assert "Restart=on-failure" in (units / "b.container.bak.1").read_text()
    assert "Restart=always" in unit.read_text()


def test_backup_keeps_mode_and_no_temporary_is_left(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    unit = units / "b.container"
    unit.write_text(MANAGED)
    unit.chmod(0o600)
    fix(units)
    assert (unit.stat().st_mode & 0o777, (units / "b.container.bak").stat().st_mode & 0o777) == (0o600, 0o600)
    assert sorted(p.name for p in units.iterdir()) == ["b.container", "b.container.bak"]


# --- 2. --path DIR is a boundary, and each user is on their own ----------------------------------------


@pytest.mark.parametrize("shape", ["absolute", "relative", "through-dir-link"])
def test_unit_that_is_a_link_is_audited_but_never_rewritten(tmp_path: Path, shape: str) -> None:
    units = tmp_path / "units"
    units.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    real = outside / "real.container"
    real.write_text(MANAGED)
    link = units / "b.container"
    if shape == "absolute":
        link.symlink_to(real)
    elif shape == "relative":
        link.symlink_to(Path("..") / "outside" / "real.container")
    else:
        (units / "hop").symlink_to(outside)
        link.symlink_to(units / "hop" / "real.container")

    data = fix(units)

    assert real.read_text() == MANAGED
    assert sorted(p.name for p in outside.iterdir()) == ["real.container"], "a .bak appeared beside the target"
    assert link.is_symlink()
    assert data["fix"]["applied"] == []  # type: ignore[index]
    (patch,) = data["fix"]["patches"]  # type: ignore[index]
    assert "symbolic link" in patch["why"] and "+Restart=always" in patch["patch"]
    assert {f["id"] for f in data["findings"]} == {"restart-not-always"}  # type: ignore[attr-defined]


@pytest.mark.parametrize("where", ["container.d", "b.container.d", "service.d", "b.service.d"])
def test_dropin_label_does_not_make_a_unit_managed(tmp_path: Path, where: str) -> None:
    units = tmp_path / "units"
    (units / where).mkdir(parents=True)
    (units / "b.container").write_text(UNMANAGED)
    (units / where / "10-mine.conf").write_text("[Container]\nLabel=rigctl.managed=true\n")
    data = fix(units)
    assert (units / "b.container").read_text() == UNMANAGED
    (patch,) = data["fix"]["patches"]  # type: ignore[index]
    assert "not managed by rigctl" in patch["why"]


@pytest.mark.parametrize("how", ["dropin-link", "dropin-dir-link"])
def test_dropin_outside_the_directory_is_not_rewritten(tmp_path: Path, how: str) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "b.container").write_text(MANAGED.replace("Restart=no\n", ""))
    outside = tmp_path / "outside"
    outside.mkdir()
    weak = outside / "10-weak.conf"
    weak.write_text("[Service]\nRestart=no\n")
    if how == "dropin-link":
        (units / "b.container.d").mkdir()
        (units / "b.container.d" / "10-weak.conf").symlink_to(weak)
    else:
        (units / "b.container.d").symlink_to(outside)
    fix(units)
    assert weak.read_text() == "[Service]\nRestart=no\n"
    assert sorted(p.name for p in outside.iterdir()) == ["10-weak.conf"]


def test_subdirectory_link_is_not_walked(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "c.container").write_text(MANAGED)
    (units / "sub").symlink_to(outside)
    data = fix(units)
    assert data["units"] == []
    assert (outside / "c.container").read_text() == MANAGED


@ROOT_ONLY
@pytest.mark.parametrize("owner", [12345, 0])
def test_file_not_owned_by_the_directory_owner_is_only_patched(tmp_path: Path, owner: int) -> None:
    units = tmp_path / "units"
    units.mkdir()
    os.chown(units, 23456, 23456)  # the directory is "alice's"
    unit = units / "b.container"
    unit.write_text(MANAGED)
    os.chown(unit, owner, owner)
    data = fix(units)
    assert unit.read_text() == MANAGED
    assert not (units / "b.container.bak").exists()
    (patch,) = data["fix"]["patches"]  # type: ignore[index]
    assert f"owned by uid {owner}, not by uid 23456" in patch["why"]


@ROOT_ONLY
def test_root_fix_writes_as_the_owner_of_the_file(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    os.chown(units, 23456, 23457)
    unit = units / "b.container"
    unit.write_text(MANAGED)
    os.chown(unit, 23456, 23457)
    unit.chmod(0o640)
    fix(units)
    for path in (unit, units / "b.container.bak"):
        st = path.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (23456, 23457, 0o640), path


def _home(base: Path, name: str, uid: int) -> Path:
    home = base / name
    quadlets = home / ".config" / "containers" / "systemd"
    quadlets.mkdir(parents=True)
    for p in (home, home / ".config", home / ".config" / "containers", quadlets):
        os.chown(p, uid, uid)
    return home


def _own(path: Path, uid: int) -> None:
    os.chown(path, uid, uid)


@ROOT_ONLY
def test_root_over_homes_keeps_each_users_dropins_to_themselves(tmp_path: Path) -> None:
    alice = _home(tmp_path / "home", "alice", 1501)
    bob = _home(tmp_path / "home", "bob", 1502)
    a_dir = alice / ".config/containers/systemd"
    b_dir = bob / ".config/containers/systemd"
    (a_dir / "container.d").mkdir()
    (a_dir / "container.d" / "50-evil.conf").write_text("[Service]\nRestart=no\nExecStartPre=/bin/touch /tmp/pwn\n")
    (b_dir / "web.container").write_text(MANAGED.replace("Restart=no", "Restart=always"))
    for p in (a_dir / "container.d", a_dir / "container.d" / "50-evil.conf", b_dir / "web.container"):
        _own(p, 1501 if "alice" in str(p) else 1502)
    roots = [r for r in default_roots(str(tmp_path / "root"), None, 0, [str(alice), str(bob)])
             if r.path.startswith(str(tmp_path))]
    units = collect(local_snapshot(roots).files, roots)
    (web,) = units
    assert web.dropins == (), "alice's drop-in was applied to bob's unit"
    assert audit(units, NO_HOST) == []


@ROOT_ONLY
def test_root_over_homes_does_not_follow_a_users_config_link(tmp_path: Path) -> None:
    system = tmp_path / "etc-containers-systemd"  # root's own directory
    system.mkdir()
    (system / "root.container").write_text(MANAGED)
    home = tmp_path / "home" / "mallory"
    (home / ".config" / "containers").mkdir(parents=True)
    (home / ".config" / "containers" / "systemd").symlink_to(system)
    for p in (home, home / ".config", home / ".config" / "containers"):
        _own(p, 1503)
    roots = [r for r in default_roots(str(tmp_path / "root"), None, 0, [str(home)])
             if r.path.startswith(str(tmp_path))]
    report = doctor(fix=True, facts=NO_HOST, roots=roots)
    assert (system / "root.container").read_text() == MANAGED
    assert report.units == []
    assert any("symbolic link" in s.reason for s in report.skipped), report.skipped


@ROOT_ONLY
def test_root_over_homes_does_not_read_root_files_through_a_users_link(tmp_path: Path) -> None:
    home = _home(tmp_path / "home", "mallory", 1504)
    quadlets = home / ".config/containers/systemd"
    private = tmp_path / "root-only.container"
    private.write_text(MANAGED.replace(PIN, "docker.io/secret/name:tag"))
    private.chmod(0o600)
    (quadlets / "x.container").symlink_to(private)
    roots = [r for r in default_roots(str(tmp_path / "root"), None, 0, [str(home)])
             if r.path.startswith(str(tmp_path))]
    report = doctor(fix=True, facts=NO_HOST, roots=roots)
    assert report.units == []
    assert "secret" not in json.dumps(report.to_dict())
    (skip,) = report.skipped
    assert "owned by uid 0, not by uid 1504" in skip.reason


# --- all or nothing ------------------------------------------------------------------------------------


def test_fixes_are_all_or_nothing_when_a_file_changes_under_doctor(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    for name in ("a.container", "b.container"):
        (units / name).write_text(MANAGED)
    snap = local_snapshot(path_roots([str(units)]))
    (units / "b.container").write_text(MANAGED + "# edited meanwhile\n")
    changes = [FileChange(str(units / n), MANAGED, MANAGED.replace("no", "always")) for n in ("a.container", "b.container")]
    with pytest.raises(InvalidInputError, match="edited since doctor read it"):
        rewrite(changes, snap)
    assert (units / "a.container").read_text() == MANAGED
    assert sorted(p.name for p in units.iterdir()) == ["a.container", "b.container"]


def test_fixes_are_all_or_nothing_when_a_file_is_swapped_for_a_link(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    for name in ("a.container", "b.container"):
        (units / name).write_text(MANAGED)
    target = secret(tmp_path)
    snap = local_snapshot(path_roots([str(units)]))
    (units / "b.container").unlink()
    (units / "b.container").symlink_to(target)
    changes = [FileChange(str(units / n), MANAGED, "x\n") for n in ("a.container", "b.container")]
    with pytest.raises(InvalidInputError, match="replaced since doctor read it"):
        rewrite(changes, snap)
    assert target.read_text() == "secret\n"
    assert (units / "a.container").read_text() == MANAGED


def test_refused_unit_does_not_stop_the_fixable_ones_and_says_why(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "good.container").write_text(MANAGED)
    real = tmp_path / "elsewhere.container"
    real.write_text(MANAGED)
    (units / "linked.container").symlink_to(real)
    done = cli("doctor", "--fix", "--path", str(units))
    assert "Restart=always" in (units / "good.container").read_text()
    assert real.read_text() == MANAGED
    assert f"left untouched: {units / 'linked.container'} (a symbolic link" in done.stdout


# --- 4. values from unit files never become podman options ---------------------------------------------


@pytest.mark.parametrize("image", ["--root={d}", "-v", "--storage-driver=vfs", "--log-level=debug {d}",
                                   "a\x00--root={d}", "$(touch {d})", "x y"])
def test_image_value_never_reaches_podman_as_an_option(tmp_path: Path, image: str) -> None:
    made = tmp_path / "storage"
    units = tmp_path / "units"
    units.mkdir()
    value = image.format(d=made)
    (units / "u.container").write_text(f"[Container]\nImage={value}\nLabel=rigctl.managed=true\n[Service]\nRestart=always\n")
    done = cli("doctor", "--fix", "--json", "--path", str(units))
    assert done.returncode == 1, done.stderr
    data = json.loads(done.stdout)
    # a NUL makes the whole unit unreadable (quadlet and systemd would read it differently)
    assert {f["id"] for f in data["findings"]} == ({"unit-unreadable"} if "\x00" in value else {"image-not-pinned"})
    assert not made.exists(), "podman was handed the unit's text as an option"


def test_unpinned_images_only_passes_image_references() -> None:
    def unit(image: str) -> str:
        return f"[Container]\nImage={image}\n"
    from rigctl.host.unit import Unit

    units = [Unit.of(f"/u/{i}.container", unit(img)) for i, img in
             enumerate(["--root=/x", "-q", "docker.io/lib/python:3.12", "quay.io/a/b", "a b", "ok\u2028x"])]
    assert unpinned_images(units) == ["docker.io/lib/python:3.12", "quay.io/a/b"]


def test_a_digest_that_is_not_one_is_looked_up_like_any_unpinned_image() -> None:
    """One pin rule (``recipe.model.pinned``) for the image-pinned rule and for the digests doctor looks up,
    so that a unit the rule calls unpinned gets its --fix: ``@sha256:`` alone is not a pin."""
    from rigctl.host.unit import Unit

    half = "quay.io/a/b@sha256:0123"
    whole = "quay.io/a/c@sha256:" + "0" * 64
    units = [Unit.of(f"/u/{i}.container", f"[Container]\nImage={img}\n") for i, img in enumerate([half, whole])]
    assert unpinned_images(units) == [half]


# --- 5. every read is bounded and of a regular file ----------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "dev-urandom", "huge", "not-utf8", "fifo-dropin", "dir"])
def test_unreadable_units_are_skipped_with_a_reason(tmp_path: Path, kind: str) -> None:
    units = tmp_path / "units"
    units.mkdir()
    (units / "good.container").write_text(MANAGED.replace("Restart=no", "Restart=always"))
    bad = units / "bad.container"
    expect = {
        "fifo": "a FIFO", "dev-zero": "a character device", "dev-urandom": "a character device",
        "huge": "more than the 1.0 MiB", "not-utf8": "not UTF-8", "fifo-dropin": "a FIFO", "dir": None,
    }[kind]
    if kind == "fifo":
        os.mkfifo(bad)
    elif kind == "dev-zero":
        bad.symlink_to("/dev/zero")
    elif kind == "dev-urandom":
        bad.symlink_to("/dev/urandom")
    elif kind == "huge":
        bad.write_text("[Container]\n" + "Environment=A=" + "x" * (2 << 20) + "\n")
    elif kind == "not-utf8":
        bad.write_bytes(b"[Container]\nImage=\xff\xfe\n")
    elif kind == "fifo-dropin":
        (units / "good.container.d").mkdir()
        bad = units / "good.container.d" / "10.conf"
        os.mkfifo(bad)
    else:
        bad.mkdir()
    done = cli("doctor", "--json", "--path", str(units), timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    data = json.loads(done.stdout)
    assert str(units / "good.container") in data["units"]
    if expect is None:  # a directory named like a unit is walked, not read
        assert data["skipped"] == []
    else:
        (skip,) = data["skipped"]
        assert skip["path"] == str(bad) and expect in skip["reason"]


@pytest.mark.parametrize("kind", ["fifo", "dev-zero"])
def test_path_naming_a_fifo_or_device_does_not_hang(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x.container"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    done = cli("doctor", "--json", "--path", str(path), timeout=30)
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["units"] == []
    assert data["skipped"][0]["path"] == str(path)


def test_missing_path_is_a_usage_error() -> None:
    done = cli("doctor", "--json", "--path", "/nonexistent/rigctl-units")
    assert done.returncode == 2
    assert "no such file or directory" in json.loads(done.stdout)["error"]["message"]


def test_root_type_carries_realm_and_anchor() -> None:
    roots = default_roots("/root", None, 0, ["/home/alice"])
    alice = [r for r in roots if r.realm == "/home/alice"]
    assert {r.anchor for r in alice} == {"/home/alice"}
    assert alice[0].parts() == (".config", "containers", "systemd")
    assert Root("/etc/containers/systemd", "quadlet", "system").parts() == ()


def test_skip_reason_is_whole_when_the_name_holds_a_colon(tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    os.mkfifo(units / "a: b.container")
    report = doctor([str(units)], facts=NO_HOST)
    (skip,) = report.skipped
    assert skip.path == str(units / "a: b.container")
    assert skip.reason == "a FIFO, not a regular file; rigctl reads only regular files"


# --- a drop-in shared with units that are not rigctl's is never rewritten --------------------------------

FINE = f"[Container]\nImage={PIN}\nLabel=rigctl.managed=true\n[Service]\nRestart=always\n"
FINE_OTHER = f"[Container]\nImage={PIN}\n[Service]\nRestart=always\n"
WEAK = "[Service]\nRestart=no\n"


@pytest.mark.parametrize("folder", ["rigctl-.container.d", "container.d"])
def test_a_dropin_that_also_applies_to_a_unit_not_rigctls_is_only_patched(tmp_path: Path, folder: str) -> None:
    # rigctl-.container.d applies to every rigctl-* unit (quadlet cuts the name after each dash), and
    # container.d to every unit: rewriting it would change rigctl-b, which --fix must leave alone
    units = tmp_path / "units"
    (units / folder).mkdir(parents=True)
    (units / "rigctl-a.container").write_text(FINE)
    (units / "rigctl-b.container").write_text(FINE_OTHER)
    (units / folder / "50-r.conf").write_text(WEAK)
    data = fix(units)
    assert (units / folder / "50-r.conf").read_text() == WEAK
    assert data["fix"]["applied"] == []  # type: ignore[index]
    whys = [p["why"] for p in data["fix"]["patches"]]  # type: ignore[index]
    assert any("rigctl-b.container as well, which is not rigctl's" in why for why in whys), whys


def test_a_dropin_shared_only_by_rigctls_units_is_fixed_once(tmp_path: Path) -> None:
    units = tmp_path / "units"
    (units / "rigctl-.container.d").mkdir(parents=True)
    (units / "rigctl-a.container").write_text(FINE)
    (units / "rigctl-b.container").write_text(FINE)
    (units / "rigctl-.container.d" / "50-r.conf").write_text(WEAK)
    data = fix(units)
    assert "Restart=always" in (units / "rigctl-.container.d" / "50-r.conf").read_text()
    assert len(data["fix"]["applied"]) == 2  # type: ignore[index, arg-type]


def test_a_dropin_every_service_takes_is_only_patched(tmp_path: Path) -> None:
    units = tmp_path / "units"
    (units / "service.d").mkdir(parents=True)
    (units / "rigctl-a.container").write_text(FINE)
    (units / "service.d" / "50-r.conf").write_text(WEAK)
    data = fix(units)
    assert (units / "service.d" / "50-r.conf").read_text() == WEAK
    (patch,) = data["fix"]["patches"]  # type: ignore[index]
    assert "services doctor does not read" in patch["why"]


# --- --path DIR that another uid can change: root never follows their links out of it -----------------

ALICE = 23456


def _roots_units(tmp_path: Path) -> Path:
    """A directory only root can change, holding a managed unit root would rewrite if it audited it."""
    system = tmp_path / "etc-containers-systemd"
    system.mkdir(mode=0o755)
    (system / "root.container").write_text(MANAGED)
    return system


def _untouched(system: Path) -> None:
    assert (system / "root.container").read_text() == MANAGED, "root rewrote its own unit through a user's link"
    assert sorted(p.name for p in system.iterdir()) == ["root.container"], "a .bak appeared in root's directory"


def _alices(tmp_path: Path, mode: int = 0o755) -> Path:
    home = tmp_path / "alice"
    home.mkdir()
    os.chown(home, ALICE, ALICE)
    home.chmod(mode)
    return home


@ROOT_ONLY
@pytest.mark.parametrize("shape", ["dir-is-link", "parent-is-link", "dir-link-in-group-writable-root-dir",
                                   "dir-link-in-world-writable-root-dir", "relative-link-up-and-back"])
def test_path_swapped_for_a_link_to_roots_directory_is_not_followed(tmp_path: Path, shape: str) -> None:
    system = _roots_units(tmp_path)
    if shape == "dir-is-link":  # alice's DIR replaced by a link to root's directory
        given = _alices(tmp_path) / "units"
        given.symlink_to(system)
    elif shape == "parent-is-link":  # a component above DIR is hers, and a link
        home = _alices(tmp_path)
        (home / "hop").symlink_to(tmp_path)
        given = home / "hop" / system.name
    elif shape.startswith("dir-link-in"):  # root owns the parent, but others may write it (no sticky bit)
        shared = tmp_path / "shared"
        shared.mkdir()
        shared.chmod(0o775 if "group" in shape else 0o777)
        given = shared / "units"
        given.symlink_to(system)
        os.lchown(given, ALICE, ALICE)
    else:
        given = _alices(tmp_path) / "units"
        given.symlink_to(Path("..") / system.name)

    done = cli("doctor", "--fix", "--json", "--path", str(given))

    assert done.returncode in (0, 1), done.stderr
    data = json.loads(done.stdout)
    _untouched(system)
    assert data["units"] == [] and data["fix"]["applied"] == []
    (skip,) = data["skipped"]
    assert skip["path"] == str(given) and "symbolic link" in skip["reason"], skip


@ROOT_ONLY
@pytest.mark.parametrize("shape", ["root-link-in-root-dir", "root-link-in-sticky-dir"])
def test_roots_own_link_is_still_followed(tmp_path: Path, shape: str) -> None:
    # a link only root could have placed (a root-only-writable directory, or root's own link in a sticky
    # one like /tmp) is root's to follow: --path through it fixes the units as before
    system = _roots_units(tmp_path)
    holder = tmp_path / ("sticky" if "sticky" in shape else "mine")
    holder.mkdir()
    if "sticky" in shape:
        holder.chmod(0o1777)
    (holder / "units").symlink_to(system)
    data = fix(holder / "units")
    assert "Restart=always" in (system / "root.container").read_text()
    (applied,) = data["fix"]["applied"]  # type: ignore[index]
    assert applied["files"] == [str(holder / "units" / "root.container")]


@ROOT_ONLY
def test_path_file_in_a_directory_reached_through_a_users_link_is_not_read(tmp_path: Path) -> None:
    system = _roots_units(tmp_path)
    home = _alices(tmp_path)
    (home / "units").symlink_to(system)
    given = home / "units" / "root.container"
    done = cli("doctor", "--fix", "--json", "--path", str(given))
    data = json.loads(done.stdout)
    _untouched(system)
    assert data["units"] == []
    assert "symbolic link" in data["skipped"][0]["reason"]


@ROOT_ONLY
def test_path_owned_by_another_uid_is_fixed_as_that_uid(tmp_path: Path) -> None:
    # alice's own directory, reached without links: her managed unit is hers to have fixed, as her file
    units = _alices(tmp_path) / "units"
    units.mkdir()
    os.chown(units, ALICE, ALICE)
    unit = units / "b.container"
    unit.write_text(MANAGED)
    os.chown(unit, ALICE, ALICE)
    fix(units)
    assert "Restart=always" in unit.read_text()
    assert (units / "b.container.bak").stat().st_uid == ALICE


def _swapper(units: Path, real: Path, system: Path, stop: threading.Event, most: int) -> int:
    """Swap alice's directory for a link to root's and back, as she could, until told to stop."""
    swaps = 0
    link = units.with_name("units.link")
    while not stop.is_set() and swaps < most:
        with contextlib.suppress(FileNotFoundError):
            link.unlink()
        link.symlink_to(system)
        os.rename(units, real)  # DIR gone ...
        os.rename(link, units)  # ... DIR is a link to root's directory ...
        os.unlink(units)
        os.rename(real, units)  # ... DIR is hers again
        swaps += 1
    return swaps


@ROOT_ONLY
def test_path_swapped_for_a_link_while_doctor_fixes_never_reaches_roots_files(tmp_path: Path) -> None:
    system = _roots_units(tmp_path)
    home = _alices(tmp_path)
    units = home / "units"
    units.mkdir()
    (units / "b.container").write_text(MANAGED)
    for p in (units, units / "b.container"):
        os.chown(p, ALICE, ALICE)
    stop = threading.Event()
    result: list[int] = []
    swapper = threading.Thread(target=lambda: result.append(
        _swapper(units, home / "units.real", system, stop, most=200_000)))
    swapper.start()
    runs = 0
    deadline = time.monotonic() + 3.0  # a bound on the test, not a bet: the invariant is checked each run
    try:
        while runs < 400 and time.monotonic() < deadline:
            with contextlib.suppress(UsageError, InvalidInputError):  # DIR missing at that instant
                doctor([str(units)], fix=True, facts=NO_HOST)
            runs += 1
            _untouched(system)
    finally:
        stop.set()
        swapper.join(timeout=30)
    assert not swapper.is_alive()
    assert runs >= 20 and result and result[0] > 0, (runs, result)
