"""Issue #31, item 1: the ssh options an inventory may set are an allow-list, and rigctl's own are never
the inventory's.

Without any ``*Command`` option an inventory took over the operator (root): UserKnownHostsFile with
accept-new appends a host key line to any file (to authorized_keys, under a HostKeyAlias of ``no-pty``:
a login), StreamLocalBindUnlink with a LocalForward to a path deletes it, IdentityAgent with
AddKeysToAgent hands the private key to the socket's owner; and the inventory's BatchMode, ControlPath,
LogLevel replaced rigctl's. Each class is tested in every spelling an inventory has (rigctl's hosts file,
its defaults, any case; Ansible's ``-oK=V``, ``-o K=V``, ``-o "K V"`` and ssh's own flags ``-L``, ``-A``,
``-i``...). The attacks themselves run against real sshd on 127.0.0.1 (conftest.ssh_fleet) with the real
ssh client, and what ssh takes from rigctl's command line is read back with the real ``ssh -G``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rigctl.errors import InvalidInputError
from rigctl.fleet.inventory import Host
from rigctl.fleet.loader import load_inventory
from rigctl.fleet.ssh import OpenSsh

pytestmark = pytest.mark.timeout(120)


def _write(where: Path, name: str, text: str) -> Path:
    path = where / name
    path.write_text(text)
    return path


def hosts_yaml(where: Path, options: dict[str, str], *, in_defaults: bool = False, extra: str = "") -> Path:
    """A hosts file whose one host (``evil``, on a closed port of 127.0.0.1) has ``options``."""
    opts = json.dumps(options)
    if in_defaults:
        text = f"defaults:\n  ssh_options: {opts}\nhosts:\n  - {{name: evil, ssh: 127.0.0.1, port: 1{extra}}}\n"
    else:
        text = f"hosts:\n  - {{name: evil, ssh: 127.0.0.1, port: 1, ssh_options: {opts}{extra}}}\n"
    return _write(where, "hosts.yaml", text)


def ansible_ini(where: Path, args: str, var: str = "ansible_ssh_common_args") -> Path:
    quoted = "'" + args.replace("'", "'\\''") + "'" if "'" not in args else json.dumps(args)
    return _write(where, "inventory.ini", f"evil ansible_host=127.0.0.1 ansible_port=1 {var}={quoted}\n")


def ansible_yaml(where: Path, args: str) -> Path:
    return _write(where, "inventory.yml", "all:\n  hosts:\n    evil:\n      ansible_host: 127.0.0.1\n"
                                          f"      ansible_ssh_extra_args: {json.dumps(args)}\n")


# Options that act on this machine: a file or socket path, a forward, an agent, the environment, a
# program, the known-hosts file or how its lines are written. (name, value)
ACTING: list[tuple[str, str]] = [
    ("UserKnownHostsFile", "/root/.ssh/authorized_keys"),
    ("GlobalKnownHostsFile", "/etc/ssh/ssh_known_hosts"),
    ("HostKeyAlias", "no-pty"),
    ("HashKnownHosts", "no"),
    ("UpdateHostKeys", "yes"),
    ("StreamLocalBindUnlink", "yes"),
    ("LocalForward", "/etc/passwd 127.0.0.1:9"),
    ("RemoteForward", "9000 127.0.0.1:22"),
    ("DynamicForward", "1080"),
    ("GatewayPorts", "yes"),
    ("Tunnel", "yes"),
    ("IdentityAgent", "/tmp/other-user/agent.sock"),
    ("AddKeysToAgent", "yes"),
    ("ForwardAgent", "yes"),
    ("ForwardX11", "yes"),
    ("SendEnv", "AWS_*"),
    ("SetEnv", "LD_PRELOAD=/tmp/x.so"),
    ("CertificateFile", "/tmp/x-cert.pub"),
    ("ControlPath", "/tmp/shared.sock"),  # rigctl's own
    ("BatchMode", "no"),  # rigctl's own
    ("ProxyCommand", "touch /tmp/pwned"),
    ("KnownHostsCommand", "touch /tmp/pwned"),
    ("StrictHostKeyChecking", "no"),  # a changed host key let through
    ("EnableSSHKeysign", "yes"),
    ("RequestTTY", "force"),
]
OWN = {"ControlPath", "BatchMode"}


def _refused(path: Path, option: str) -> None:
    with pytest.raises(InvalidInputError) as caught:
        load_inventory(path).select()  # rigctl's own options are refused by the hosts file's model
    said = " ".join([caught.value.message, *caught.value.problems])
    assert ("host evil" in said or "ssh_options" in said) and option.lower() in said.lower(), said


@pytest.mark.parametrize(("option", "value"), ACTING, ids=[o for o, _ in ACTING])
def test_an_option_that_acts_here_is_refused_in_every_spelling(tmp_path: Path, option: str, value: str) -> None:
    spellings = [
        hosts_yaml(tmp_path, {option: value}),
        hosts_yaml(tmp_path, {option.lower(): value}),
        hosts_yaml(tmp_path, {option.upper(): value}, in_defaults=True),
        ansible_ini(tmp_path, f"-o{option}={value}" if " " not in value else f'-o "{option}={value}"'),
        ansible_ini(tmp_path, f'-o "{option.lower()} {value}"', var="ansible_ssh_extra_args"),
        ansible_yaml(tmp_path, f'-o "{option}={value}"'),
    ]
    for path in spellings:
        if option in OWN and path.suffix != ".yaml":
            # Ansible's ControlPersist and the like are usual: dropped with a note, never passed
            inventory = load_inventory(path)
            (host,) = inventory.select()
            assert option.lower() not in {k.lower() for k in host.ssh_options}
            assert any(f"rigctl sets {option} itself" in w for w in inventory.warnings([host]))
            continue
        _refused(path, option)


# ssh's own flags in Ansible's arguments: each is the option it sets, judged the same way
FLAGS = {"-L 8080:127.0.0.1:80": "LocalForward", "-L/tmp/s:127.0.0.1:9": "LocalForward",
         "-R 9000:127.0.0.1:22": "RemoteForward", "-D 1080": "DynamicForward", "-A": "ForwardAgent",
         "-X": "ForwardX11", "-Y": "ForwardX11Trusted", "-CA": "ForwardAgent", "-g": "GatewayPorts",
         "-w 0:0": "Tunnel", "-I /tmp/p11.so": "PKCS11Provider", "-K": "GSSAPIDelegateCredentials"}


@pytest.mark.parametrize("flag", sorted(FLAGS))
def test_ssh_flags_in_ansible_arguments_are_judged_as_their_options(tmp_path: Path, flag: str) -> None:
    _refused(ansible_ini(tmp_path, flag), FLAGS[flag])


@pytest.mark.parametrize("flag", ["-F /tmp/other_config", "-E /root/.ssh/authorized_keys", "-W host:22",
                                  "-O exit", "-Fx", "-Z", "box"])
def test_ssh_flags_no_option_stands_for_refuse_the_host(tmp_path: Path, flag: str) -> None:
    inventory = load_inventory(ansible_ini(tmp_path, f"-C {flag}"))
    assert inventory.refused.get("evil")
    with pytest.raises(InvalidInputError, match="host evil"):
        inventory.select(allow_ssh_options=True)  # not even on the operator's word: rigctl cannot pass it


ALLOWED = {"Port": "2222", "User": "ops", "ConnectTimeout": "7", "ConnectionAttempts": "2",
           "ServerAliveInterval": "9", "ServerAliveCountMax": "4", "Compression": "yes",
           "Ciphers": "aes256-gcm@openssh.com,chacha20-poly1305@openssh.com", "KexAlgorithms": "+curve25519-sha256",
           "MACs": "hmac-sha2-256-etm@openssh.com", "HostKeyAlgorithms": "ssh-ed25519",
           "PubkeyAcceptedAlgorithms": "ssh-ed25519,rsa-sha2-512", "AddressFamily": "inet",
           "StrictHostKeyChecking": "accept-new", "IdentitiesOnly": "yes", "PreferredAuthentications": "publickey",
           "ProxyJump": "ops@jump:22,bastion", "TCPKeepAlive": "no"}


def with_jumps(path: Path) -> Path:
    """``path`` (a hosts file) with two more hosts a ProxyJump may name: ``jump`` and ``bastion-1`` (ssh ops@bastion)."""
    path.write_text(path.read_text() + "  - {name: jump, ssh: 127.0.0.2, port: 1}\n"
                                       "  - {name: bastion-1, ssh: ops@bastion, port: 1}\n")
    return path


def test_connection_settings_pass_without_the_flag(tmp_path: Path) -> None:
    path = hosts_yaml(tmp_path, ALLOWED)
    with_jumps(path)
    (host,) = load_inventory(path).select(names=["evil"])
    argv = OpenSsh(tmp_path).argv(host, "true")
    for key, value in ALLOWED.items():
        assert f"{key}={value}" in argv
    args = " ".join(f"-o {k}={v}" for k, v in ALLOWED.items() if k != "ProxyJump") + " -C -4 -J jump -p 2200 -l ops"
    path = ansible_ini(tmp_path, args)
    path.write_text(path.read_text() + "jump ansible_host=127.0.0.2 ansible_port=1\n")
    (host,) = load_inventory(path).select(names=["evil"])
    assert host.ssh_options["ProxyJump"] == "jump" and host.ssh_options["AddressFamily"] == "inet"


@pytest.mark.parametrize("jump", ["stranger", "ops@stranger:22", "jump,stranger", "ssh://root@[fd00::9]:22",
                                  "JUMP,10.9.9.9"])
def test_a_proxyjump_leads_only_to_hosts_of_the_inventory(tmp_path: Path, jump: str) -> None:
    """A hop that is no host of the inventory would take root's connection, and the keys it offers, to a host
    nobody listed: refused without the flag, in both inventory kinds."""
    path = hosts_yaml(tmp_path, {"ProxyJump": jump})
    with_jumps(path)
    with pytest.raises(InvalidInputError, match="not a host of this inventory"):
        load_inventory(path).select(names=["evil"])
    assert load_inventory(path).select(names=["evil"], allow_ssh_options=True)
    path = ansible_ini(tmp_path, f"-J {jump}")
    path.write_text(path.read_text() + "jump ansible_host=127.0.0.2 ansible_port=1\n")
    with pytest.raises(InvalidInputError, match="not a host of this inventory"):
        load_inventory(path).select(names=["evil"])
    # a hop named by the inventory host's name or its ssh destination, in any case, passes
    for ok in ("jump", "JUMP", "ops@127.0.0.2:22", "bastion-1,jump"):
        path = hosts_yaml(tmp_path, {"ProxyJump": ok})
        with_jumps(path)
        assert load_inventory(path).select(names=["evil"])


@pytest.mark.parametrize(("option", "value"), [("Port", "22 -oProxyCommand=x"), ("User", "%u"),
                                               ("HostName", "%h.evil"), ("ConnectTimeout", "${X}"),
                                               ("Ciphers", "aes128-ctr LocalForward=/x"),
                                               ("StrictHostKeyChecking", "off"), ("ProxyJump", "-oProxyCommand=x")])
def test_an_allowed_option_with_a_value_out_of_bounds_is_refused(tmp_path: Path, option: str, value: str) -> None:
    try:
        inventory = load_inventory(hosts_yaml(tmp_path, {option: value}))
    except InvalidInputError:
        return  # the hosts file's model refused it first (a jump host starting with '-')
    with pytest.raises(InvalidInputError, match=option):
        inventory.select()


def test_the_operators_word_lets_any_option_but_rigctls_own_through(tmp_path: Path) -> None:
    path = ansible_ini(tmp_path, "-o LocalForward=8080:127.0.0.1:80 -o ControlPath=/tmp/x -o BatchMode=no -A")
    (host,) = load_inventory(path).select(allow_ssh_options=True)
    argv = OpenSsh(tmp_path, allow_options=True).argv(host, "true")
    assert "LocalForward=8080:127.0.0.1:80" in argv and "ForwardAgent=yes" in argv
    assert "ControlPath=/tmp/x" not in argv and "BatchMode=no" not in argv
    with pytest.raises(InvalidInputError, match="--allow-ssh-options"):
        OpenSsh(tmp_path).argv(host, "true")  # the last guard, for a host handed over without select


# --- the identity file: only one that no one else controls ---------------------------------------------------


def _key(where: Path, *, uid: int = 0, mode: int = 0o600, dir_mode: int = 0o700) -> Path:
    where.mkdir(mode=dir_mode, exist_ok=True)
    where.chmod(dir_mode)
    key = where / "id_ed25519"
    key.write_text("not really a key\n")
    key.chmod(mode)
    os.chown(key, uid, 0)
    return key


@pytest.mark.skipif(os.geteuid() != 0, reason="the trust rule is root's: another user's key is what it refuses")
def test_an_identity_file_someone_else_controls_is_refused_for_root(tmp_path: Path) -> None:
    good = _key(tmp_path / "own")
    others = {"owned by another user": _key(tmp_path / "theirs", uid=65534),
              "writable by others": _key(tmp_path / "open", mode=0o666),
              "in a directory anyone writes": _key(tmp_path / "tmpdir", dir_mode=0o777),
              "a token ssh expands": Path("/root/.ssh/%u")}
    (host,) = load_inventory(hosts_yaml(tmp_path, {"IdentityFile": str(good)}, extra=f", identity_file: {good}")).select()
    assert f"IdentityFile={good}" in OpenSsh(tmp_path).argv(host, "true")
    for why, key in others.items():
        for path in (hosts_yaml(tmp_path, {"IdentityFile": str(key)}),
                     hosts_yaml(tmp_path, {}, extra=f", identity_file: '{key}'"),
                     ansible_ini(tmp_path, f"-i {key}"),
                     _write(tmp_path, "pk.ini", f"evil ansible_host=127.0.0.1 ansible_ssh_private_key_file='{key}'\n")):
            with pytest.raises(InvalidInputError, match="--allow-ssh-options") as caught:
                load_inventory(path).select()
            assert str(key) in " ".join(caught.value.problems), (why, path.name)


# --- rigctl's own options come first, where ssh keeps them (read back with the real ssh -G) -----------------


def ssh_g(argv: list[str]) -> dict[str, list[str]]:
    """What the real ssh makes of rigctl's command line: ``ssh -G`` with the same options and destination."""
    head = argv[1: argv.index("--")]
    done = subprocess.run(["ssh", "-G", *head, argv[argv.index("--") + 1]], capture_output=True, text=True,
                          timeout=30, check=True)
    seen: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        key, _, value = line.partition(" ")
        seen.setdefault(key, []).append(value)
    return seen


