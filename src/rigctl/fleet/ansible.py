"""Ansible inventories, INI and YAML, as rigctl fleets: the hosts, their groups as tags, and the
connection variables mapped onto ``Host`` so that they pass the same checks as rigctl's own file.

Read as Ansible reads them:
- INI: ``[group]`` sections of host lines (``name[:port] key=value ...``, shell-quoted, ``#`` comments),
  ``[group:vars]`` (one ``key=value`` a line), ``[group:children]``; lines before any section are
  ungrouped hosts. A value is a Python literal where it parses as one (``ansible_port=22`` is a
  number, ``'x'`` a string), else the text itself.
- YAML: top-level groups (usually ``all``), each a mapping of ``hosts`` (name: variables), ``vars``
  and ``children`` (groups again).
- ``name:port`` and ranges: ``gpu[01:03]``, ``node-[a:c]``, ``x[0:10:2]``.
- A host is in the groups that list it and in their parents; every group is under ``all``, and a host
  in no other group is in ``ungrouped``. Variables: by group depth (``all`` first, a child's over its
  parent's), then ``ansible_group_priority``, then name; the host's own last.

The connection variables become ``Host`` fields in ``ansible_vars``. What rigctl cannot follow is
never dropped silently: a host Ansible would reach some other way is *refused* (choosing it is an
error, ``--limit '!name'`` leaves it out); a variable that changes only what Ansible does once
connected is *ignored with a warning*. A file Ansible would reject, or a value that fails rigctl's
checks, refuses the whole file.
"""

from __future__ import annotations

import ast
import itertools
import re
import shlex
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from rigctl.errors import InvalidInputError
from rigctl.fleet.ansible_vars import Var, connection
from rigctl.fleet.inventory import CONTROLS, HOST_NAME, TAG, Host, Inventory
from rigctl.fleet.limit import SPECIAL_GROUPS
from rigctl.recipe.problems import plain_message

MAX_HOSTS = 10_000
MAX_GROUPS = 1_000


@dataclass
class Group:
    name: str
    hosts: dict[str, None] = field(default_factory=dict)  # an ordered set, file order
    children: dict[str, None] = field(default_factory=dict)
    vars: dict[str, Var] = field(default_factory=dict)


def _bad(where: str, problem: str, fix: str | None = None) -> InvalidInputError:
    return InvalidInputError([f"{where}: {problem}"], fix=fix)


class Tree:
    """Groups, hosts and variables as the file states them, before Ansible's rules apply."""

    def __init__(self, source: str, kind: str) -> None:
        self.source = source
        self.kind = kind
        self.groups: dict[str, Group] = {name: Group(name) for name in SPECIAL_GROUPS}
        self.host_vars: dict[str, dict[str, Var]] = {}  # file order
        self.host_where: dict[str, str] = {}

    def group(self, name: str, where: str) -> Group:
        if name not in self.groups:
            if not re.match(TAG, name):
                raise _bad(where, f"{name!r} is not a group name rigctl takes (letters, digits, '.', '_', '-'; "
                                  "at most 63)")
            if len(self.groups) >= MAX_GROUPS + len(SPECIAL_GROUPS):
                raise _bad(where, f"more than {MAX_GROUPS} groups")
            self.groups[name] = Group(name)
        return self.groups[name]

    def add_hosts(self, pattern: str, group: str, where: str, variables: Mapping[str, Var]) -> None:
        names, port = host_pattern(pattern, where)
        members = self.group(group, where).hosts
        for name in names:
            if name not in self.host_vars:
                if len(self.host_vars) >= MAX_HOSTS:
                    raise _bad(where, f"more than {MAX_HOSTS} hosts")
                self.host_vars[name] = {}
                self.host_where[name] = where
            members[name] = None
            if port is not None:
                self.host_vars[name]["ansible_port"] = Var("ansible_port", port, where)
            self.host_vars[name].update(variables)

    def add_child(self, parent: str, child: str, where: str) -> None:
        if child == "all":
            raise _bad(where, "'all' holds every group; it cannot be a child")
        self.group(child, where)
        self.group(parent, where).children[child] = None


# --- host names, ports and ranges -----------------------------------------------------------------------

_RANGE = re.compile(r"\[([^\[\]]*)\]")


