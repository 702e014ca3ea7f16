"""The one unit loader (``rigctl.host.unitdirs``) sees what quadlet sees: which file of a name wins and which
drop-ins apply, in which order, from whichever directory holds them. The user-scope cases are checked against
the real quadlet 5.x generator (``quadlet -user -dryrun`` over directories in tmp); the system scope's, which
only root's generator reads (/etc), over the same rules with the directories in tmp.

Before, the loader read ~/.config/containers/systemd before $XDG_RUNTIME_DIR/containers/systemd (quadlet reads
the runtime directory first), applied ``container.d`` drop-ins before ``NAME.container.d`` ones whatever their
names (quadlet orders all of them by name) and applied both files of one name; it gave a system unit the
drop-ins under /etc/containers/systemd/users, and kept a unit in /etc/containers/systemd/users that the user's
own directory shadows."""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from tests.conftest import require_or_skip
from tests.deploy import conftest as testbed  # its testbed_env, imported by name, would be collected

from rigctl.doctor.discover import users_dirs
from rigctl.host.unit import SourceFile, Unit, generated_service
from rigctl.host.unitdirs import Root, collect, default_roots, quadlet_roots, uid_dirs
from rigctl.host.unitfile import dropin_dirs, shared_dropin_dir
from rigctl.host.unitsnapshot import local_snapshot, login_roots

pytestmark = pytest.mark.timeout(60)

QUADLET = os.environ.get("RIGCTL_QUADLET") or "/usr/local/libexec/rigctl/quadlet"
IMAGE = "[Container]\nImage=docker.io/library/x:1\n"