def test_rigctls_own_options_win_over_any_inventory(tmp_path: Path) -> None:
    args = ("-o BatchMode=no -o ControlPath=/tmp/evil-%C -o ControlMaster=no -o ControlPersist=yes "
            "-o LogLevel=DEBUG3 -o ConnectTimeout=3 -q")
    (host,) = load_inventory(ansible_ini(tmp_path, args)).select(allow_ssh_options=True)
    seen = ssh_g(OpenSsh(tmp_path / "ctl", allow_options=True).argv(host, "true"))
    assert seen["batchmode"] == ["yes"]
    assert seen["controlpath"][0].startswith(str(tmp_path / "ctl"))
    assert seen["controlmaster"] == ["auto"] and seen["controlpersist"] == ["120"]
    assert seen["loglevel"] == ["ERROR"]
    assert seen["connecttimeout"] == ["3"]  # a connection setting: the inventory's, before rigctl's default
    # a Host built by hand (not through the hosts file's model) cannot replace them either
    sneaked = Host.model_construct(name="x", ssh="127.0.0.1", tags=[], user=None, port=None, identity_file=None,
                                   ssh_options={"batchmode": "no", "LOGLEVEL": "DEBUG"}, rigctl=None)
    seen = ssh_g(OpenSsh(tmp_path / "ctl", allow_options=True).argv(sneaked, "true"))
    assert seen["batchmode"] == ["yes"] and seen["loglevel"] == ["ERROR"]


