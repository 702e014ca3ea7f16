"""One trust rule for every path root reads as its own, and for the output directories named on the command
line (security issue #31, items 2 and 4).

Before: a sticky world-writable directory (``/tmp``) counted as root's home, so any user could plant
``rigctl/recipes/NAME.yaml`` or ``rigctl/hosts.yaml`` there for root to take; below root's own directories a
file or directory another uid owns (or anyone can write) was read all the same; ``render --out``, ``new --out``,
``metrics --textfile`` and ``verify --export`` followed a link a user placed into a root-only directory and
reported the user's path. The directories here are real, chowned to an ordinary uid as a user's are.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rigctl import invocation
from rigctl.errors import RigctlError
from rigctl.invocation import decide, path_refusal
from rigctl.util import safefs

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0, reason="ownership is root's question: run as root")]

USER = 23456
BUNDLED = Path(__file__).resolve().parents[2] / "recipes"
QWEN = (BUNDLED / "qwen3-8b-vllm.yaml").read_text()
HOSTILE_RECIPE = QWEN.replace("container:\n", "container:\n  extra_podman_args: ['--privileged']\n", 1)


def rigctl(*args: str, env: dict[str, str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in invocation.VARIABLES}
    done = subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True,
                          env={**base, **env}, timeout=60, check=False, cwd=cwd)
    assert "Traceback" not in done.stderr, done.stderr
    return done


@pytest.fixture
def sticky(tmp_path: Path) -> Path:
    """A root-owned sticky directory anyone can write, as /tmp is."""
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o1777)
    return d


@pytest.fixture
def root_home(tmp_path: Path) -> Path:
    home = tmp_path / "roothome"
    home.mkdir(mode=0o700)
    return home


def chown_tree(path: Path, uid: int = USER) -> None:
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, uid, follow_symlinks=False)


# --- the rule ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME",
                                  "XDG_RUNTIME_DIR"])
def test_a_sticky_shared_directory_is_no_home_of_roots(name: str, sticky: Path, root_home: Path) -> None:
    env = {"HOME": str(root_home), name: str(sticky)}
    me = decide(env, 0, 0)
    assert [r.name for r in me.refused] == [name]
    assert "sticky" in me.refused[0].why
    assert str(sticky) not in (str(me.config_home), str(me.state_home), str(me.cache_home), str(me.data_home),
                               str(me.runtime_dir), str(me.home))


def test_the_rule_for_files_below_a_trusted_directory(tmp_path: Path, sticky: Path) -> None:
    mine = tmp_path / "mine"
    mine.mkdir(mode=0o700)
    ok = mine / "ok.yaml"
    ok.write_text("x")
    assert path_refusal(str(ok)) is None
    theirs = mine / "theirs.yaml"
    theirs.write_text("x")
    os.chown(theirs, USER, USER)
    assert f"owned by uid {USER}" in (path_refusal(str(theirs)) or "")
    writable = mine / "writable.yaml"
    writable.write_text("x")
    writable.chmod(0o666)
    assert "writable by others" in (path_refusal(str(writable)) or "")
    group = mine / "group"
    group.mkdir()
    group.chmod(0o775)
    os.chown(group, 0, 4242)  # a group with no entry: not root's private group
    assert "writable by others" in (path_refusal(str(group / "x")) or "")
    # a root-owned entry of a sticky directory stays root's (nobody else can move it), a new name does not
    made = sticky / "made"
    made.mkdir(mode=0o700)
    assert path_refusal(str(made / "file")) is None
    assert "anyone may make it first" in (path_refusal(str(sticky / "not-yet" / "file")) or "")
    # a link root placed is judged by where it leads
    away = sticky / "away"
    away.mkdir()
    os.chown(away, USER, USER)
    (mine / "link").symlink_to(away)
    assert f"owned by uid {USER}" in (path_refusal(str(mine / "link" / "hosts.yaml")) or "")
    (mine / "good-link").symlink_to(made)
    assert path_refusal(str(mine / "good-link" / "file")) is None


# --- readers: recipes, inventories, licences, caches -----------------------------------------------------------


def test_root_does_not_take_what_a_user_planted_in_a_sticky_config_home(sticky: Path, root_home: Path) -> None:
    marker = sticky.parent / "ran-as-root"
    planted = sticky / "rigctl"
    (planted / "recipes").mkdir(parents=True)
    (planted / "recipes" / "qwen3-8b-vllm.yaml").write_text(HOSTILE_RECIPE)
    (planted / "hosts.yaml").write_text(
        "hosts:\n  - name: box1\n    ssh: root@127.0.0.1\n"
        f"    ssh_options: {{ProxyCommand: \"sh -c 'id > {marker}'\"}}\n")
    chown_tree(planted)
    env = {"HOME": str(root_home), "XDG_CONFIG_HOME": str(sticky)}
    shown = rigctl("show", "qwen3-8b-vllm", "--json", env=env)
    assert json.loads(shown.stdout)["source"]["origin"] == "bundled"
    assert f"XDG_CONFIG_HOME={sticky} is not root's" in shown.stderr
    rendered = rigctl("render", "qwen3-8b-vllm", "--podman-version", "5.4", "--quadlet-version", "5.4", env=env)
    assert rendered.returncode == 0 and "--privileged" not in rendered.stdout
    rigctl("fleet", "status", "--json", env=env)
    assert not marker.exists()


@pytest.mark.parametrize("shape", ["file owned by another uid", "file anyone can write", "directory of another uid",
                                   "link to another uid's file"])
def test_a_recipe_below_roots_own_config_that_fails_the_rule_is_refused(
        shape: str, root_home: Path, tmp_path: Path) -> None:
    """Refused with the reason, in `show` and `render` (exit 3) and as an invalid row of `recipes`: never
    taken, and never quietly replaced by the bundled recipe of its name either."""
    recipes = root_home / ".config" / "rigctl" / "recipes"
    recipes.mkdir(parents=True)
    target = recipes / "qwen3-8b-vllm.yaml"
    if shape == "file owned by another uid":
        target.write_text(HOSTILE_RECIPE)
        os.chown(target, USER, USER)
    elif shape == "file anyone can write":
        target.write_text(HOSTILE_RECIPE)
        target.chmod(0o666)
    elif shape == "directory of another uid":
        target.write_text(HOSTILE_RECIPE)
        os.chown(recipes, USER, USER)
    else:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        (theirs / "r.yaml").write_text(HOSTILE_RECIPE)
        chown_tree(theirs)
        target.symlink_to(theirs / "r.yaml")
    env = {"HOME": str(root_home)}
    for args in (("show", "qwen3-8b-vllm"), ("render", "qwen3-8b-vllm", "--podman-version", "5.4",
                                               "--quadlet-version", "5.4")):
        done = rigctl(*args, env=env)
        assert done.returncode == 3, (args, done.stdout)
        assert "--privileged" not in done.stdout and "not rigctl's own" in done.stderr, (args, done.stderr)
        assert str(target) in done.stderr
    listed = json.loads(rigctl("recipes", "--json", env=env).stdout)
    (row,) = [r for r in listed["recipes"] if r["name"] == "qwen3-8b-vllm"]
    assert row["valid"] is False and "not rigctl's own" in row["problems"][0]
    # the same file, made root's own, is taken (the rule is not a refusal of every user recipe)
    if shape != "link to another uid's file":
        os.chown(recipes, 0, 0)
        os.chown(target, 0, 0)
        target.chmod(0o644)
        done = rigctl("show", "qwen3-8b-vllm", "--json", env=env)
        assert json.loads(done.stdout)["source"]["origin"] == "user" and "not used" not in done.stderr


def test_root_never_writes_its_licence_record_through_a_users_link(root_home: Path, tmp_path: Path) -> None:
    state = root_home / ".local" / "state"
    state.mkdir(parents=True)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, USER, USER)
    (state / "rigctl").symlink_to(theirs)
    os.lchown(state / "rigctl", USER, USER)
    done = rigctl("preflight", "glm53-flash", "--accept-license", "shapleymcg-license-1.0", "--json",
                  env={"HOME": str(root_home)})
    assert not any(theirs.iterdir()), "root wrote into the user's directory"
    assert f"{state / 'rigctl'}" in done.stdout + done.stderr and "owned by uid" in done.stdout + done.stderr


def test_a_cache_that_fails_the_rule_is_not_read(root_home: Path) -> None:
    cache = root_home / ".cache" / "rigctl"
    cache.mkdir(parents=True)
    planted = cache / "sha256.json"
    planted.write_text(json.dumps({"version": 1, "files": {"/x": {"size": 1, "mtime_ns": 1, "sha256": "0" * 64}}}))
    os.chown(planted, USER, USER)
    with pytest.raises(safefs.FileRefused, match="owned by uid"):
        safefs.read_own(planted, limit=safefs.RECORD_LIMIT)
    planted.chmod(0o600)
    os.chown(planted, 0, 0)
    got = safefs.read_own(planted, limit=safefs.RECORD_LIMIT)
    assert got is not None and b"sha256" in got.data


def test_own_directories_are_made_in_a_sticky_one_but_never_taken_from_another_uid(sticky: Path) -> None:
    with safefs.own_dir(sticky / "rigctl-x" / "sub") as d:  # made now, by us: ours
        d.write_atomic("f", b"1")
    squatted = sticky / "rigctl-y"
    squatted.mkdir()
    os.chown(squatted, USER, USER)
    with pytest.raises(safefs.FileRefused, match="owned by uid"), safefs.own_dir(squatted / "sub"):
        pass
    assert not (squatted / "sub").exists()


# --- output directories named on the command line ---------------------------------------------------------


@pytest.fixture
def users_link_to_root_only(tmp_path: Path) -> tuple[Path, Path]:
    """A user's directory holding a link ``out`` to a directory only root may write; (link, target)."""
    rootonly = tmp_path / "rootonly"
    rootonly.mkdir(mode=0o700)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "out").symlink_to(rootonly)
    chown_tree(theirs)
    return theirs / "out", rootonly


