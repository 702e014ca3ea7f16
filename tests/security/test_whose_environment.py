"""Root never takes a user's environment as its own (security issue, items 1, 2, 3 and 5).

Run as root with a user's HOME or XDG directories (`sudo -E`, `su` without `-`), rigctl read the user's
hosts file (whose ssh options ran commands as root), deployed the user's recipe in place of the bundled one,
wrote completion through the user's links and took their licence acceptances and caches as root's. Now
``rigctl.invocation`` decides once which directories are root's, every reader asks it, and the refusal is
said on stderr. The directories here are real, chowned to an ordinary uid, as a user's home is.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rigctl import invocation
from rigctl.invocation import decide, roots_own

pytestmark = [pytest.mark.timeout(120),
              pytest.mark.skipif(os.geteuid() != 0, reason="ownership is root's question: run as root")]

USER = 23456
BUNDLED = Path(__file__).resolve().parents[2] / "recipes"


def owned(path: Path, uid: int = USER) -> Path:
    """``path`` and everything below it owned by ``uid`` (links themselves included)."""
    for p in [path, *path.rglob("*")]:
        os.chown(p, uid, uid, follow_symlinks=False)
    return path


@pytest.fixture
def user_home(tmp_path: Path) -> Path:
    """An ordinary user's home: theirs, mode 0755, as useradd makes it."""
    home = tmp_path / "home" / "u"
    home.mkdir(parents=True)
    return home


@pytest.fixture
def root_home(tmp_path: Path) -> Path:
    """A HOME root owns, to stand for root's own in a subprocess (so nothing lands in the real /root)."""
    home = tmp_path / "roothome"
    home.mkdir(mode=0o700)
    return home


def rigctl(*args: str, env: dict[str, str], timeout: float = 60) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in invocation.VARIABLES}
    done = subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True,
                          env={**base, **env}, timeout=timeout, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done


# --- the rule, on real directories -----------------------------------------------------------------------


def test_a_users_directory_is_not_roots(user_home: Path, root_home: Path) -> None:
    owned(user_home)
    me = decide({"HOME": str(user_home), "XDG_CONFIG_HOME": str(user_home / ".config")}, 0, 0)
    assert me.home != user_home and me.config_home == me.home / ".config"
    assert [r.name for r in me.refused] == ["HOME", "XDG_CONFIG_HOME"]
    assert f"owned by uid {USER}" in me.refused[0].why
    assert "HOME=" in (me.notice() or "") and str(me.home) in (me.notice() or "")
    # root's own directory counts, as given
    mine = decide({"HOME": str(root_home)}, 0, 0)
    assert mine.home == root_home and not mine.refused and mine.notice() is None


def test_a_root_owned_directory_below_a_users_is_not_roots(user_home: Path) -> None:
    (user_home / "cfg").mkdir()
    owned(user_home)
    os.chown(user_home / "cfg", 0, 0)  # root's, but the user can rename it away and put another there
    assert f"{user_home} is owned by uid {USER}" in (roots_own(str(user_home / "cfg")) or "")


def test_a_link_is_judged_by_what_it_is_and_where_it_leads(tmp_path: Path, user_home: Path) -> None:
    owned(user_home)
    to_user = tmp_path / "to-user"
    to_user.symlink_to(user_home)  # root's link, into the user's directory
    assert "leads to" in (roots_own(str(to_user)) or "")
    theirs = tmp_path / "their-link"
    theirs.symlink_to(tmp_path)  # leads to root's directory, but the link is the user's
    os.chown(theirs, USER, USER, follow_symlinks=False)
    assert f"owned by uid {USER}" in (roots_own(str(theirs)) or "")
    ok = tmp_path / "root-link"
    ok.symlink_to(tmp_path)
    assert roots_own(str(ok)) is None