def test_the_hosts_file_refuses_rigctls_own_options(tmp_path: Path) -> None:
    for spelled in ("BatchMode", "controlpath", "CONTROLPERSIST", "LogLevel", "ControlMaster"):
        with pytest.raises(InvalidInputError, match=r"rigctl sets .* itself"):
            load_inventory(hosts_yaml(tmp_path, {spelled: "x"}))


# --- the attacks, end to end with the real ssh against real sshd ---------------------------------------------


def _rigctl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "XDG_RUNTIME_DIR": str(cwd)}
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, env=env,
                          timeout=90, check=False, cwd=cwd)


@pytest.fixture
def run_dir() -> Iterator[Path]:
    import shutil
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # short: a control socket path is <108 bytes
    yield where
    OpenSsh(where / "rigctl" / "ssh").close_all()
    shutil.rmtree(where, ignore_errors=True)


def _box_inventory(fleet: Any, where: Path, options: dict[str, str], *, form: str) -> Path:
    box = fleet.hosts[0]
    if form == "yaml":
        return _write(where, "hosts.yaml", f"defaults:\n  identity_file: {fleet.client_key}\nhosts:\n"
                                           f"  - name: evil\n    ssh: 127.0.0.1\n    port: {box.port}\n"
                                           f"    ssh_options: {json.dumps(options)}\n")
    args = " ".join(f"-o '{k}={v}'" if " " in v else f"-o{k}={v}" for k, v in options.items())
    return _write(where, "inventory.ini", f"evil ansible_host=127.0.0.1 ansible_port={box.port} "
                                          f"ansible_ssh_private_key_file={fleet.client_key} "
                                          f"ansible_ssh_common_args=\"{args}\"\n")