def test_render_out_does_not_follow_a_users_link(users_link_to_root_only: tuple[Path, Path],
                                                 root_home: Path) -> None:
    link, rootonly = users_link_to_root_only
    for out in (link, link / "deeper"):
        done = rigctl("render", "qwen3-8b-vllm", "--podman-version", "5.4", "--quadlet-version", "5.4",
                      "--out", str(out), env={"HOME": str(root_home)})
        assert done.returncode != 0, done.stdout
        assert "not followed" in done.stderr
    assert not any(rootonly.iterdir())


def test_new_out_does_not_follow_a_users_link(users_link_to_root_only: tuple[Path, Path], root_home: Path) -> None:
    link, rootonly = users_link_to_root_only
    done = rigctl("new", "mine", "--from", "qwen3-8b-vllm", "--out", str(link / "mine.yaml"),
                  env={"HOME": str(root_home)})
    assert done.returncode != 0 and "not followed" in done.stderr
    assert not any(rootonly.iterdir())


def test_metrics_textfile_does_not_follow_a_users_link_nor_make_a_missing_directory(
        users_link_to_root_only: tuple[Path, Path], root_home: Path, tmp_path: Path) -> None:
    link, rootonly = users_link_to_root_only
    env = {"HOME": str(root_home), "XDG_RUNTIME_DIR": str(root_home)}
    done = rigctl("metrics", "--textfile", str(link), "--json", env=env)
    assert done.returncode != 0 and "not followed" in done.stdout + done.stderr
    assert not any(rootonly.iterdir())
    missing = tmp_path / "node-exporter-typo"
    done = rigctl("metrics", "--textfile", str(missing), env=env)
    assert done.returncode != 0 and not missing.exists()