def test_writable_by_others_and_missing_below_tmp(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone may swap what is inside
    assert "writable by others" in (roots_own(str(shared / "x")) or "")
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    assert "anyone may make it first" in (roots_own(str(sticky / "not-yet")) or "")
    (sticky / "made").mkdir()
    assert roots_own(str(sticky / "made")) is None  # root's, in a sticky directory: nobody else can move it
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    assert roots_own(str(private / "a" / "b")) is None  # only root can make it


def test_relative_and_empty_values_are_ignored_for_everyone(root_home: Path) -> None:
    for euid in (0, 1000):
        me = decide({"HOME": str(root_home), "XDG_STATE_HOME": "state", "XDG_CACHE_HOME": ""}, euid, euid)
        assert me.state_home == root_home / ".local/state" and me.cache_home == root_home / ".cache"


def test_an_ordinary_user_keeps_their_environment(user_home: Path) -> None:
    owned(user_home)
    me = decide({"HOME": str(user_home), "XDG_RUNTIME_DIR": "/run/user/23456"}, USER, USER)
    assert me.home == user_home and me.runtime_dir == Path("/run/user/23456") and not me.refused


def test_root_with_a_users_runtime_dir_uses_its_own(user_home: Path) -> None:
    owned(user_home)
    me = decide({"XDG_RUNTIME_DIR": str(user_home)}, 0, 0)
    assert me.runtime_dir == Path("/run/user/0") and me.runtime_given and me.refused[0].name == "XDG_RUNTIME_DIR"


def test_ssh_control_sockets_never_go_below_a_users_runtime_dir(monkeypatch: pytest.MonkeyPatch,
                                                                 user_home: Path, root_home: Path) -> None:
    from rigctl.fleet.ssh import control_dir

    owned(user_home)
    monkeypatch.setenv("HOME", str(root_home))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(user_home))
    monkeypatch.setenv("TMPDIR", str(user_home))
    got = control_dir()
    assert not str(got).startswith(str(user_home)), got
    assert not any(user_home.iterdir())  # nothing made in the user's directory


def test_identity_files_expand_below_roots_home(monkeypatch: pytest.MonkeyPatch, user_home: Path) -> None:
    from rigctl.invocation import expand_user

    owned(user_home)
    monkeypatch.setenv("HOME", str(user_home))
    assert not expand_user("~/.ssh/id_ed25519").startswith(str(user_home))
    assert expand_user("~root/.ssh/id") == "/root/.ssh/id" and expand_user("/abs/key") == "/abs/key"


# --- what root reads and writes, as an operator runs it ----------------------------------------------------


@pytest.fixture
def hostile_config(user_home: Path, tmp_path: Path) -> tuple[Path, Path]:
    """The user's ~/.config/rigctl: a hosts file whose ssh option runs a command, and a recipe named like a
    bundled one that mounts / and runs privileged. Yields (their config dir, the marker the command makes)."""
    marker = tmp_path / "ran-as-root"
    config = user_home / ".config"
    rigctl_dir = config / "rigctl"
    (rigctl_dir / "recipes").mkdir(parents=True)
    (rigctl_dir / "hosts.yaml").write_text(
        "hosts:\n  - name: box1\n    ssh: root@127.0.0.1\n"
        f"    ssh_options: {{ProxyCommand: \"sh -c 'id > {marker}'\"}}\n")
    text = (BUNDLED / "qwen3-8b-vllm.yaml").read_text()
    hostile = text + ("\n" if not text.endswith("\n") else "")
    (rigctl_dir / "recipes" / "qwen3-8b-vllm.yaml").write_text(
        hostile.replace("container:\n", "container:\n  extra_podman_args: ['--privileged']\n", 1))
    owned(user_home)
    return config, marker


@pytest.mark.parametrize("via", ["HOME", "XDG_CONFIG_HOME"])
def test_root_does_not_run_the_users_hosts_file(via: str, hostile_config: tuple[Path, Path],
                                                root_home: Path) -> None:
    config, marker = hostile_config
    env = {"HOME": str(config.parent)} if via == "HOME" else {"HOME": str(root_home), "XDG_CONFIG_HOME": str(config)}
    for args in (("fleet", "status", "--json"), ("--host", "box1", "status")):
        done = rigctl(*args, env=env, timeout=30)
        assert not marker.exists(), f"{args}: the user's ProxyCommand ran as root"
        assert f"{via}={config.parent if via == 'HOME' else config} is not root's" in done.stderr
        assert done.returncode != 0  # root has no hosts file of its own here


