"""Ansible's connection variables onto rigctl's ``Host`` fields, and what rigctl does not follow.

Mapped: ansible_host, ansible_user, ansible_port, ansible_ssh_private_key_file (with their other
Ansible names) onto the destination, user, port and key; ansible_ssh_args/_common_args/_extra_args onto
ssh options (``-o Key=Value`` and every flag as the option it sets, ``-J`` as ProxyJump, ``-L`` as
LocalForward...), in the order Ansible puts them on ssh's command line, for the allow-list of
``ssh_options`` to judge (rigctl's own, ControlPersist and the like, are dropped with a warning);
ansible_host_key_checking=false onto StrictHostKeyChecking=no; ``rigctl_program`` onto
the remote rigctl. A host Ansible would reach some other way is *refused* (the reasons in
``Link.refused``); a variable that changes only what Ansible does once connected is *ignored* with a
warning (``Link.ignored``).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rigctl.fleet.ssh_options import OWN, parse_ssh_args


@dataclass(frozen=True)
class Var:
    name: str
    value: Any
    where: str  # "FILE:LINE" or "FILE: all.children.gpu.vars.x"


# Host field: the Ansible variables that set it.
_FIELDS = {
    "ssh": ("ansible_host", "ansible_ssh_host"),
    "user": ("ansible_user", "ansible_ssh_user"),
    "port": ("ansible_port", "ansible_ssh_port"),
    "identity_file": ("ansible_ssh_private_key_file", "ansible_private_key_file"),
    "rigctl": ("rigctl_program",),
}
# In the order Ansible puts them on ssh's command line: ssh keeps the first value given for an option.
_ARGS = ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args")
_KEY_CHECKING = ("ansible_host_key_checking", "ansible_ssh_host_key_checking")
_SSH = {"ssh", "smart", "paramiko", "paramiko_ssh", "ansible.builtin.ssh", "ansible.legacy.ssh",
        "ansible.builtin.paramiko_ssh"}
_FOLLOWED = {*itertools.chain(*_FIELDS.values()), *_ARGS, *_KEY_CHECKING, "ansible_connection",
             "ansible_shell_type", "ansible_ssh_executable", "ansible_group_priority"}
_FALSE = {"no", "false", "off", "0", "n", "f"}
_TRUE = {"yes", "true", "on", "1", "y", "t"}


@dataclass
class Link:
    """How to reach one host: ``Host`` fields and the variables they came from, or why not."""

    fields: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, Var] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)


def _why_ignored(name: str) -> str | None:
    if name in _FOLLOWED or not name.startswith("ansible_") or name.endswith("_interpreter"):
        return None
    if name.startswith("ansible_become"):
        return "rigctl never escalates: commands run as the ssh user"
    if name in ("ansible_password", "ansible_ssh_pass", "ansible_ssh_password"):
        return "rigctl logs in with keys only (ssh in batch mode)"
    return "rigctl connects with plain ssh and does not follow it"


def connection(merged: Mapping[str, Var]) -> Link:
    link = Link()
    given = {k: v for k, v in merged.items() if v.value is not None}
    for var in given.values():
        if (why := _why_ignored(var.name)) is not None:
            link.ignored.append(f"{var.name} ignored: {why}")
        elif isinstance(var.value, str) and ("{{" in var.value or "{%" in var.value) and var.name in _FOLLOWED:
            link.refused.append(f"{var.name} is templated ({var.value!r}); rigctl does not evaluate Jinja")
    _transport(given, link)
    for key, names in _FIELDS.items():
        found = [given[n] for n in names if n in given]
        if len({repr(v.value) for v in found}) > 1:
            a, b = found[0], found[1]
            link.refused.append(f"{a.name}={a.value!r} and {b.name}={b.value!r} disagree; give one")
        elif found:
            link.fields[key] = _port(found[0].value) if key == "port" else found[0].value
            link.origins[key] = found[0]
    _ssh_options(given, link)
    return link


def _port(value: Any) -> Any:
    """A port as Ansible gives it (22 or "22"); anything else goes on to fail Host's check."""
    if isinstance(value, str) and re.fullmatch(r"[0-9]{1,5}", value):
        return int(value)
    return str(value) if isinstance(value, bool) else value


def _transport(given: Mapping[str, Var], link: Link) -> None:
    """Refusals for hosts Ansible would reach otherwise than by running ssh and a POSIX shell."""
    if (var := given.get("ansible_connection")) and str(var.value) not in _SSH:
        link.refused.append(f"ansible_connection={var.value}: rigctl reaches hosts over ssh only")
    if (var := given.get("ansible_shell_type")) and str(var.value) not in ("sh", "ansible.builtin.sh"):
        link.refused.append(f"ansible_shell_type={var.value}: rigctl quotes remote commands for a POSIX sh")
    if (var := given.get("ansible_ssh_executable")) and str(var.value).rpartition("/")[2] != "ssh":
        link.refused.append(f"ansible_ssh_executable={var.value}: rigctl runs plain ssh")


def _ssh_options(given: Mapping[str, Var], link: Link) -> None:
    options: dict[str, str] = {}
    origin: Var | None = None
    for name in (_ARGS[0], *_KEY_CHECKING, *_ARGS[1:]):
        var = given.get(name)
        if var is None:
            continue
        if name in _KEY_CHECKING:
            text = str(var.value).lower()
            if text not in _TRUE | _FALSE:
                link.refused.append(f"{name}={var.value!r} is not true or false")
            elif text in _FALSE:  # refused without the operator's opt-in (ssh_options)
                options.setdefault("StrictHostKeyChecking", "no")
            continue
        parsed, problem = ssh_args(var.value)
        if problem:
            link.refused.append(f"{name}: {problem}")
        for key, value in parsed:
            if key.lower() in OWN:  # Ansible's usual -o ControlMaster=auto -o ControlPersist=60s
                link.ignored.append(f"{name}: {key}={value} ignored: rigctl sets {OWN[key.lower()]} itself")
            elif key.lower() not in {k.lower() for k in options}:  # ssh keeps the first, in any case
                options[key] = value
        origin = origin or var
    if options:
        link.fields["ssh_options"] = options
        if origin is not None:
            link.origins["ssh_options"] = origin


def ssh_args(value: Any) -> tuple[list[tuple[str, str]], str | None]:
    """Ansible's ssh arguments as ssh options (``ssh_options.parse_ssh_args``: every flag as the option it
    sets, for the allow-list to judge); a word rigctl cannot pass is a problem."""
    if not isinstance(value, str):
        return [], f"expected ssh arguments as text, not {value!r}"
    try:
        words = shlex.split(value)
    except ValueError as exc:
        return [], f"cannot split {value!r}: {exc}"
    return parse_ssh_args(words)