def test_export_writer_reports_where_the_file_really_went(tmp_path: Path) -> None:
    """A link root placed is followed, and the report names its target, not the link."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "via").symlink_to(real)
    with safefs.open_out(tmp_path / "via" / "new" / "deeper", create=True) as d:
        d.write_atomic("f.json", b"{}")
        assert d.path == str(real / "new" / "deeper")
    assert (real / "new" / "deeper" / "f.json").read_bytes() == b"{}"


def test_verify_export_does_not_follow_a_users_link(users_link_to_root_only: tuple[Path, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from rigctl.cli import cmd_verify

    link, rootonly = users_link_to_root_only
    monkeypatch.setattr("rigctl.host.nvml.probe_gpus", lambda: None)
    monkeypatch.setattr("rigctl.verify.export.gpu_facts", lambda *_: ([], None))
    monkeypatch.setattr("rigctl.verify.export.soak_export", lambda *_a, **_k: {"x": 1})

    class Report:
        def __init__(self) -> None:
            self.endpoint = type("Endpoint", (), {"model": "m", "base_url": "http://127.0.0.1:1"})()
            self.answers: list[object] = []

        def get(self, _key: str) -> None:
            return None

    with pytest.raises(safefs.FileRefused, match="not followed"):
        cmd_verify._export(Report(), None, str(link / "x.json"))
    assert not any(rootonly.iterdir())


@pytest.mark.parametrize("planted", ["a directory of another uid", "a link to one", "a directory anyone can write"])
def test_ssh_control_sockets_never_go_into_a_directory_planted_in_a_sticky_one(
        planted: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """TMPDIR=/tmp is root's default: ``/tmp/rigctl-ssh-0`` made first by a user (or a link they placed there,
    or one left open to everyone) would hold root's ssh master connections."""
    from rigctl.fleet import ssh
    from rigctl.fleet.ssh import control_dir

    # a short sticky directory stands for /tmp, root's default TMPDIR (the real one is shared with other tests;
    # pytest's own is too deep for a socket path, so control_dir would fall back to /tmp)
    sticky = Path(tempfile.mkdtemp(prefix="rs", dir="/tmp"))
    sticky.chmod(0o1777)
    me = dataclasses.replace(invocation.current(), tmp_dir=sticky, runtime_given=False)
    monkeypatch.setattr(ssh, "current", lambda: me)
    squat = sticky / "rigctl-ssh-0"
    if planted == "a directory of another uid":
        squat.mkdir()
        os.chown(squat, USER, USER)
    elif planted == "a link to one":
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, USER, USER)
        squat.symlink_to(theirs)
        os.lchown(squat, USER, USER)
    else:
        squat.mkdir()
        squat.chmod(0o777)
    try:
        with pytest.raises(RigctlError, match="refusing"):
            control_dir()
        squat.unlink() if squat.is_symlink() else squat.rmdir()
        made = control_dir()  # nothing planted: made now, root's alone
        assert made == squat and stat.S_IMODE(made.stat().st_mode) == 0o700 and made.stat().st_uid == 0
    finally:
        shutil.rmtree(sticky)