def test_root_renders_the_bundled_recipe_not_the_users(hostile_config: tuple[Path, Path], root_home: Path) -> None:
    config, _ = hostile_config
    env = {"HOME": str(root_home), "XDG_CONFIG_HOME": str(config)}
    done = rigctl("render", "qwen3-8b-vllm", "--podman-version", "5.4", "--quadlet-version", "5.4", env=env)
    assert done.returncode == 0, done.stderr
    assert "--privileged" not in done.stdout and "overrides the bundled" not in done.stderr
    shown = json.loads(rigctl("show", "qwen3-8b-vllm", "--json", env=env).stdout)
    assert shown["source"]["origin"] == "bundled" and "recipe_overrides" not in shown


def test_a_users_override_is_named_by_each_command(root_home: Path) -> None:
    """Not root's problem only: a user's own recipe that replaces a bundled one is said by every command
    that uses it, in text (stderr) and JSON."""
    mine = root_home / ".config" / "rigctl" / "recipes"
    mine.mkdir(parents=True)
    (mine / "qwen3-8b-vllm.yaml").write_text((BUNDLED / "qwen3-8b-vllm.yaml").read_text())
    env = {"HOME": str(root_home)}
    inventory = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
    captured = inventory / "h200.json"
    commands = [("render", "qwen3-8b-vllm", "--podman-version", "5.4", "--quadlet-version", "5.4"),
                ("show", "qwen3-8b-vllm"), ("preflight", "qwen3-8b-vllm", "--inventory", str(captured)),
                ("up", "qwen3-8b-vllm", "--dry-run", "--inventory", str(captured))]
    for args in commands:
        text = rigctl(*args, env=env)
        assert f"is {mine / 'qwen3-8b-vllm.yaml'}, a user recipe that overrides the bundled one" in text.stderr, args
        doc = json.loads(rigctl(*args, "--json", env=env).stdout)
        assert doc["recipe_overrides"] == [{"name": "qwen3-8b-vllm", "path": str(mine / "qwen3-8b-vllm.yaml"),
                                            "overrides": str(BUNDLED / "qwen3-8b-vllm.yaml")}], args


def test_root_keeps_its_licence_record_and_cache_apart(user_home: Path, root_home: Path) -> None:
    state = user_home / ".local" / "state"
    (state / "rigctl").mkdir(parents=True)
    planted = user_home / "planted"
    planted.mkdir()
    (state / "rigctl" / "licenses.json").write_text(json.dumps({"accepted": [
        {"recipe": "glm53-flash", "id": "shapleymcg-license-1.0", "accepted_at": "2026-01-01T00:00:00Z",
         "by": "u"}]}))
    owned(user_home)
    env = {"HOME": str(root_home), "XDG_STATE_HOME": str(state), "XDG_CACHE_HOME": str(planted)}
    done = rigctl("preflight", "glm53-flash", "--accept-license", "shapleymcg-license-1.0", "--json", env=env)
    assert "XDG_STATE_HOME=" in done.stderr and "XDG_CACHE_HOME=" in done.stderr
    assert (root_home / ".local" / "state" / "rigctl" / "licenses.json").is_file()  # root's own record
    theirs = json.loads((state / "rigctl" / "licenses.json").read_text())
    assert len(theirs["accepted"]) == 1  # untouched
    assert not any(planted.iterdir())
    for p in user_home.rglob("*"):
        assert p.lstat().st_uid == USER, f"root made {p} in the user's home"


def test_completion_is_installed_for_the_shell_named(root_home: Path) -> None:
    done = rigctl("--install-completion", "zsh", env={"HOME": str(root_home)})
    assert done.returncode == 0, done.stderr
    assert (root_home / ".zfunc" / "_rigctl").is_file() and "fpath+=~/.zfunc" in (root_home / ".zshrc").read_text()
    assert not (root_home / ".bashrc").exists() and not (root_home / ".bash_completions").exists()
    again = rigctl("--install-completion", "zsh", env={"HOME": str(root_home)})
    assert again.returncode == 0 and (root_home / ".zshrc").read_text().count("fpath+=~/.zfunc") == 1
    assert "not one rigctl completes" in rigctl("--install-completion", "tcsh", env={"HOME": str(root_home)}).stderr


