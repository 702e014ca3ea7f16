"""fleet doctor without a remote rigctl reads the directories ``default_roots`` names, as the remote login
sees them: the snapshot script is built from that one list, so it cannot drift from what quadlet reads.
Other users' homes are not among them: a shell cannot read what their owners control safely (a name with a
newline, a link), so nothing under /home is shipped even as root.

The system directories are made ours in a private mount namespace (``unshare -m``): a directory of the
test is bound over each of them there, for the sshd host (and every session it runs) or the local shell
only, so nothing is written where other tests or this host's quadlet would see it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.conftest import require_or_skip
from tests.fleet.conftest import sshd_hosts

from rigctl.fleet.loader import load_inventory
from rigctl.fleet.pool import run_fleet
from rigctl.fleet.script import split_sections
from rigctl.fleet.snapshot import doctor_script, snapshot_files, snapshot_roots
from rigctl.fleet.ssh import OpenSsh
from rigctl.host.unitdirs import Root, collect, default_roots

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

UNITS = Path(__file__).parent / "units"
FAULTY = "glm53-flash.container"  # Restart=on-failure: one restart-not-always finding
CLEAN = "v4flash.container"  # no finding
BOUND_RUN = 'mount --bind "$0" /run && exec "$@"'  # the sshd's /run is the test's directory
BOUNDARY = "@@rigctl-test"


def _private_mounts_or_skip() -> None:
    if os.geteuid() != 0:
        require_or_skip(False, "a private mount namespace needs root")
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "true"], capture_output=True, text=True,
                          timeout=30, check=False)
    require_or_skip(done.returncode == 0, f"no private mount namespace here: {done.stderr.strip()}")


# --- over ssh: a host whose login has XDG_CONFIG_HOME set, and /run of its own -------------------------


@dataclass
class Box:
    hosts_file: Path  # its `rigctl:` is missing: doctor ships a snapshot
    home: Path
    config: Path  # the login's XDG_CONFIG_HOME
    run: Path  # what the host sees as /run


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    ok, why = sshd_hosts.sshd_available()
    require_or_skip(ok, why)
    _private_mounts_or_skip()
    root = tmp_path_factory.mktemp("roots")
    run, config = root / "run", root / "xdg-config"
    (run / "sshd").mkdir(parents=True, mode=0o755)  # sshd's privilege-separation directory
    fleet = sshd_hosts.start_fleet(root, 1, session_env=f"XDG_CONFIG_HOME={config}",
                                   launcher=["unshare", "-m", "--propagation", "private", "sh", "-c", BOUND_RUN,
                                             str(run)])
    try:
        yield Box(fleet.inventory(include_down=False, rigctl="/nonexistent/rigctl"), fleet.hosts[0].home, config,
                  run)
    finally:
        sshd_hosts.stop_fleet(fleet)


@pytest.fixture
def ssh(private_control_dir: Callable[[], Path], box: Box) -> Iterator[OpenSsh]:
    transport = OpenSsh.default()
    yield transport
    transport.close_all()
    for placed in (box.config, box.home / ".config", box.run / "containers"):
        shutil.rmtree(placed, ignore_errors=True)


def _put(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(UNITS / name, directory / name)
    return directory / name


def _doctor(box: Box, ssh: OpenSsh) -> tuple[list[str], list[tuple[str, str]]]:
    (result,) = run_fleet("doctor", load_inventory(box.hosts_file).select(), transport=ssh, timeout=60).hosts
    assert result.error is None and result.via == "ssh", result
    return result.data["units"], [(f["unit"], f["id"]) for f in result.findings]


def test_a_unit_in_the_logins_xdg_config_home_is_audited(box: Box, ssh: OpenSsh) -> None:
    unit = _put(box.config / "containers" / "systemd", FAULTY)
    _put(box.home / ".config" / "containers" / "systemd", CLEAN)  # quadlet does not read it: XDG_CONFIG_HOME is set
    units, findings = _doctor(box, ssh)
    assert units == [str(unit)]
    assert findings == [(str(unit), "restart-not-always")]


def test_a_unit_in_run_containers_systemd_is_audited(box: Box, ssh: OpenSsh) -> None:
    _put(box.run / "containers" / "systemd", FAULTY)
    unit = f"/run/containers/systemd/{FAULTY}"  # as the host sees it
    units, findings = _doctor(box, ssh)
    assert units == [unit]
    assert findings == [(unit, "restart-not-always")]


# --- the script itself, in a local shell: every directory of default_roots and no other ---------------


def _mount_points(paths: list[str]) -> list[str]:
    """Where to bind a directory of ours so that each of ``paths`` is inside one: its deepest existing
    directory (links resolved), once, and none inside another."""
    found = set()
    for path in paths:
        existing = Path(path)
        while not existing.exists():
            existing = existing.parent
        found.add(os.path.realpath(existing))
    points = sorted(p for p in found if not any(p.startswith(q + "/") for q in found))
    outside = [p for p in points if p.count("/") < 2 and p not in ("/home", "/run")]
    require_or_skip(not outside, f"would hide {outside} in the namespace (a unit directory's parent is missing)")
    return points


@dataclass
class Namespace:
    """The system's unit directories and /home (where the test plays other users), each a directory of the
    test's, seen only by ``run``."""

    base: Path
    points: list[str]

    def where(self, path: str) -> Path:
        """Where the test writes what the namespace sees at ``path``."""
        real = os.path.realpath(path)
        index, point = next((i, p) for i, p in enumerate(self.points) if real == p or real.startswith(p + "/"))
        return self.base / str(index) / os.path.relpath(real, point)

    def run(self, shell: str, script: str, env: dict[str, str]) -> str:
        binds = [w for i, p in enumerate(self.points) for w in (str(self.base / str(i)), p)]
        wrapper = 'while [ "$#" -gt 1 ]; do mount --bind "$1" "$2" || exit 97; shift 2; done; exec "$0" -c "$1"'
        done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", wrapper, shell, *binds,
                               script], capture_output=True, text=True, timeout=60, env=env, check=False)
        assert done.returncode == 0, done.stderr
        return done.stdout