@pytest.mark.integration
@pytest.mark.parametrize("form", ["yaml", "ini"])
def test_a_known_hosts_file_of_the_inventory_never_becomes_an_authorized_key(
    ssh_fleet: Any, run_dir: Path, tmp_path: Path, form: str
) -> None:
    target = tmp_path / "authorized_keys"
    options = {"UserKnownHostsFile": str(target), "StrictHostKeyChecking": "accept-new",
               "HashKnownHosts": "no", "HostKeyAlias": "no-pty"}
    inventory = _box_inventory(ssh_fleet, tmp_path, options, form=form)
    for args in (["fleet", "status", "--hosts", str(inventory), "--json"],
                 ["--hosts", str(inventory), "--host", "evil", "status", "--json"]):
        done = _rigctl(*args, cwd=run_dir)
        assert done.returncode == 3, (args, done.stdout, done.stderr)
        assert "UserKnownHostsFile" in done.stderr + done.stdout and "--allow-ssh-options" in done.stderr + done.stdout
        assert not target.exists(), target.read_text()  # before: `no-pty ssh-ed25519 AAAA...`, a login


@pytest.mark.integration
@pytest.mark.parametrize("form", ["yaml", "ini"])
def test_a_forward_of_the_inventory_never_unlinks_a_file(ssh_fleet: Any, run_dir: Path, tmp_path: Path,
                                                          form: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    options = {"StreamLocalBindUnlink": "yes", "LocalForward": f"{victim} 127.0.0.1:9"}
    inventory = _box_inventory(ssh_fleet, tmp_path, options, form=form)
    done = _rigctl("fleet", "status", "--hosts", str(inventory), "--json", cwd=run_dir)
    assert done.returncode == 3, done.stderr
    assert victim.read_text() == "keep me\n"  # before: gone, a socket in its place


@pytest.mark.integration
def test_connection_settings_reach_a_real_host_without_the_flag(ssh_fleet: Any, run_dir: Path,
                                                                 tmp_path: Path) -> None:
    options = {"ConnectTimeout": "5", "ServerAliveInterval": "2", "Compression": "yes", "IdentitiesOnly": "yes",
               "StrictHostKeyChecking": "accept-new", "PreferredAuthentications": "publickey"}
    for form in ("yaml", "ini"):
        inventory = _box_inventory(ssh_fleet, tmp_path, options, form=form)
        done = _rigctl("fleet", "status", "--hosts", str(inventory), "--json", cwd=run_dir)
        doc = json.loads(done.stdout)
        assert doc["hosts"][0]["reachable"] is True, (form, done.stdout)