def host_pattern(pattern: str, where: str) -> tuple[list[str], int | None]:
    """The hosts ``name[:port]`` names (ranges expanded) and its port."""
    head, port = pattern, None
    colons = _RANGE.sub("", pattern).count(":")  # the colons of a range do not count
    if colons > 1:
        raise _bad(where, f"{pattern!r}: an IPv6 address cannot be a host name here",
                   fix="name the host and give the address as ansible_host")
    if colons == 1:
        head, _, tail = pattern.rpartition(":")
        if not re.fullmatch(r"[0-9]{1,5}", tail) or not 1 <= int(tail) <= 65535:
            raise _bad(where, f"{pattern!r}: the part after ':' must be a port (1-65535)")
        port = int(tail)
    names = expand_ranges(head, where)
    for name in names:
        if not re.match(HOST_NAME, name):
            raise _bad(where, f"{name!r} is not a host name rigctl takes (letters, digits, '.', '_', '-'; "
                              "at most 63)", fix="name the host plainly and give its address as ansible_host")
    return names, port


def expand_ranges(name: str, where: str) -> list[str]:
    """``gpu[01:03]-[a:b]`` -> gpu01-a, gpu01-b, ..., gpu03-b."""
    pieces: list[Sequence[str]] = []
    pos, count = 0, 1
    for match in _RANGE.finditer(name):
        values = _range(match.group(1), name, where)
        count *= len(values)
        if count > MAX_HOSTS:
            raise _bad(where, f"{name!r} names more than {MAX_HOSTS} hosts")
        pieces += [(name[pos:match.start()],), values]
        pos = match.end()
    pieces.append((name[pos:],))
    return ["".join(parts) for parts in itertools.product(*pieces)]


def _range(spec: str, name: str, where: str) -> Sequence[str]:
    bounds = spec.split(":")
    if len(bounds) not in (2, 3) or not bounds[1]:
        raise _bad(where, f"{name!r}: a range is [begin:end] or [begin:end:step]")
    begin, end = bounds[0] or "0", bounds[1]
    step = bounds[2] if len(bounds) == 3 else "1"
    if not re.fullmatch(r"[0-9]{1,6}", step) or int(step) < 1:
        raise _bad(where, f"{name!r}: a range's step is a positive number")
    letters = string.ascii_letters
    if len(begin) == len(end) == 1 and begin in letters and end in letters:
        first, last = letters.index(begin), letters.index(end)
        if first > last:
            raise _bad(where, f"{name!r}: a range must not run backwards")
        return list(letters[first:last + 1:int(step)])
    if not (re.fullmatch(r"[0-9]{1,9}", begin) and re.fullmatch(r"[0-9]{1,9}", end)):
        raise _bad(where, f"{name!r}: a range runs between two numbers or two letters")
    width = len(begin) if begin.startswith("0") and len(begin) > 1 else 0
    if width and len(end) != width:
        raise _bad(where, f"{name!r}: a zero-padded range needs begin and end of the same width")
    if int(begin) > int(end):
        raise _bad(where, f"{name!r}: a range must not run backwards")
    values = range(int(begin), int(end) + 1, int(step))
    if len(values) > MAX_HOSTS:
        raise _bad(where, f"{name!r} names more than {MAX_HOSTS} hosts")
    return [str(v).zfill(width) for v in values]


# --- INI ------------------------------------------------------------------------------------------------

_SECTION = re.compile(r"^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$")
_GROUP_LINE = re.compile(r"^([^:\]\s]+)\s*(?:#.*)?$")
_CONTROL = re.compile(rf"(?!\t)[{CONTROLS}]")  # the hosts file's controls, but a tab separates INI words