@dataclass
class Login:
    home: Path
    config: Path
    runtime: Path
    env: dict[str, str]
    roots: list[Root]  # default_roots for it: the system's directories and its own, no other user's home


@pytest.fixture
def login(tmp_path: Path) -> Login:
    weird = "a b'c\\d$e"  # every value must reach the script as one word, verbatim
    home, config, runtime = tmp_path / f"home {weird}", tmp_path / f"config {weird}", tmp_path / f"run {weird}"
    env = {"HOME": str(home), "XDG_CONFIG_HOME": str(config), "XDG_RUNTIME_DIR": str(runtime), "PATH": "/usr/bin:/bin"}
    roots = default_roots(str(home), str(runtime), os.geteuid(), config=str(config))
    return Login(home, config, runtime, env, roots)


@pytest.fixture
def namespace(tmp_path: Path, login: Login) -> Namespace:
    _private_mounts_or_skip()
    system = [r.path for r in login.roots if not r.path.startswith(str(tmp_path))]
    namespace = Namespace(tmp_path / "bound", _mount_points([*system, "/home"]))
    for i in range(len(namespace.points)):
        (namespace.base / str(i)).mkdir(parents=True)
    return namespace


def _place(target: Path, name: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    text = "[Container]\nImage=x\n" if name.endswith(".container") else "[Service]\nExecStart=/usr/bin/podman run x\n"
    (target / name).write_text(text)


def _answer(namespace: Namespace, shell: str, env: dict[str, str]) -> str:
    """Everything the script sends back (run without a rigctl to call): what reaches the operator."""
    answer = namespace.run(shell, doctor_script(BOUNDARY, "/nonexistent/rigctl"), env)
    assert "end" in split_sections(answer, BOUNDARY)
    return answer


def _shipped(namespace: Namespace, shell: str, env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The files the script ships back, and all its sections."""
    sections = split_sections(_answer(namespace, shell, env), BOUNDARY)
    files, skipped = snapshot_files(sections)
    assert skipped == []
    return {p: t for p, t in files.items() if p.endswith((".container", ".service"))}, sections


def _other_homes(namespace: Namespace) -> list[str]:
    """Units placed in other users' homes (alice's, in both of the directories quadlet and systemd read)."""
    _place(namespace.where("/home/alice/.config/containers/systemd"), "alice.container")
    _place(namespace.where("/home/alice/.config/systemd/user"), "alice.service")
    return ["/home/alice/.config/containers/systemd/alice.container", "/home/alice/.config/systemd/user/alice.service"]


@pytest.mark.parametrize("shell", ["sh", "bash"])  # ssh runs the login's shell
def test_the_script_reads_exactly_the_directories_of_default_roots(
    login: Login, namespace: Namespace, tmp_path: Path, shell: str
) -> None:
    names = []
    for i, root in enumerate(login.roots):
        names.append(f"r{i:02d}.{'service' if root.kind == 'systemd' else 'container'}")
        where = namespace.where(root.path) if not root.path.startswith(str(tmp_path)) else Path(root.path)
        _place(where, names[-1])
    others = _other_homes(namespace)
    units, sections = _shipped(namespace, shell, login.env)
    missing = [f"{root.path}/{name}" for root, name in zip(login.roots, names, strict=True)
               if f"{root.path}/{name}" not in units]
    assert missing == [], "the script does not read these directories of default_roots"
    assert {os.path.dirname(p) for p in units} == {r.path for r in login.roots}
    assert snapshot_roots(sections) == login.roots  # the parsing side rebuilds the same list
    assert [p for p in units if p.startswith("/home/")] == [], "a unit of another user's home was shipped"
    assert all(p not in units for p in others)


def test_links_below_another_users_home_are_not_followed(login: Login, namespace: Namespace, tmp_path: Path) -> None:
    """Nothing of another user's home is shipped, through a link or not; the login's own link is followed."""
    elsewhere = tmp_path / "elsewhere"
    _place(elsewhere / "containers" / "systemd", "leak.container")
    _place(elsewhere / "systemd", "leak.container")
    _other_homes(namespace)
    namespace.where("/home/bob").mkdir(parents=True)
    namespace.where("/home/bob/.config").symlink_to(elsewhere)  # its containers/systemd is root's, say
    namespace.where("/home/carol/.config").mkdir(parents=True)
    namespace.where("/home/carol/.config/containers").symlink_to(elsewhere / "containers")
    namespace.where("/home/dave/.config/containers").mkdir(parents=True)
    namespace.where("/home/dave/.config/containers/systemd").symlink_to(elsewhere / "containers" / "systemd")
    (login.config / "containers").mkdir(parents=True)
    (login.config / "containers" / "systemd").symlink_to(elsewhere / "systemd")  # the login's own: followed
    units, _ = _shipped(namespace, "sh", login.env)
    assert sorted(units) == [f"{login.config}/containers/systemd/leak.container"]  # only the login's own link


@pytest.mark.parametrize("shell", ["sh", "bash"])
@pytest.mark.parametrize("whose", ["another user's home", "the login's own directory"])
def test_a_name_with_a_newline_does_not_ship_the_file_it_spells(
    login: Login, namespace: Namespace, tmp_path: Path, shell: str, whose: str
) -> None:
    """A directory named ``x<NL>/path/of/secret<NL>`` under a unit directory: ``find -print`` prints one
    path with two newlines in it, ``read`` would split it into three and ship the middle one, a file its
    owner cannot read but root can. As another user's home is not read at all, the login's own directory
    (which the script still walks) stands for a unit directory such a name could appear in."""
    secret = tmp_path / "secret" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:SECRET-HASH-7f3a:19000::::::\n")
    secret.chmod(0o600)
    if whose == "another user's home":
        units, listed = namespace.where("/home/mallory/.config/containers/systemd"), "/home/mallory/.config"
    else:
        units, listed = login.config / "containers" / "systemd", str(login.config / "containers" / "systemd")
    _place(units, "plain.container")
    trap = Path(f"{units}/x\n{secret}\n")
    _place(trap, "y.container")  # .../systemd/x<NL>/tmp/.../secret/shadow<NL>/y.container
    answer = _answer(namespace, shell, login.env)
    assert "SECRET-HASH" not in answer, "the script shipped the file a path with newlines spells"
    files, skipped = snapshot_files(split_sections(answer, BOUNDARY))
    assert str(secret) not in files and all("\n" not in p for p in files) and skipped == []
    shipped = [p for p in files if p.startswith(listed)]
    assert shipped == ([] if whose == "another user's home" else [f"{listed}/plain.container"])


def test_as_root_another_uids_users_directory_is_audited_as_theirs(login: Login, namespace: Namespace) -> None:
    """/etc/containers/systemd/users/UID is that uid's alone (quadlet reads it for no one else): root's
    snapshot audits it as theirs, a non-root login's not at all, and its drop-ins reach no shared unit."""
    users, other = "/etc/containers/systemd/users", 4321
    _place(namespace.where(users), "shared.container")
    _place(namespace.where(f"{users}/{os.geteuid()}"), "mine.container")
    _place(namespace.where(f"{users}/{other}"), "theirs.container")
    dropin = namespace.where(f"{users}/{other}/shared.container.d")
    dropin.mkdir(parents=True)
    (dropin / "50.conf").write_text("[Container]\nPublishPort=5050:80\n")
    files, sections = _shipped(namespace, "sh", login.env)
    assert sections["meta uid"].strip() == "0"
    as_root = {u.path: u for u in collect(files, snapshot_roots(sections, files))}
    assert set(as_root) == {f"{users}/shared.container", f"{users}/0/mine.container", f"{users}/{other}/theirs.container"}
    assert as_root[f"{users}/shared.container"].dropins == ()
    as_login = collect(files, snapshot_roots({**sections, "meta uid": "1000\n"}, files))
    assert sorted(u.path for u in as_login) == [f"{users}/shared.container"]


def test_a_home_with_a_trailing_slash_and_systemds_link_directories(login: Login, namespace: Namespace) -> None:
    """$HOME=/home/u/ gives the script /home/u//.config: its units are still found under the roots (before,
    no root matched them and they went unaudited); an *.upholds directory holds links to units found
    elsewhere and is skipped, as the local snapshot skips it (before, it was shipped)."""
    env = {k: v for k, v in login.env.items() if k != "XDG_CONFIG_HOME"}
    env["HOME"] = f"{login.home}/"
    _place(login.home / ".config" / "containers" / "systemd", "mine.container")
    _place(login.home / ".config" / "systemd" / "user" / "default.target.upholds", "x.service")
    _place(login.home / ".config" / "systemd" / "user" / "default.target.wants", "y.service")
    files, sections = _shipped(namespace, "sh", env)
    assert sorted(files) == [f"{login.home}/.config/containers/systemd/mine.container"]
    units = collect(files, snapshot_roots(sections, files))
    assert [u.path for u in units] == [f"{login.home}/.config/containers/systemd/mine.container"]


def test_reported_directories_are_spelled_as_the_shipped_paths() -> None:
    """An XDG_CONFIG_HOME with an inner "//" spells the roots so too; shipped paths have one slash (review)."""
    sections = {"meta home": "/home/u/\n", "meta uid": "1000\n", "meta config": "/home/u//cfg\n",
                "meta runtime": "/run/user//1000\n", "meta data": "\n",
                "file /home/u//cfg/containers/systemd/a.container": "[Container]\nImage=x\n",
                "file /run/user//1000/containers/systemd/b.container": "[Container]\nImage=x\n"}
    files, _ = snapshot_files(sections)
    assert sorted(u.path for u in collect(files, snapshot_roots(sections, files))) == [
        "/home/u/cfg/containers/systemd/a.container", "/run/user/1000/containers/systemd/b.container"]
