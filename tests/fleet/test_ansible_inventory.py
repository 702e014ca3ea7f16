"""Ansible inventories (INI and YAML) as `--hosts`, and `--limit`: real inventory files parsed the way
Ansible parses them, hostile values refused, and the fleet commands reaching exactly the hosts chosen
on the loopback sshd hosts (conftest.ssh_fleet)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rigctl.cli.app import app
from rigctl.errors import InvalidInputError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.fleet.inventory import Inventory
from rigctl.fleet.loader import detect_format, load_inventory
from rigctl.fleet.ssh import OpenSsh

INI = """\
# the GPU boxes
loose ansible_host=10.0.0.9

[h200]
gpu[01:03] ansible_user=ops
big-box:2222 ansible_host=10.0.0.5   # the port from the name

[h200:vars]
ansible_ssh_private_key_file=~/.ssh/fleet
ansible_become=true

[b200]
gpu03
bw-[a:b]

[gpu:children]
h200
b200

[gpu:vars]
ansible_user=gpuops
ansible_ssh_common_args='-o ProxyJump=bastion -o StrictHostKeyChecking=accept-new'

[spare]

[all:vars]
ansible_port=22
ansible_python_interpreter=/usr/bin/python3
ansible_host_key_checking=false
"""

YAML = """\
all:
  vars:
    ansible_port: 22
    ansible_python_interpreter: /usr/bin/python3
    ansible_host_key_checking: false
  hosts:
    loose: {ansible_host: 10.0.0.9}
  children:
    gpu:
      vars:
        ansible_user: gpuops
        ansible_ssh_common_args: -o ProxyJump=bastion -o StrictHostKeyChecking=accept-new
      children:
        h200:
          vars:
            ansible_ssh_private_key_file: ~/.ssh/fleet
            ansible_become: true
          hosts:
            gpu[01:03]: {ansible_user: ops}
            big-box:2222: {ansible_host: 10.0.0.5}
        b200:
          hosts:
            gpu03:
            bw-[a:b]:
    spare:
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(params=["ini", "yaml"])
def inventory(request: pytest.FixtureRequest, tmp_path: Path) -> Inventory:
    text = INI if request.param == "ini" else YAML
    return load_inventory(_write(tmp_path, f"inventory.{request.param}", text))


def test_both_forms_read_hosts_groups_and_vars_as_ansible_does(inventory: Inventory) -> None:
    assert inventory.format in ("ansible-ini", "ansible-yaml")
    assert [h.name for h in inventory.hosts] == ["loose", "gpu01", "gpu02", "gpu03", "big-box", "bw-a", "bw-b"]
    assert inventory.groups == {"gpu", "h200", "b200", "spare"}  # spare has no host and is still a group
    hosts = {h.name: h for h in inventory.hosts}
    # groups become tags, a child group's parents too; `all` and `ungrouped` are not tags
    assert hosts["loose"].tags == []
    assert hosts["gpu01"].tags == ["gpu", "h200"]
    assert hosts["gpu03"].tags == ["b200", "gpu", "h200"]
    assert hosts["bw-a"].tags == ["b200", "gpu"]
    # the host's own vars over its groups', a child group's over its parent's, `all` last
    assert (hosts["gpu01"].ssh, hosts["gpu01"].user, hosts["gpu01"].port) == ("gpu01", "ops", 22)
    assert (hosts["bw-b"].user, hosts["bw-b"].identity_file) == ("gpuops", None)
    assert (hosts["big-box"].ssh, hosts["big-box"].port, hosts["big-box"].user) == ("10.0.0.5", 2222, "gpuops")
    assert hosts["big-box"].identity_file == "~/.ssh/fleet"
    assert (hosts["loose"].ssh, hosts["loose"].user, hosts["loose"].port) == ("10.0.0.9", None, 22)
    # ssh keeps the first value of an option: Ansible puts host_key_checking before the common args
    assert hosts["gpu02"].ssh_options == {"StrictHostKeyChecking": "no", "ProxyJump": "bastion"}
    assert hosts["loose"].ssh_options == {"StrictHostKeyChecking": "no"}
    assert inventory.refused == {}
    # host_key_checking=false lets a changed host key through, and a jump through a host the inventory does not
    # list takes root's connection elsewhere: the operator's word, as for any option beyond a connection setting
    with pytest.raises(InvalidInputError) as caught:
        inventory.select(limit="gpu02")
    assert [p.split(": host ")[1] for p in caught.value.problems] == [
        "gpu02: ssh option StrictHostKeyChecking=no: not a value rigctl lets an inventory give it; "
        "refused without --allow-ssh-options",
        "gpu02: ssh option ProxyJump=bastion: jumps through bastion, not a host of this inventory; "
        "refused without --allow-ssh-options"]
    become = "ansible_become ignored: rigctl never escalates: commands run as the ssh user"
    assert inventory.warnings(inventory.select(limit="h200", allow_ssh_options=True)) == [
        f"{become} (hosts gpu01, gpu02, gpu03, big-box)"]
    assert inventory.warnings(inventory.select(limit="loose", allow_ssh_options=True)) == []  # interpreters are no connection matter