def write(base: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (base / rel).parent.mkdir(parents=True, exist_ok=True)
        (base / rel).write_text(text, encoding="utf-8")


def publish(port: int) -> str:
    return f"[Container]\nPublishPort={port}:80\n"


def quadlet_view(tmp_path: Path) -> dict[str, str]:
    """{service: generated text} from the real generator, for a user whose directories are in tmp."""
    require_or_skip(Path(QUADLET).is_file(), "the testbed's quadlet generator (RIGCTL_QUADLET)")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    done = subprocess.run([QUADLET, "-user", "-dryrun"], capture_output=True, text=True, env=env, timeout=30,
                          check=False)
    parts = re.split(r"^---(\S+)---$", done.stdout, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def our_view(tmp_path: Path) -> dict[str, Unit]:
    roots = quadlet_roots(default_roots(str(tmp_path / "home"), str(tmp_path / "run"), os.getuid(),
                                        config=str(tmp_path / "config")))
    snap = local_snapshot([r for r in roots if r.path.startswith(str(tmp_path))])
    return {Path(u.path).stem + ".service": u for u in collect(snap.files, roots) if u.scope == "user"}


def test_the_user_scope_is_read_as_quadlet_reads_it(tmp_path: Path) -> None:
    config, run = "config/containers/systemd", "run/containers/systemd"
    write(tmp_path, {
        f"{config}/both.container": IMAGE + "PublishPort=1111:80\n",
        f"{run}/both.container": IMAGE + "PublishPort=2222:80\n",  # the runtime directory comes first
        f"{config}/web.container": IMAGE + "PublishPort=1000:80\n",
        f"{config}/container.d/90-type.conf": publish(9090),
        f"{config}/web.container.d/10-own.conf": publish(1010),
        f"{run}/web.container.d/20-runtime.conf": publish(2020),  # another root than the unit's
        f"{config}/sub/web.container.d/30-subdir.conf": publish(3030),  # quadlet reads subdirectories too
        f"{config}/container.d/40-first.conf": publish(4040),  # the root before its subdirectories
        f"{config}/sub/web.container.d/40-first.conf": publish(4141),
        f"{config}/container.d/50-same.conf": publish(5050),
        f"{config}/web.container.d/50-same.conf": publish(5151),  # the unit's own directory before the type's
        f"{config}/web.container.d/70-shadow.conf": publish(7070),
        f"{run}/container.d/70-shadow.conf": publish(7171),  # an earlier root before a more specific directory
    })
    theirs, ours = quadlet_view(tmp_path), our_view(tmp_path)
    assert set(ours) == set(theirs) == {"both.service", "web.service"}
    for service, unit in ours.items():
        assert f"SourcePath={unit.path}\n" in theirs[service]
        run_line = theirs[service].split("\nExecStart=", 1)[1].split("\n", 1)[0]
        assert [f"{w}" for w in unit.merged.words("Container", "PublishPort")] == \
            re.findall(r"--publish (\S+)", run_line), service
    assert [Path(d.path).name for d in ours["web.service"].dropins] == [
        "10-own.conf", "20-runtime.conf", "30-subdir.conf", "40-first.conf", "50-same.conf", "70-shadow.conf",
        "90-type.conf"]


def test_dropins_for_every_name_cut_after_a_dash_apply_as_quadlet_applies_them(tmp_path: Path) -> None:
    # a drop-in in rigctl-.container.d applies to every unit rigctl installs; the unit's own directory
    # wins a name over the longer cut, the longer cut over the shorter, the shorter over container.d
    config = "config/containers/systemd"
    write(tmp_path, {
        f"{config}/rigctl-web-a.container": IMAGE + "PublishPort=1000:80\n",
        f"{config}/other.container": IMAGE + "PublishPort=1001:80\n",  # no dash: only container.d
        f"{config}/rigctl-.container.d/05-all.conf": publish(505),
        f"{config}/rigctl-web-a.container.d/20-own.conf": publish(2020),
        f"{config}/rigctl-web-.container.d/22-web.conf": publish(2222),
        f"{config}/container.d/25-type.conf": publish(2525),
        f"{config}/rigctl-.container.d/30-all.conf": publish(3030),
        f"{config}/rigctl-.container.d/40-same.conf": publish(4040),
        f"{config}/rigctl-web-.container.d/40-same.conf": publish(4141),  # the longer cut wins the name
        f"{config}/container.d/50-same.conf": publish(5050),
        f"{config}/rigctl-.container.d/50-same.conf": publish(5151),  # a cut wins over the type's
        f"{config}/rigctl-web-a.container.d/60-same.conf": publish(6060),  # the unit's own wins over all
        f"{config}/rigctl-web-.container.d/60-same.conf": publish(6161),
    })
    theirs, ours = quadlet_view(tmp_path), our_view(tmp_path)
    assert set(ours) == set(theirs) == {"rigctl-web-a.service", "other.service"}
    for service, unit in ours.items():
        run_line = theirs[service].split("\nExecStart=", 1)[1].split("\n", 1)[0]
        assert list(unit.merged.words("Container", "PublishPort")) == re.findall(r"--publish (\S+)", run_line)
    assert list(ours["rigctl-web-a.service"].merged.words("Container", "PublishPort")) == [
        "1000:80", "505:80", "2020:80", "2222:80", "2525:80", "3030:80", "4141:80", "5151:80", "6060:80"]
    assert list(ours["other.service"].merged.words("Container", "PublishPort")) == ["1001:80", "2525:80", "5050:80"]


def test_systemd_takes_dropins_for_every_name_cut_after_a_dash_as_the_loader_does() -> None:
    # the same rule for the service quadlet generates: asked of the real `systemd --user` manager
    env = testbed.testbed_env()
    require_or_skip(testbed._manager_running(env), "no `systemd --user` manager running (.ci/testbed.sh up)")
    base, prefix = Path.home() / ".config" / "systemd" / "user", f"rigtest{uuid.uuid4().hex[:8]}"
    name = f"{prefix}-a-b.service"
    files = {
        name: "[Service]\nType=oneshot\nExecStart=/usr/bin/podman --version\n",
        f"{prefix}-.service.d/05-all.conf": "[Service]\nEnvironment=A=1\n",
        f"{name}.d/07-own.conf": "[Service]\nEnvironment=B=1\n",
        f"{prefix}-.service.d/10-same.conf": "[Service]\nEnvironment=C=short\n",
        f"{prefix}-a-.service.d/10-same.conf": "[Service]\nEnvironment=C=long\n",  # the longer cut wins
        f"{prefix}-.service.d/20-same.conf": "[Service]\nEnvironment=D=cut\n",
        f"{name}.d/20-same.conf": "[Service]\nEnvironment=D=own\n",  # the unit's own wins
    }
    systemctl = ["systemctl", "--user"]
    try:
        write(base, files)
        subprocess.run([*systemctl, "daemon-reload"], env=env, timeout=60, check=True)
        shown = subprocess.run([*systemctl, "show", name, "-p", "DropInPaths", "--value"], env=env, timeout=60,
                               capture_output=True, text=True, check=True).stdout.split()
        roots = default_roots(str(Path.home()), env.get("XDG_RUNTIME_DIR"), os.getuid())
        snap = local_snapshot([r for r in roots if r.path == str(base)])
        (unit,) = [u for u in collect(snap.files, roots) if u.path == str(base / name)]
        assert [d.path for d in unit.dropins] == shown
        assert [Path(p).parent.name for p in shown] == [f"{prefix}-.service.d", f"{name}.d", f"{prefix}-a-.service.d",
                                                       f"{name}.d"]
    finally:
        for rel in files:
            (base / rel).unlink(missing_ok=True)
        for folder in {(base / rel).parent for rel in files} - {base}:
            folder.rmdir()
        subprocess.run([*systemctl, "daemon-reload"], env=env, timeout=60, check=False)


def test_systemd_dropins_across_directories_are_chosen_as_systemd_chooses_them(tmp_path: Path) -> None:
    # across unit directories systemd goes root by root for the unit's own and its cut names, and takes
    # service.d last: asked of systemd-analyze over two directories (SYSTEMD_UNIT_PATH=hi:lo)
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze (systemd) is not installed (.ci/testbed.sh up)")
    assert analyze is not None
    hi, lo = tmp_path / "hi", tmp_path / "lo"
    write(lo, {"rt-a.service": "[Service]\nType=oneshot\nExecStart=/usr/bin/podman --version\n",
               "rt-a.service.d/10-same.conf": "[Service]\nEnvironment=X=lo-own\n",
               "rt-a.service.d/20-same.conf": "[Service]\nEnvironment=Y=lo-own\n",
               "rt-a.service.d/30-own.conf": "[Service]\nEnvironment=Z=lo-own\n"})
    write(hi, {"rt-.service.d/10-same.conf": "[Service]\nEnvironment=X=hi-cut\n",  # a higher root wins
               "service.d/20-same.conf": "[Service]\nEnvironment=Y=hi-type\n",  # service.d comes last
               "service.d/05-type.conf": "[Service]\nEnvironment=W=hi-type\n"})
    done = subprocess.run([analyze, "verify", "rt-a.service"], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "SYSTEMD_LOG_LEVEL": "debug",
                                             "SYSTEMD_UNIT_PATH": f"{hi}:{lo}"}, check=False)
    theirs = list(dict.fromkeys(re.findall(r"DropIn Path: (\S+)", done.stdout + done.stderr)))
    roots = [Root(str(hi), "systemd", "system"), Root(str(lo), "systemd", "system")]
    (unit,) = collect(local_snapshot(roots).files, roots)
    assert [d.path for d in unit.dropins] == theirs == [
        str(hi / "service.d/05-type.conf"), str(hi / "rt-.service.d/10-same.conf"),
        str(lo / "rt-a.service.d/20-same.conf"), str(lo / "rt-a.service.d/30-own.conf")]


@pytest.mark.parametrize("name", ["rt-x@a-b.service", "-lead.service", "rt-a-b.service"])
def test_systemd_cut_and_template_dropin_directories_are_systemds(tmp_path: Path, name: str) -> None:
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze (systemd) is not installed (.ci/testbed.sh up)")
    assert analyze is not None
    unit = "rt-x@.service" if "@" in name else name
    candidates = ["service.d", "rt-.service.d", "rt-x@.service.d", "rt-x@a-.service.d", "rt-x@a.service.d",
                  "rt-a-.service.d", "-.service.d", f"{name}.d"]
    write(tmp_path, {unit: "[Service]\nType=oneshot\nExecStart=/usr/bin/podman --version\n",
                     **{f"{d}/{i:02d}.conf": f"[Service]\nEnvironment=N{i}=1\n" for i, d in enumerate(candidates)}})
    done = subprocess.run([analyze, "verify", "--", name], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path, env={**os.environ, "SYSTEMD_LOG_LEVEL": "debug",
                                             "SYSTEMD_UNIT_PATH": str(tmp_path)}, check=False)
    theirs = {Path(p).parent.name for p in re.findall(r"DropIn Path: (\S+)", done.stdout + done.stderr)}
    assert theirs, done.stdout + done.stderr
    assert set(dropin_dirs(str(tmp_path / name), generated_service(SourceFile(str(tmp_path / name), "")))) & set(candidates) == theirs


def test_a_dropin_in_another_root_takes_the_label_back_as_podman_gets_it(tmp_path: Path) -> None:
    write(tmp_path, {
        "config/containers/systemd/web.container": IMAGE + "Label=rigctl.managed=true\n",
        "run/containers/systemd/web.container.d/50-off.conf": "[Container]\nLabel=rigctl.managed=false\n",
    })
    assert "--label rigctl.managed=false" in quadlet_view(tmp_path)["web.service"]
    web = our_view(tmp_path)["web.service"]
    assert not web.managed
    assert Unit.of(web.path, web.text).managed  # the unit file alone says so


OWN = "[Container]\nImage=i\nLabel=rigctl.managed=true\n"


@pytest.mark.parametrize(("own", "dropins", "managed"), [
    (OWN, [], True),
    (OWN, ["[Container]\nLabel=rigctl.managed=false\n"], False),
    (OWN, ["[Container]\nLabel=\n"], False),  # an empty Label= resets the list
    ("[Container]\nImage=i\n", ["[Container]\nLabel=rigctl.managed=true\n"], False),  # never makes it rigctl's
    (OWN, ["[Container]\nLabel=rigctl.managed=false\r\n"], False),
    (OWN, ["[Container]\nLabel=x=\r1\n"], False),  # its readers disagree on it: nobody's, as for doctor
])
def test_the_managed_rule_reads_the_dropins(own: str, dropins: list[str], managed: bool) -> None:
    given = tuple(SourceFile(f"/q/web.container.d/{i}.conf", text) for i, text in enumerate(dropins))
    assert Unit.of("/q/web.container", own, given).managed is managed


def test_a_system_unit_takes_no_dropin_from_the_users_directories(tmp_path: Path) -> None:
    etc = str(tmp_path / "etc-containers-systemd")
    roots = [Root(etc, "quadlet", "system"), Root(f"{etc}/users", "quadlet", "user"),
             Root(f"{etc}/users/0", "quadlet", "user", "/root")]
    tree = {f"{etc}/web.container": IMAGE, f"{etc}/users/web.container.d/50.conf": publish(5050),
            f"{etc}/users/0/web.container.d/60.conf": publish(6060), f"{etc}/web.container.d/70.conf": publish(7070)}
    (web,) = [u for u in collect(tree, roots) if u.scope == "system"]
    assert [d.path for d in web.dropins] == [f"{etc}/web.container.d/70.conf"]


def test_the_logins_own_directories_and_the_shared_ones_are_one_generator_run(tmp_path: Path) -> None:
    home, etc = str(tmp_path / "home"), str(tmp_path / "etc-users")
    roots = [Root(f"{home}/.config/containers/systemd", "quadlet", "user", home), Root(etc, "quadlet", "user"),
             Root(f"{etc}/0", "quadlet", "user", home)]
    tree = {f"{home}/.config/containers/systemd/web.container": IMAGE, f"{etc}/web.container": IMAGE,
            f"{etc}/db.container": IMAGE, f"{etc}/0/db.container": IMAGE,  # users/ before users/UID
            f"{home}/.config/containers/systemd/db.container.d/50.conf": publish(5050)}
    units = {u.path: u for u in collect(tree, roots)}
    assert set(units) == {f"{home}/.config/containers/systemd/web.container", f"{etc}/db.container"}
    # the login's own drop-in applies to a shared unit: one generator run reads both
    assert [d.path for d in units[f"{etc}/db.container"].dropins] == [
        f"{home}/.config/containers/systemd/db.container.d/50.conf"]


@pytest.mark.parametrize(("path", "own"), [
    ("/q/rigctl-web-a.container", ["rigctl-web-a.container.d", "rigctl-web-a.service.d"]),
    ("/q/web@a-b.service", ["web@a-b.service.d"]),
    ("/q/plain.container", ["plain.container.d", "plain.service.d"]),
])
def test_only_a_units_own_dropin_directories_are_not_shared(path: str, own: list[str]) -> None:
    # doctor --fix rewrites a drop-in of a shared directory only where every unit it reaches is rigctl's
    assert [d for d in dropin_dirs(path, generated_service(SourceFile(path, "[Container]\n"))) if not shared_dropin_dir(d)] == own


# --- /etc/containers/systemd/users: shared, but users/UID is that user's alone ----------------------------
# Asked of the real generator with a directory of the test bound over /etc/containers/systemd in a private
# mount namespace (root only), so no file is written where this host's quadlet would read it. Before, the
# loader read every users/UID as shared: another uid's unit counted as the login's, and its drop-ins applied
# to the login's shared units.

ETC_QUADLET = "/etc/containers/systemd"
BIND_ETC = ('mount -t tmpfs rigctl-test /etc/containers && mkdir /etc/containers/systemd && '
            'mount --bind "$0" /etc/containers/systemd && exec "$@"')


def quadlet_view_with_etc(tmp_path: Path, etc: Path, home: Path | None = None) -> dict[str, str]:
    """{service: generated text} for the user scope of this login, with ``etc`` as /etc/containers/systemd
    (with ``home``: as a user whose home it is, and whose XDG variables are unset)."""
    require_or_skip(os.geteuid() == 0, "a private mount namespace needs root")
    require_or_skip(Path(QUADLET).is_file(), "the testbed's quadlet generator (RIGCTL_QUADLET)")
    require_or_skip(Path("/etc/containers").is_dir(), "/etc/containers (podman's configuration directory)")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    if home is not None:
        env = {"PATH": os.environ["PATH"], "HOME": str(home), "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", BIND_ETC, str(etc), QUADLET,
                           "-user", "-dryrun"], capture_output=True, text=True, env=env, timeout=30, check=False)
    assert done.returncode == 0, done.stderr
    parts = re.split(r"^---(\S+)---$", done.stdout, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_another_uids_users_directory_is_not_the_logins(tmp_path: Path) -> None:
    me, other = os.getuid(), os.getuid() + 4321
    etc = tmp_path / "etc"
    write(etc, {
        "users/shared.container": IMAGE + "PublishPort=1000:80\n",
        f"users/{me}/mine.container": IMAGE,
        f"users/{other}/theirs.container": IMAGE,  # another user's: never the login's
        f"users/{other}/shared.container.d/50-theirs.conf": publish(5050),  # nor do their drop-ins apply
        f"users/{other:07d}/padded.container": IMAGE,  # all digits: skipped, though no uid is spelled so
        f"users/sub/{other}/deeper.container": IMAGE,  # below a subdirectory: shared again
        f"users/+{other}/signed.container": IMAGE,  # not all digits: shared
        f"users/{other}x/lettered.container": IMAGE,
    })
    theirs = quadlet_view_with_etc(tmp_path, etc)
    roots = quadlet_roots(default_roots(str(tmp_path / "home"), str(tmp_path / "run"), me,
                                        config=str(tmp_path / "config")))
    tree = {f"{ETC_QUADLET}/{p.relative_to(etc)}": p.read_text() for p in etc.rglob("*") if p.is_file()}
    ours = {Path(u.path).stem + ".service": u for u in collect(tree, roots) if u.scope == "user"}
    assert set(ours) == set(theirs) == {"shared.service", "mine.service", "deeper.service", "signed.service",
                                        "lettered.service"}
    run_line = theirs["shared.service"].split("\nExecStart=", 1)[1].split("\n", 1)[0]
    assert re.findall(r"--publish (\S+)", run_line) == ["1000:80"]
    assert ours["shared.service"].dropins == ()


def test_as_root_another_uids_users_directory_is_audited_as_that_users(tmp_path: Path) -> None:
    # root's doctor reads users/UID beside that user's home: their drop-ins apply there, the login's not
    home, alice = "/root", str(tmp_path / "alice")
    roots = quadlet_roots(default_roots(home, None, 0, [alice], other_uids={1501: alice, 1502: "/nowhere/bob"}))
    tree = {f"{ETC_QUADLET}/users/1501/web.container": IMAGE, f"{ETC_QUADLET}/users/1502/db.container": IMAGE,
            f"{ETC_QUADLET}/users/0/web.container": IMAGE,
            f"{alice}/.config/containers/systemd/web.container.d/50-alice.conf": publish(5050),
            f"{home}/.config/containers/systemd/container.d/60-root.conf": publish(6060)}
    units = {u.path: u for u in collect(tree, roots)}
    assert set(units) == {f"{ETC_QUADLET}/users/1501/web.container", f"{ETC_QUADLET}/users/1502/db.container",
                          f"{ETC_QUADLET}/users/0/web.container"}  # one name, two users: neither shadows
    assert [d.path for d in units[f"{ETC_QUADLET}/users/1501/web.container"].dropins] == [
        f"{alice}/.config/containers/systemd/web.container.d/50-alice.conf"]
    assert units[f"{ETC_QUADLET}/users/1502/db.container"].dropins == ()
    assert [d.path for d in units[f"{ETC_QUADLET}/users/0/web.container"].dropins] == [
        f"{home}/.config/containers/systemd/container.d/60-root.conf"]


def test_users_directories_are_named_by_uid_as_quadlet_spells_them(tmp_path: Path) -> None:
    users = tmp_path / "users"
    for name in ("0", "4123456789", "007", "+5", "12ab", "sub"):
        (users / name).mkdir(parents=True)
    (users / "77").symlink_to(users / "sub")  # a link: where it leads may be the user's to change
    (users / "88").write_text("")  # a file is no directory
    (users / ("9" * 200)).mkdir()  # no uid
    found = users_dirs(str(users))
    assert found == {0: f"{users}/0", 4123456789: f"{users}/4123456789"}
    # with root's home among the audited homes, its users/0 goes with it (root owns it)
    assert users_dirs(str(users), homes=[pwd.getpwuid(0).pw_dir])[0] == pwd.getpwuid(0).pw_dir.rstrip("/")
    assert uid_dirs([f"{users}/5/a.container", f"{users}/05/b.container", f"{users}/x/6/c.container",
                     f"{users}/7", f"{users}/{'9' * 5000}/d.container"], base=str(users)) == [5]


def test_a_users_directory_goes_with_a_home_only_that_uid_owns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    require_or_skip(os.geteuid() == 0, "chown needs root")
    users, home = tmp_path / "users", tmp_path / "home" / "alice"
    (users / "1501").mkdir(parents=True)
    home.mkdir(parents=True)
    os.chown(home, 1502, 1502)  # alice's home in the password database, but another uid's directory
    monkeypatch.setattr(pwd, "getpwuid", lambda uid: pwd.struct_passwd(("alice", "x", uid, uid, "", str(home), "")))
    assert users_dirs(str(users), homes=[str(home)]) == {1501: f"{users}/1501"}
    os.chown(home, 1501, 1501)
    assert users_dirs(str(users), homes=[str(home)]) == {1501: str(home)}
    assert users_dirs(str(users), homes=[]) == {1501: f"{users}/1501"}  # a home not audited: its own realm


def test_as_root_a_linked_users_directory_is_named_not_followed(tmp_path: Path) -> None:
    # root linked users/1000 to a directory of alice's; she can point it at any directory root can read
    # (a /tmp-like one of root's holding her links to root's files): named, never read (review)
    require_or_skip(os.geteuid() == 0, "the rule is root's")
    etc, elsewhere = tmp_path / "etc", tmp_path / "hers"
    elsewhere.mkdir()
    (elsewhere / "x.container").write_text(IMAGE + "# SECRET-7f3a\n")
    (etc / "users").mkdir(parents=True)
    (etc / "users" / "1000").symlink_to(elsewhere)
    roots = [Root(str(etc), "quadlet", "system"), Root(f"{etc}/users", "quadlet", "user", per_uid=True)]
    snap = local_snapshot(roots)
    assert snap.files == {}
    (skipped,) = snap.skipped
    assert skipped.path == f"{etc}/users/1000" and "is a link: not followed as root" in skipped.reason


# --- systemd's own directories: its unit path, the runtime and .control ones included ---------------------
# Before, the loader read three system and three user directories: a drop-in from `systemctl edit --runtime`
# (/run/systemd/system, $XDG_RUNTIME_DIR/systemd/user) or `systemctl set-property` (the .control ones) that
# sets Restart=no on a serving unit was never seen by doctor or status.


@pytest.mark.parametrize("scope", ["system", "user"])
def test_systemds_directories_are_its_unit_path(tmp_path: Path, scope: str) -> None:
    analyze = shutil.which("systemd-analyze")
    require_or_skip(analyze is not None, "systemd-analyze (systemd)")
    assert analyze is not None
    home, config, data, run = (str(tmp_path / n) for n in ("home", "config", "data", "run"))
    env = {"PATH": os.environ["PATH"], "HOME": home, "XDG_CONFIG_HOME": config, "XDG_DATA_HOME": data,
           "XDG_RUNTIME_DIR": run}
    done = subprocess.run([analyze, *(["--user"] if scope == "user" else []), "unit-paths"], env=env, timeout=30,
                          capture_output=True, text=True, check=True)
    left_out = ("/generator", "/generator.early", "/generator.late", "/transient")
    theirs = [p for p in done.stdout.split() if not p.endswith(left_out) and p != "/etc/xdg/systemd/user"]
    ours = [r.path for r in default_roots(home, run, os.getuid(), config=config, data=data)
            if r.kind == "systemd" and r.scope == scope]
    assert directories(ours) == directories(theirs)
    assert not set(theirs) - set(ours)  # every directory under the name systemd gives it, too


def directories(paths: list[str]) -> list[str]:
    """``paths`` as the directories they are, in order: each resolved, one named again later left out. On a
    merged-/usr root /lib is a link to usr/lib: systemd 252 (Debian 12) lists /lib/systemd/system and
    /usr/lib/systemd/system, systemd 257 (Debian 13) only the second, one directory either way."""
    seen: list[str] = []
    for path in paths:
        real = os.path.realpath(path)
        if real not in seen:
            seen.append(real)
    return seen


def test_runtime_and_control_dropins_apply_as_the_manager_applies_them() -> None:
    env = testbed.testbed_env()
    require_or_skip(testbed._manager_running(env), "no `systemd --user` manager running (.ci/testbed.sh up)")
    runtime = env.get("XDG_RUNTIME_DIR")
    require_or_skip(bool(runtime), "XDG_RUNTIME_DIR for the `systemd --user` manager")
    config = Path.home() / ".config" / "systemd"
    name = f"rigtest{uuid.uuid4().hex[:8]}.service"
    files = {
        config / "user" / name: "[Service]\nType=oneshot\nExecStart=/usr/bin/podman --version\n",
        config / "user" / f"{name}.d" / "10-own.conf": "[Service]\nEnvironment=A=1\n",
        Path(f"{runtime}/systemd/user/{name}.d/20-runtime.conf"): "[Service]\nRestart=no\n",  # edit --runtime
        config / "user.control" / f"{name}.d" / "50-MemoryMax.conf": "[Service]\nMemoryMax=1G\n",  # set-property
        Path(f"{runtime}/systemd/user.control/{name}.d/10-own.conf"): "[Service]\nEnvironment=B=1\n",
    }
    systemctl = ["systemctl", "--user"]
    try:
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        subprocess.run([*systemctl, "daemon-reload"], env=env, timeout=60, check=True)
        shown = subprocess.run([*systemctl, "show", name, "-p", "DropInPaths", "--value"], env=env, timeout=60,
                               capture_output=True, text=True, check=True).stdout.split()
        roots = default_roots(str(Path.home()), runtime, os.getuid())
        snap = local_snapshot([r for r in roots if r.kind == "systemd" and r.realm])
        (unit,) = [u for u in collect(snap.files, roots) if u.path == str(config / "user" / name)]
        assert [d.path for d in unit.dropins] == shown
        # the .control directories come first: their 10-own.conf wins the name over the unit's own directory's
        assert shown == [f"{runtime}/systemd/user.control/{name}.d/10-own.conf",
                         f"{runtime}/systemd/user/{name}.d/20-runtime.conf",
                         f"{config}/user.control/{name}.d/50-MemoryMax.conf"]
        assert unit.merged.value("Service", "Restart") == "no"  # what `edit --runtime` set, seen
    finally:
        for path in files:
            path.unlink(missing_ok=True)
        for path in files:
            with contextlib.suppress(OSError):
                path.parent.rmdir()
        subprocess.run([*systemctl, "daemon-reload"], env=env, timeout=60, check=False)


def test_a_users_directory_shares_a_realm_only_with_a_home_of_its_own(tmp_path: Path) -> None:
    # a home of / (nobody), one home for two uids (/nonexistent), or the login's own (/root for uid 11 on
    # RHEL) is no realm to share: a drop-in there would reach other users' units (review)
    alice = str(tmp_path / "alice")
    roots = quadlet_roots(default_roots("/root", None, 0, [alice], other_uids={
        65534: "/", 100: "/nonexistent", 101: "/nonexistent", 11: "/root", 1501: alice}))
    realms = {r.path: r.realm for r in roots if r.path.startswith(f"{ETC_QUADLET}/users/")}
    assert realms == {f"{ETC_QUADLET}/users/0": "/root", f"{ETC_QUADLET}/users/1501": alice,
                      **{f"{ETC_QUADLET}/users/{u}": f"{ETC_QUADLET}/users/{u}" for u in (11, 100, 101, 65534)}}
    tree = {f"{ETC_QUADLET}/users/65534/container.d/x.conf": publish(6553),
            f"{ETC_QUADLET}/users/100/web.container": IMAGE, f"{ETC_QUADLET}/users/101/web.container": IMAGE,
            f"{ETC_QUADLET}/users/101/web.container.d/a.conf": publish(1010),
            "/root/.config/containers/systemd/container.d/r.conf": publish(7070),
            f"{ETC_QUADLET}/users/11/op.container": IMAGE, f"{alice}/.config/containers/systemd/a.container": IMAGE}
    units = {u.path: [d.path for d in u.dropins] for u in collect(tree, roots)}
    assert units == {f"{ETC_QUADLET}/users/100/web.container": [],
                     f"{ETC_QUADLET}/users/101/web.container": [f"{ETC_QUADLET}/users/101/web.container.d/a.conf"],
                     f"{ETC_QUADLET}/users/11/op.container": [], f"{alice}/.config/containers/systemd/a.container": []}


def test_each_file_is_read_by_the_walk_of_its_own_root(tmp_path: Path) -> None:
    # users/1000, handed to alice, holds a link to a file only root reads: the walk of the directory above
    # it (root's, which follows root's links) read it before the walk of users/1000 refused it (review)
    require_or_skip(os.geteuid() == 0, "chown needs root")
    etc, secret = tmp_path / "etc", tmp_path / "secret.container"
    secret.write_text(IMAGE + "# SECRET-7f3a\n")
    secret.chmod(0o600)
    theirs = etc / "users" / "1000"
    theirs.mkdir(parents=True)
    os.chown(theirs, 1000, 1000)
    (theirs / "x.container").symlink_to(secret)
    os.lchown(theirs / "x.container", 1000, 1000)
    (etc / "users" / "4321").mkdir()
    (etc / "users" / "4321" / "y.container").write_text(IMAGE)  # no root here: read by no walk
    roots = [Root(str(etc), "quadlet", "system"), Root(f"{etc}/users", "quadlet", "user", per_uid=True),
             Root(str(theirs), "quadlet", "user", str(theirs), anchor=str(theirs))]
    snap = local_snapshot(roots)
    assert not any("SECRET" in text for text in snap.files.values()), sorted(snap.files)
    assert sorted(snap.files) == []
    (skipped,) = snap.skipped
    assert skipped.path == f"{theirs}/x.container" and "not by uid 1000" in skipped.reason


def test_root_does_not_take_another_users_xdg_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `su` without `-` keeps alice's XDG_RUNTIME_DIR: root's units take no drop-in from it (her manager's,
    # not root's), and root must not follow the links she keeps there (review)
    require_or_skip(os.geteuid() == 0, "chown needs root")
    hers, ours = tmp_path / "run-1000", tmp_path / "config-root"
    hers.mkdir()
    ours.mkdir()
    os.chown(hers, 1000, 1000)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(hers))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(ours))
    monkeypatch.setenv("XDG_DATA_HOME", str(hers))
    monkeypatch.setenv("HOME", str(hers))  # `sudo -E`
    paths = [r.path for r in login_roots()]
    assert not any(p.startswith(str(hers)) for p in paths), paths
    assert f"{ours}/containers/systemd" in paths and "/run/user/0/containers/systemd" in paths
    assert f"{pwd.getpwuid(0).pw_dir.rstrip('/')}/.local/share/systemd/user" in paths  # root's own home
    shared = tmp_path / "shared"  # a directory that does not exist yet where anyone could make it first
    shared.mkdir()
    shared.chmod(0o1777)
    missing = shared / "not-yet"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(missing))
    assert not any(r.path.startswith(str(missing)) for r in login_roots())


