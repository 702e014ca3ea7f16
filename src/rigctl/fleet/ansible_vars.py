"""Ansible's connection variables onto rigctl's ``Host`` fields, and what rigctl does not follow.

Mapped: ansible_host, ansible_user, ansible_port, ansible_ssh_private_key_file (with their other
Ansible names) onto the destination, user, port and key; ``-o Key=Value``, ``-J`` and ``-C`` in
ansible_ssh_args/_common_args/_extra_args onto ssh options, in the order Ansible puts them on ssh's
command line; ansible_host_key_checking=false onto StrictHostKeyChecking=no; ``rigctl_program`` onto
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
            elif text in _FALSE:
                options.setdefault("StrictHostKeyChecking", "no")
            continue
        parsed, problem = ssh_args(var.value)
        if problem:
            link.refused.append(f"{name}: {problem}")
        for key, value in parsed:
            options.setdefault(key, value)
        origin = origin or var
    if options:
        link.fields["ssh_options"] = options
        if origin is not None:
            link.origins["ssh_options"] = origin


_OPTION = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*(?:=\s*|\s+)(.*?)\s*$", re.S)


def ssh_args(value: Any) -> tuple[list[tuple[str, str]], str | None]:
    """``-o Key=Value``, ``-J jump`` and ``-C`` as ssh options; anything else is a problem: rigctl
    builds its own ssh command line and will not pass words it does not understand."""
    if not isinstance(value, str):
        return [], f"expected ssh arguments as text, not {value!r}"
    try:
        words = shlex.split(value)
    except ValueError as exc:
        return [], f"cannot split {value!r}: {exc}"
    options: list[tuple[str, str]] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-C":
            options.append(("Compression", "yes"))
            i += 1
            continue
        if word in ("-o", "-J"):
            if i + 1 == len(words):
                return [], f"{word} without its value"
            flag, arg, i = word, words[i + 1], i + 2
        elif word[:2] in ("-o", "-J") and len(word) > 2:
            flag, arg, i = word[:2], word[2:], i + 1
        else:
            return [], f"{word!r}: rigctl follows only -o Key=Value, -J and -C here"
        if flag == "-J":
            options.append(("ProxyJump", arg))
            continue
        match = _OPTION.match(arg)
        if not match:
            return [], f"-o {arg!r} is not Key=Value"
        options.append((match.group(1), match.group(2)))
    return options, None