def test_the_format_is_told_by_the_content(tmp_path: Path) -> None:
    assert detect_format("[web]\nbox\n") == "ansible-ini"
    assert detect_format("# hosts\nbox01:2222 ansible_user=ops\n") == "ansible-ini"
    assert detect_format("fe80::1\n") == "ansible-ini"
    assert detect_format("; comment\nall:\n  hosts: {}\n") == "yaml"
    assert detect_format("---\nhosts:\n  - {name: a, ssh: b}\n") == "yaml"
    ours = load_inventory(_write(tmp_path, "hosts.yaml", "hosts:\n  - {name: a, ssh: b, tags: [gpu]}\n"))
    assert (ours.format, ours.groups) == ("rigctl", frozenset({"gpu"}))
    group_named_hosts = _write(tmp_path, "ansible.yaml", "hosts:\n  hosts:\n    a:\n")
    assert load_inventory(group_named_hosts).format == "ansible-yaml"
    assert load_inventory(group_named_hosts).hosts[0].tags == ["hosts"]


def test_ranges(tmp_path: Path) -> None:
    inv = load_inventory(_write(tmp_path, "r.ini", "n[:2]\nx[08:10:2]-[a:b]\n"))
    assert [h.name for h in inv.hosts] == ["n0", "n1", "n2", "x08-a", "x08-b", "x10-a", "x10-b"]
    for bad, problem in [("h[3:1]", "backwards"), ("h[01:3]", "same width"), ("h[1:2:0]", "step"),
                         ("h[1]", "begin:end"), ("h[a:9]", "two numbers or two letters"),
                         ("h[0:99999]", "more than 10000 hosts"), ("h[0:999][0:999]", "more than 10000 hosts")]:
        with pytest.raises(InvalidInputError, match=problem):
            load_inventory(_write(tmp_path, "bad.ini", f"[g]\n{bad}\n"))


@pytest.mark.parametrize(("text", "where", "problem"), [
    ("box ansible_host=-oProxyCommand=touch/tmp/pwned\n", ":1: host box: ansible_host", "ansible_host"),
    ("box ansible_host='-oProxyCommand=touch /tmp/pwned'\n", ":1: host box: ansible_host", "may not start"),
    ("[g]\nbox\n[g:vars]\nansible_user=-oProxyCommand=x\n", ":4: host box: ansible_user", "String should match"),
    ("box ansible_host=10.0.0.1:2222\n", ":1: host box: ansible_host", "ansible_port"),
    ("box ansible_host=[::1]:2222\n", ":1: host box: ansible_host", "carries a port"),
    ("box ansible_port=0\n", ":1: host box: ansible_port", "greater than or equal to 1"),
    ("box ansible_port=ssh\n", ":1: host box: ansible_port", "valid integer"),
    ("box rigctl_program=\"'a\\x1bb'\"\n", ":1: host box: rigctl_program", "String should match"),  # a Python literal
    ("box ansible_ssh_common_args='-o ProxyJump=-oProxyCommand=x'\n", ":1: host box: ansible_ssh_common_args",
     "jump host may not start with '-'"),
    ("box ansible_host=a\x1b[2Jb\n", ":1", "control character U+001B"),
    ("box\u2028evil=1\n", ":1", "control character U+2028"),
    ("-oProxyCommand=x\n", ":1", "not a host name"),
    ("[bad group]\nbox\n", ":1", "not a section header"),
    ("[g:weird]\nbox\n", ":1", "a section is [group]"),
    ("box ansible_user\n", ":1", "expected key=value"),
    ("box ansible_user='ops\n", ":1", "cannot read the host line"),
    ("[p:children]\nnope\n[p]\nbox\n", ":2", "child group 'nope' is never declared"),
    ("[nov:vars]\nx=1\n[g]\nbox\n", ":1", "[nov:vars] for a group"),
    ("[p:children]\nq\n[q:children]\np\n[q]\nbox\n", "", "groups p, q: a loop of children"),
    ("# nothing but a group\n[g]\n", "", "no hosts in this inventory"),
])
def test_hostile_or_broken_ini_is_refused_with_its_line(tmp_path: Path, text: str, where: str, problem: str) -> None:
    path = _write(tmp_path, "inventory.ini", text)
    with pytest.raises(InvalidInputError) as err:
        load_inventory(path)
    assert f"{path}{where}" in err.value.message
    assert problem in err.value.message