def test_a_home_of_slash_is_the_logins_realm_not_the_shared_one(tmp_path: Path) -> None:
    alice = str(tmp_path / "alice")
    roots = quadlet_roots(default_roots("/", None, 0, [alice]))
    assert {r.realm for r in roots if r.path.startswith("/.config")} == {"/"}
    tree = {"/.config/containers/systemd/container.d/r.conf": publish(7070),
            f"{alice}/.config/containers/systemd/a.container": IMAGE}
    (unit,) = collect(tree, roots)
    assert unit.dropins == (), "the login's drop-in reached another user's unit"


def test_another_users_dropins_are_chosen_as_their_generator_chooses_them(tmp_path: Path) -> None:
    # root audits alice's home: her generator reads her config directory before /etc/containers/systemd/users,
    # so of two drop-ins of one name hers wins. Before, her directories stood after all the shared ones
    etc, alice = tmp_path / "etc", tmp_path / "alice"
    write(etc, {"users/container.d/50-same.conf": publish(5050), "users/container.d/60-shared.conf": publish(6060)})
    write(alice, {".config/containers/systemd/web.container": IMAGE + "PublishPort=1000:80\n",
                  ".config/containers/systemd/container.d/50-same.conf": publish(5151),
                  ".config/containers/systemd/container.d/40-hers.conf": publish(4040)})
    theirs = quadlet_view_with_etc(tmp_path, etc, home=alice)
    roots = quadlet_roots(default_roots("/root", None, os.getuid(), [str(alice)]))
    tree = {f"{ETC_QUADLET}/{p.relative_to(etc)}": p.read_text() for p in etc.rglob("*") if p.is_file()}
    tree |= {str(p): p.read_text() for p in alice.rglob("*") if p.is_file()}
    ours = {Path(u.path).stem + ".service": u for u in collect(tree, roots) if u.path.startswith(str(alice))}
    assert set(ours) == set(theirs) == {"web.service"}
    run_line = theirs["web.service"].split("\nExecStart=", 1)[1].split("\n", 1)[0]
    assert list(ours["web.service"].merged.words("Container", "PublishPort")) == re.findall(
        r"--publish (\S+)", run_line) == ["1000:80", "4040:80", "5151:80", "6060:80"]