def ini_value(text: str) -> Any:
    """An INI value as Ansible reads it: a Python literal when the text is one (22, True, 'quoted'),
    else the text itself."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    if value is Ellipsis or isinstance(value, complex):
        return text
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value


def _host_line(line: str, where: str) -> tuple[str, dict[str, Var]]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError as exc:
        raise _bad(where, f"cannot read the host line: {exc}") from None
    if not words:
        raise _bad(where, "a host line without a host")
    variables = {}
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq or not key:
            raise _bad(where, f"expected key=value after the host, got {word!r}")
        variables[key] = Var(key, ini_value(value), where)
    return words[0], variables


def _ini_tree(text: str, source: str) -> Tree:
    tree = Tree(source, "ansible-ini")
    group, state = "ungrouped", "hosts"
    declared = set(SPECIAL_GROUPS)
    vars_sections: dict[str, str] = {}
    child_refs: dict[str, str] = {}
    for number, raw in enumerate(text.split("\n"), 1):
        where = f"{source}:{number}"
        line = raw.removesuffix("\r")
        if bad := _CONTROL.search(line):
            raise _bad(where, f"control character U+{ord(bad.group()):04X}")
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if section := _SECTION.match(line):
            group, state = section.group(1), section.group(2) or "hosts"
            if state not in ("hosts", "children", "vars"):
                raise _bad(where, f"[{group}:{state}]: a section is [group], [group:vars] or [group:children]")
            tree.group(group, where)
            if state == "vars":
                vars_sections.setdefault(group, where)
            else:
                declared.add(group)
        elif line.startswith("[") and line.endswith("]"):
            raise _bad(where, f"{line!r} is not a section header: [group], [group:vars] or [group:children]")
        elif state == "hosts":
            pattern, variables = _host_line(line, where)
            tree.add_hosts(pattern, group, where, variables)
        elif state == "vars":
            key, eq, value = line.partition("=")
            if not eq or not key.strip():
                raise _bad(where, f"expected key=value in [{group}:vars], got {line!r}")
            tree.group(group, where).vars[key.strip()] = Var(key.strip(), ini_value(value.strip()), where)
        else:
            child = _GROUP_LINE.match(line)
            if not child:
                raise _bad(where, f"expected a group name in [{group}:children], got {line!r}")
            tree.add_child(group, child.group(1), where)
            child_refs.setdefault(child.group(1), where)
    for name, where in vars_sections.items():
        if name not in declared:
            raise _bad(where, f"[{name}:vars] for a group no [{name}] or [{name}:children] section declares")
    for name, where in child_refs.items():
        if name not in declared:
            raise _bad(where, f"child group {name!r} is never declared (no [{name}] or [{name}:children] section)")
    return tree


def from_ini(text: str, source: str) -> Inventory:
    return build(_ini_tree(text, source))


# --- YAML -----------------------------------------------------------------------------------------------


def _mapping(value: Any, where: str, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _bad(where, f"{what} must be a mapping, not a {type(value).__name__}")
    for key in value:
        if not isinstance(key, str):
            raise _bad(where, f"{key!r}: a name must be a string")
    return value


def _yaml_vars(value: Any, tree: Tree, path: str) -> dict[str, Var]:
    found = _mapping(value, f"{tree.source}: {path}", "variables")
    return {k: Var(k, v, f"{tree.source}: {path}.{k}") for k, v in found.items()}


def _yaml_group(tree: Tree, name: str, body: Any, path: str) -> None:
    where = f"{tree.source}: {path}"
    group = tree.group(name, where)
    for key, value in _mapping(body, where, f"group {name!r}").items():
        at = f"{path}.{key}"
        if key == "hosts":
            for pattern, variables in _mapping(value, f"{tree.source}: {at}", "hosts").items():
                tree.add_hosts(pattern, name, f"{tree.source}: {at}.{pattern}",
                               _yaml_vars(variables, tree, f"{at}.{pattern}"))
        elif key == "vars":
            group.vars.update(_yaml_vars(value, tree, at))
        elif key == "children":
            for child, child_body in _mapping(value, f"{tree.source}: {at}", "children").items():
                _yaml_group(tree, child, child_body, f"{at}.{child}")
                tree.add_child(name, child, f"{tree.source}: {at}.{child}")
        else:
            raise _bad(f"{tree.source}: {at}", "unknown key (a group has hosts, vars and children)")


def from_yaml(data: Mapping[str, Any], source: str) -> Inventory:
    if "plugin" in data:
        raise _bad(source, f"the configuration of an inventory plugin ({data['plugin']!r}), not an inventory",
                   fix="write the inventory out with `ansible-inventory -i SOURCE --list --yaml > FILE` "
                       "and pass that file")
    tree = Tree(source, "ansible-yaml")
    for name, body in _mapping(dict(data), source, "the top level").items():
        _yaml_group(tree, name, body, name)
    return build(tree)


# --- Ansible's rules: membership, variable precedence, connection variables ----------------------------


def _depths(tree: Tree, parents: Mapping[str, list[str]]) -> tuple[dict[str, int], list[str]]:
    """Each group's depth below ``all`` (its longest path) and the groups parents first; a loop of
    children is an error, as in Ansible."""
    waiting = {name: len(parents[name]) for name in tree.groups}
    ready = [name for name, n in waiting.items() if n == 0]
    depth = dict.fromkeys(tree.groups, 0)
    order: list[str] = []
    while ready:
        name = ready.pop()
        order.append(name)
        for child in tree.groups[name].children:
            depth[child] = max(depth[child], depth[name] + 1)
            waiting[child] -= 1
            if waiting[child] == 0:
                ready.append(child)
    if len(order) < len(tree.groups):
        loop = sorted(set(tree.groups) - set(order))
        raise _bad(tree.source, f"groups {', '.join(loop)}: a loop of children (a group among its own parents)")
    return depth, order


def _priority(group: Group) -> int:
    var = group.vars.get("ansible_group_priority")
    if var is None:
        return 1
    if isinstance(var.value, bool) or not re.fullmatch(r"-?[0-9]{1,9}", str(var.value)):
        raise _bad(var.where, f"ansible_group_priority must be a number, not {var.value!r}")
    return int(var.value)


def memberships(tree: Tree) -> dict[str, list[str]]:
    """Each host's groups, in the order their variables apply (Ansible's: by depth below ``all``, then
    ``ansible_group_priority``, then name): the groups that list it, their parents, ``all``, and
    ``ungrouped`` for a host in no other group. Every group without a parent goes under ``all``."""
    groups = tree.groups
    parents: dict[str, list[str]] = {name: [] for name in groups}
    for group in groups.values():
        for child in group.children:
            parents[child].append(group.name)
    for name in groups:
        if name != "all" and not parents[name]:
            groups["all"].children[name] = None
            parents[name].append("all")
    depth, order = _depths(tree, parents)
    above: dict[str, set[str]] = {}
    for name in order:  # parents first
        above[name] = {p for parent in parents[name] for p in (parent, *above[parent])}
    priority = {name: _priority(group) for name, group in groups.items()}
    member: dict[str, set[str]] = {name: {"all"} for name in tree.host_vars}
    for group in groups.values():
        for name in group.hosts:
            member[name] |= {group.name, *above[group.name]}
    for names in member.values():
        if names <= set(SPECIAL_GROUPS):
            names.add("ungrouped")
        else:
            names.discard("ungrouped")
    return {host: sorted(names, key=lambda g: (depth[g], priority[g], g)) for host, names in member.items()}


def build(tree: Tree) -> Inventory:
    if not tree.host_vars:
        raise _bad(tree.source, "no hosts in this inventory")
    hosts: list[Host] = []
    refused: dict[str, tuple[str, ...]] = {}
    ignored: dict[str, tuple[str, ...]] = {}
    problems: list[str] = []
    for name, groups in memberships(tree).items():
        merged: dict[str, Var] = {}
        for group in groups:
            merged.update((k, v) for k, v in tree.groups[group].vars.items() if k != "ansible_group_priority")
        merged.update(tree.host_vars[name])
        link = connection(merged)
        tags = sorted(set(groups) - set(SPECIAL_GROUPS))
        if link.ignored:
            ignored[name] = tuple(link.ignored)
        if link.refused:
            refused[name] = tuple(link.refused)
            hosts.append(Host(name=name, ssh=name, tags=tags))  # kept for --limit; never handed out
            continue
        try:
            # without ansible_host, Ansible connects to the inventory name
            hosts.append(Host.model_validate({"name": name, "ssh": name, "tags": tags, **link.fields}))
        except ValidationError as exc:
            problems += _host_problems(exc, name, tree.host_where[name], link.origins)
    if problems:
        raise InvalidInputError(problems)
    return Inventory(tree.source, tree.kind, tuple(hosts), frozenset(tree.groups) - set(SPECIAL_GROUPS), refused,
                     ignored, notes=_beside(tree.source))


def _beside(source: str) -> tuple[str, ...]:
    """Ansible also reads group_vars/ and host_vars/ next to the inventory; rigctl reads one file only."""
    found = [d for d in ("group_vars", "host_vars") if (Path(source).parent / d).is_dir()]
    if not found:
        return ()
    return (f"{' and '.join(d + '/' for d in found)} beside the inventory not read: Ansible would take "
            "variables from there; `ansible-inventory -i FILE --list --yaml` writes them into one file",)


def _host_problems(exc: ValidationError, name: str, where: str, origins: Mapping[str, Var]) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        key = str(err["loc"][0]) if err["loc"] else ""
        var = origins.get(key)
        message = plain_message(err)
        label = var.name if var else {"tags": "group name"}.get(key, key)
        lines.append(f"{var.where if var else where}: host {name}: {label}: {message}")
    return lines