@pytest.mark.parametrize(("text", "where", "problem"), [
    ('all:\n  hosts:\n    box: {ansible_host: "-oProxyCommand=x"}\n', "all.hosts.box.ansible_host", "may not start"),
    ('all:\n  hosts:\n    box: {ansible_host: "box\\e[2J"}\n', "all.hosts.box.ansible_host", "String should match"),
    ('all:\n  hosts:\n    box:\n  vars: {ansible_ssh_private_key_file: "k\\nIdentityFile /etc/x"}\n',
     "all.vars.ansible_ssh_private_key_file", "String should match"),
    ("all:\n  hosts:\n    box: {ansible_user: 7}\n", "all.hosts.box.ansible_user", "valid string"),
    ("all:\n  hosts:\n    box: {ansible_port: true}\n", "all.hosts.box.ansible_port", "valid integer"),
    ("all:\n  hosts: [box]\n", "all.hosts", "hosts must be a mapping"),
    ("all:\n  hosts:\n    box:\n  colour: red\n", "all.colour", "unknown key"),
    ("plugin: amazon.aws.aws_ec2\n", "", "inventory plugin"),
    ("all:\n  children:\n    g:\n      children:\n        all:\n", "all.children.g.children.all", "cannot be a child"),
])
def test_hostile_or_broken_yaml_is_refused_with_its_path(tmp_path: Path, text: str, where: str, problem: str) -> None:
    path = _write(tmp_path, "inventory.yaml", text)
    with pytest.raises(InvalidInputError) as err:
        load_inventory(path)
    assert f"{path}: {where}" in err.value.message or (not where and str(path) in err.value.message)
    assert problem in err.value.message