@pytest.mark.parametrize("linked", [".bashrc", ".bash_completions/rigctl.sh", ".bash_completions"])
def test_completion_never_writes_through_a_link(linked: str, root_home: Path, tmp_path: Path) -> None:
    victim_dir = tmp_path / "victim"
    victim_dir.mkdir()
    victim = victim_dir / "file"
    victim.write_text("# root's file\n")
    at = root_home / linked
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(victim if linked != ".bash_completions" else victim_dir)
    done = rigctl("--install-completion", "bash", env={"HOME": str(root_home)})
    assert done.returncode != 0 and "link" in done.stderr and "fix:" in done.stderr
    assert victim.read_text() == "# root's file\n" and sorted(victim_dir.iterdir()) == [victim]
    assert stat.S_ISLNK(at.lstat().st_mode)


def test_root_runs_no_program_another_user_placed(user_home: Path, root_home: Path, tmp_path: Path) -> None:
    """`su` without `-` keeps the user's PATH (`~/bin` first) and any RIGCTL_QUADLET or CONTAINERS_CONF they
    set: root would run their `podman`, their "quadlet" and the runtime their containers.conf names. As root
    such entries are dropped before any program starts, and said."""
    marker = tmp_path / "ran-as-root"
    bin_dir = user_home / "bin"
    bin_dir.mkdir()
    for name in ("podman", "systemctl", "quadlet", "ssh", "nvidia-smi"):
        prog = bin_dir / name
        prog.write_text(f"#!/bin/sh\necho {name} >> {marker}\nexit 1\n")
        prog.chmod(0o755)
    (user_home / "containers.conf").write_text('[engine]\nruntime = "/home/u/bin/evil"\n')
    owned(user_home)
    env = {"HOME": str(root_home), "PATH": f"{bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin",
           "RIGCTL_QUADLET": str(bin_dir / "quadlet"), "CONTAINERS_CONF": str(user_home / "containers.conf")}
    done = rigctl("inventory", "--json", env=env)
    assert not marker.exists(), f"root ran {marker.read_text()!r} from the user's directory"
    assert f"PATH entry {bin_dir}" in done.stderr and "RIGCTL_QUADLET=" in done.stderr
    assert "CONTAINERS_CONF=" in done.stderr and json.loads(done.stdout)["command"] == "inventory"
    # root's own directories are searched as before
    mine = root_home / "bin"
    mine.mkdir()
    (mine / "podman").write_text(f"#!/bin/sh\necho podman >> {marker}\nexit 1\n")
    (mine / "podman").chmod(0o755)
    again = rigctl("inventory", "--json", env={"HOME": str(root_home), "PATH": f"{mine}:/usr/bin:/bin"})
    assert marker.exists() and "PATH entry" not in again.stderr


def test_a_managers_directories_are_read_by_the_invocation_s_rule(tmp_path: Path) -> None:
    """A user manager's environment decides its units' %S (the engine log) and its generator's directory: its
    value when absolute, else the XDG default below its HOME, else none (then this login's own)."""
    from rigctl.deploy.up import generator_reads
    from rigctl.places import Scope, engine_log

    assert invocation.named_dir({"XDG_STATE_HOME": "/s", "HOME": "/h"}, "XDG_STATE_HOME") == Path("/s")
    assert invocation.named_dir({"XDG_STATE_HOME": "rel", "HOME": "/h"}, "XDG_STATE_HOME") == Path("/h/.local/state")
    assert invocation.named_dir({"XDG_STATE_HOME": "", "HOME": "h"}, "XDG_STATE_HOME") is None
    assert engine_log(Scope.USER, "rigctl-a.service", {"HOME": "/h"}) == Path("/h/.local/state/rigctl/logs/rigctl-a.log")
    own = engine_log(Scope.USER, "rigctl-a.service", {"HOME": "relative"})
    assert own == invocation.current().state_home / "rigctl" / "logs" / "rigctl-a.log"
    assert generator_reads({"HOME": "/h"}) == "/h/.config/containers/systemd"
    assert generator_reads({"XDG_CONFIG_HOME": "/c", "HOME": "/h"}) == "/c/containers/systemd"
    assert generator_reads({}) is None and generator_reads(None) is None