def test_a_hostile_ansible_host_never_reaches_ssh(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = _write(tmp_path, "inventory.ini", f"box ansible_host='-oProxyCommand=touch {marker}'\n")
    result = CliRunner().invoke(app, ["fleet", "status", "--hosts", str(path), "--json", "--timeout", "5"])
    assert result.exit_code == ExitCode.INVALID_INPUT
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "invalid-input"
    assert f"{path}:1: host box: ansible_host: ssh destination may not start with '-'" in error["problems"]
    assert not marker.exists()


REFUSING = """\
[gpu]
box01 ansible_host=10.0.0.1
box02 ansible_host=10.0.0.2
[odd]
here ansible_connection=local
fishy ansible_shell_type=fish
jumpy ansible_ssh_common_args='-F /tmp/cfg'
tmpl ansible_host="{{ lookup('env', 'X') }}"
twice ansible_user=a ansible_ssh_user=b
wrapper ansible_ssh_executable=/usr/local/bin/tsh-ssh
"""


def test_hosts_ansible_reaches_otherwise_are_refused_when_chosen(tmp_path: Path) -> None:
    path = _write(tmp_path, "inventory.ini", REFUSING)
    inv = load_inventory(path)  # the file is fine: only those hosts cannot be reached as Ansible would
    assert [h.name for h in inv.select(limit="gpu")] == ["box01", "box02"]
    with pytest.raises(InvalidInputError) as err:
        inv.select()
    assert err.value.problems == [
        f"{path}: host here: ansible_connection=local: rigctl reaches hosts over ssh only",
        f"{path}: host fishy: ansible_shell_type=fish: rigctl quotes remote commands for a POSIX sh",
        f"{path}: host jumpy: ansible_ssh_common_args: -F reads another configuration file: rigctl does not pass it",
        f"{path}: host tmpl: ansible_host is templated (\"{{{{ lookup('env', 'X') }}}}\"); "
        "rigctl does not evaluate Jinja",
        f"{path}: host twice: ansible_user='a' and ansible_ssh_user='b' disagree; give one",
        f"{path}: host wrapper: ansible_ssh_executable=/usr/local/bin/tsh-ssh: rigctl runs plain ssh",
    ]
    assert err.value.fix is not None and "--limit '!here,!fishy,!jumpy,!tmpl,!twice,!wrapper'" in err.value.fix
    with pytest.raises(InvalidInputError, match="host here"):
        inv.get("here")  # `rigctl --host here` too
    assert [h.name for h in inv.select(limit="!odd")] == ["box01", "box02"]


def test_ssh_arguments_that_are_options_become_options(tmp_path: Path) -> None:
    text = ("box ansible_ssh_args='-C -o ControlPersist=60s' "
            "ansible_ssh_common_args='-oServerAliveInterval=7 -J jump1,jump2 -o \"ProxyCommand ssh -W %h:%p gw\"' "
            "ansible_ssh_extra_args='-o ServerAliveInterval=99'\n")
    inventory = load_inventory(_write(tmp_path, "inventory.ini", text))
    (box,) = inventory.hosts
    # ControlPersist is rigctl's own: dropped, with a note
    assert box.ssh_options == {"Compression": "yes", "ServerAliveInterval": "7",
                               "ProxyJump": "jump1,jump2", "ProxyCommand": "ssh -W %h:%p gw"}
    assert inventory.warnings([box]) == [
        "ansible_ssh_args: ControlPersist=60s ignored: rigctl sets ControlPersist itself (host box)"]
    with pytest.raises(InvalidInputError, match="ProxyCommand=ssh -W %h:%p gw: not a connection setting"):
        OpenSsh(tmp_path).argv(box, "true")  # an inventory is code: only with --allow-ssh-options
    argv = OpenSsh(tmp_path, allow_options=True).argv(box, "true")
    assert "ServerAliveInterval=7" in argv
    assert argv[-3:] == ["--", "box", "true"]


# --- --limit ---------------------------------------------------------------------------------------------

LIMIT_INI = """\
loose
[h200]
gpu[01:03]
[b200]
gpu03
bw1
[gpu:children]
h200
b200
[spare]
[cpu]
cpu1 ansible_host=10.0.0.7
"""
EVERY = {"loose", "gpu01", "gpu02", "gpu03", "bw1", "cpu1"}


@pytest.mark.parametrize(("pattern", "chosen"), [
    ("gpu", {"gpu01", "gpu02", "gpu03", "bw1"}),
    ("h200:b200", {"gpu01", "gpu02", "gpu03", "bw1"}),
    ("h200,cpu", {"gpu01", "gpu02", "gpu03", "cpu1"}),
    ("gpu:!b200", {"gpu01", "gpu02"}),
    ("gpu,!b200", {"gpu01", "gpu02"}),
    ("!b200,gpu", {"gpu01", "gpu02"}),  # exclusions apply after every plain name
    ("h200:&b200", {"gpu03"}),
    ("&b200", {"gpu03", "bw1"}),  # only & or ! parts start from all
    ("!gpu", {"loose", "cpu1"}),
    ("gpu0*", {"gpu01", "gpu02", "gpu03"}),
    ("gpu0?:!gpu02", {"gpu01", "gpu03"}),
    ("*", EVERY),
    ("all", EVERY),
    ("ungrouped", {"loose"}),
    ("cpu1", {"cpu1"}),
    (" h200 , cpu1 ", {"gpu01", "gpu02", "gpu03", "cpu1"}),
])
def test_limit_selects_like_ansible(tmp_path: Path, pattern: str, chosen: set[str]) -> None:
    inv = load_inventory(_write(tmp_path, "inventory.ini", LIMIT_INI))
    assert {h.name for h in inv.select(limit=pattern)} == chosen


@pytest.mark.parametrize(("pattern", "message"), [
    ("gpux", "no host or group matches 'gpux'; close: gpu"),
    ("h200:!b20", "no host or group matches 'b20'; close: b200"),
    ("nothing*", "no host or group matches 'nothing*'"),
    ("spare", "--limit 'spare' selects no host"),
    ("h200:&cpu", "--limit 'h200:&cpu' selects no host"),
    ("~gpu.*", "regular expressions are not supported"),
    ("gpu[0]", "subscripts and ranges are not supported"),
    ("gpu;rm", "not a host or group name"),
    (",", "names no host or group"),
    ("@/nonexistent/limit", "--limit @/nonexistent/limit: no such file"),
])
def test_limit_refuses_what_matches_nothing_or_is_not_understood(tmp_path: Path, pattern: str, message: str) -> None:
    inv = load_inventory(_write(tmp_path, "inventory.ini", LIMIT_INI))
    with pytest.raises(UsageError) as err:
        inv.select(limit=pattern)
    assert message in err.value.message


def test_limit_from_a_file_and_with_the_other_filters(tmp_path: Path) -> None:
    inv = load_inventory(_write(tmp_path, "inventory.ini", LIMIT_INI))
    names = _write(tmp_path, "retry", "# from the last run\ngpu01\n\ncpu1\n!gpu02\n")
    assert {h.name for h in inv.select(limit=f"@{names}")} == {"gpu01", "cpu1"}
    assert {h.name for h in inv.select(limit=f"@{names},bw1")} == {"gpu01", "cpu1", "bw1"}
    assert {h.name for h in inv.select(limit="gpu", tags=["b200"])} == {"gpu03", "bw1"}
    assert {h.name for h in inv.select(limit="gpu", names=["bw1", "gpu01"])} == {"gpu01", "bw1"}
    with pytest.raises(UsageError, match="selects no host with --tag h200 --only bw1"):
        inv.select(limit="gpu", tags=["h200"], names=["bw1"])


def test_limit_on_rigctl_hosts_file_uses_tags_as_groups(tmp_path: Path) -> None:
    path = _write(tmp_path, "hosts.yaml", "hosts:\n  - {name: a, ssh: a, tags: [gpu]}\n  - {name: b, ssh: b}\n")
    inv = load_inventory(path)
    assert [h.name for h in inv.select(limit="gpu")] == ["a"]
    assert [h.name for h in inv.select(limit="ungrouped")] == ["b"]
    result = CliRunner().invoke(app, ["fleet", "status", "--hosts", str(path), "--limit", "gpux", "--json"])
    assert result.exit_code == ExitCode.USAGE
    assert "close: gpu" in json.loads(result.stdout)["error"]["message"]


# --- on the loopback sshd hosts -----------------------------------------------------------------------------


@pytest.fixture
def ssh(private_control_dir: Callable[[], Path]) -> Iterator[OpenSsh]:
    transport = OpenSsh.default()
    yield transport
    transport.close_all()  # leave no shared connection behind


def _fleet_ini(fleet: Any, known_hosts: Path) -> str:
    box0, box1, box2 = fleet.hosts
    return (f"[gpu]\n{box0.name} ansible_port={box0.port}\n{box1.name}:{box1.port}\n"
            f"[cpu]\n{box2.name} ansible_port={box2.port}\n"
            f"[all:vars]\nansible_host=127.0.0.1\nansible_user=root\n"
            f"ansible_ssh_private_key_file={fleet.client_key}\nansible_host_key_checking=false\n"
            f"ansible_ssh_common_args='-o UserKnownHostsFile={known_hosts}'\n")


def _fleet_yaml(fleet: Any, known_hosts: Path) -> str:
    box0, box1, box2 = fleet.hosts
    return (f"all:\n  vars:\n    ansible_host: 127.0.0.1\n    ansible_user: root\n"
            f"    ansible_ssh_private_key_file: {fleet.client_key}\n    ansible_host_key_checking: false\n"
            f"    ansible_ssh_common_args: -o UserKnownHostsFile={known_hosts}\n"
            f"  children:\n    gpu:\n      hosts:\n        {box0.name}: {{ansible_port: {box0.port}}}\n"
            f"        {box1.name}:{box1.port}:\n"
            f"    cpu:\n      hosts:\n        {box2.name}: {{ansible_port: {box2.port}}}\n")


def _contacted(known_hosts: Path, fleet: Any) -> list[str]:
    """The hosts whose own host key ssh recorded: the ones it really connected to."""
    return [h.name for h in fleet.hosts
            if known_hosts.exists() and subprocess.run(
                ["ssh-keygen", "-F", f"[127.0.0.1]:{h.port}", "-f", str(known_hosts)],
                capture_output=True, timeout=10, check=False).returncode == 0]


@pytest.mark.integration
@pytest.mark.timeout(90)
@pytest.mark.parametrize(("form", "limit", "chosen"), [
    ("ini", "gpu", ["box00", "box01"]),
    ("yaml", "gpu", ["box00", "box01"]),
    ("ini", "all:!gpu", ["box02"]),
    ("yaml", "box0*:&gpu:!box00", ["box01"]),
])
def test_fleet_status_from_an_ansible_inventory_reaches_exactly_the_limit(
    ssh_fleet: Any, ssh: OpenSsh, tmp_path: Path, *, form: str, limit: str, chosen: list[str]
) -> None:
    known_hosts = tmp_path / "known_hosts"
    text = (_fleet_ini if form == "ini" else _fleet_yaml)(ssh_fleet, known_hosts)
    path = _write(tmp_path, f"inventory.{form}", text)
    # the inventory names its own known-hosts file: trusted as code, by the operator's word
    result = CliRunner().invoke(app, ["fleet", "status", "--hosts", str(path), "--limit", limit, "--json",
                                      "--timeout", "30", "--allow-ssh-options"])
    assert result.exit_code == 0, result.stdout
    data = json.loads(result.stdout)
    assert [h["name"] for h in data["hosts"]] == chosen
    ports = {h.name: h.port for h in ssh_fleet.hosts}
    for host in data["hosts"]:
        assert host["reachable"] is True and host["ok"] is True, host
        assert host["destination"] == f"root@127.0.0.1:{ports[host['name']]}"
    assert set(data) == {"rigctl", "command", "ok", "version", "hosts", "elapsed_s", "counts", "versions"}  # the JSON contract's keys
    # stdout holds the one JSON object; which file was read, and as what, goes to stderr
    assert result.stderr == (f"rigctl fleet status: inventory: {path} (Ansible {form.upper()} inventory; "
                             f"{len(chosen)} of 3 host(s), --limit {limit})\n")
    assert _contacted(known_hosts, ssh_fleet) == chosen


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_fleet_status_text_names_the_inventory_and_only_the_chosen_hosts(
    ssh_fleet: Any, ssh: OpenSsh, tmp_path: Path
) -> None:
    known_hosts = tmp_path / "known_hosts"
    path = _write(tmp_path, "inventory.ini", _fleet_ini(ssh_fleet, known_hosts) + "[gpu:vars]\nansible_become=yes\n")
    result = CliRunner().invoke(app, ["fleet", "status", "--hosts", str(path), "--limit", "gpu", "--timeout", "30",
                                      "--allow-ssh-commands"])  # its first name still works
    assert result.exit_code == 0, result.stdout
    lines = result.stdout.splitlines()
    assert lines[0] == f"inventory: {path} (Ansible INI inventory; 2 of 3 host(s), --limit gpu)"
    assert lines[1] == ("  warning: ansible_become ignored: rigctl never escalates: commands run as the ssh user "
                        "(hosts box00, box01)")
    assert lines[2].startswith("rigctl fleet status: 2 host(s), 2 ok")
    box0, box1, _ = ssh_fleet.hosts
    assert f"== box00 (root@127.0.0.1:{box0.port}) ok via ssh in " in result.stdout
    assert f"== box01 (root@127.0.0.1:{box1.port}) ok" in result.stdout
    assert "box02" not in result.stdout
    assert _contacted(known_hosts, ssh_fleet) == ["box00", "box01"]


def test_group_vars_beside_the_inventory_are_named_not_read(tmp_path: Path) -> None:
    path = _write(tmp_path, "hosts", "[gpu]\nbox\n")
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "gpu.yml").write_text("ansible_user: elsewhere\n")
    inv = load_inventory(path)
    assert inv.hosts[0].user is None
    assert inv.warnings(inv.select()) == [
        "group_vars/ beside the inventory not read: Ansible would take variables from there; "
        "`ansible-inventory -i FILE --list --yaml` writes them into one file"]
