"""``fleet ... --limit PATTERN``: choose hosts the way Ansible's ``--limit`` does.

A pattern is host or group names joined by ``,`` (or, with no comma in it, by ``:``). A name adds its
hosts; ``!name`` removes them and ``&name`` keeps only hosts also in it, applied after every plain
name whatever the order written (a pattern of only ``!``/``&`` parts starts from ``all``). ``@FILE``
reads more parts from a file, one a line. ``*`` and ``?`` glob. ``all`` is every host, ``ungrouped``
every host in no group. A name is a group if a group is called so, else a host; a glob or a name with
a dot is matched against both.

Ansible ignores a part that matches nothing (with a warning); here it is a usage error naming the
close matches, since a mistyped group would otherwise run on fewer boxes than meant. Ansible's
``~regex`` and ``[subscript]`` are refused rather than read differently.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Mapping, Sequence
from fnmatch import fnmatchcase

from rigctl.errors import InvalidInputError, UsageError
from rigctl.util.safefs import MiB, read_text, reason_of

LIMIT_FILE_LIMIT = 1 * MiB
_NAME = re.compile(r"^[A-Za-z0-9_.*?-]+$")
SPECIAL_GROUPS = ("all", "ungrouped")  # every inventory has them; Ansible makes them, not the file


def split_pattern(pattern: str) -> list[str]:
    parts = pattern.split(",") if "," in pattern else pattern.split(":")
    return [p.strip() for p in parts if p.strip()]


def _read_parts(path: str) -> list[tuple[str, str]]:
    """The parts an ``@FILE`` holds, each with where it is (``@FILE line N``): one a line; blank lines
    and ``#`` comments are skipped. An error about a part names its line, never quotes it: the file may
    be any file the operator can read (``@/etc/shadow``), and its content is not ours to print."""
    try:
        text = read_text(path, limit=LIMIT_FILE_LIMIT)
    except InvalidInputError as exc:
        raise UsageError(f"--limit @{path}: {reason_of(exc)}") from None
    parts = [(line.strip(), f"@{path} line {n}") for n, line in enumerate(text.split("\n"), start=1)]
    return [(p, where) for p, where in parts if p and not p.startswith("#")]


def _ordered(parts: Sequence[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    plain = [p for p in parts if p[0][0] not in "!&"]
    return (plain or [("all", None)]) + [p for p in parts if p[0][0] == "&"] + [p for p in parts if p[0][0] == "!"]


def _check(part: str, body: str, label: str) -> None:
    if body.startswith("~"):
        raise UsageError(f"--limit {label}: regular expressions are not supported", fix="use names and * globs")
    if "[" in body or "]" in body:
        raise UsageError(f"--limit {label}: subscripts and ranges are not supported",
                         fix="name the hosts, or use a * glob")
    if not _NAME.match(body):
        raise UsageError(f"--limit {label}: not a host or group name")


def _unknown(label: str, body: str, hosts: Sequence[str], groups: Collection[str], *,
             from_file: bool) -> UsageError:
    names = [*groups, *hosts]
    close = difflib.get_close_matches(body, names, n=5, cutoff=0.6)
    hint = f"; close: {', '.join(close)}" if close else ""
    shown = ", ".join(sorted(groups)[:20]) or "none"
    what = "" if from_file else f" {body!r}"  # a line of a file is named, not quoted (nor hinted at)
    return UsageError(f"--limit {label}: no host or group matches{what}{'' if from_file else hint}",
                      fix=f"groups: {shown}; hosts: {', '.join(hosts[:20])}{' ...' if len(hosts) > 20 else ''}")


def _matches(body: str, *, plain: bool, members: Mapping[str, Sequence[str]],
             groups: Collection[str]) -> set[str] | None:
    """The hosts ``body`` names; None when it names nothing at all (a group without hosts is something)."""
    hosts = list(members)
    if plain and body in members:  # like Ansible: a plain part that is a host's name is that host
        return {body}
    matched_groups = [g for g in [*SPECIAL_GROUPS, *groups] if fnmatchcase(g, body)]
    chosen: set[str] = set()
    for group in matched_groups:
        if group == "all":
            chosen.update(hosts)
        elif group == "ungrouped":
            chosen.update(h for h in hosts if not members[h])
        else:
            chosen.update(h for h in hosts if group in members[h])
    if not matched_groups or any(c in body for c in "*?."):
        chosen.update(h for h in hosts if fnmatchcase(h, body))
    if not chosen and not matched_groups:
        return None
    return chosen


def choose(pattern: str, members: Mapping[str, Sequence[str]], groups: Collection[str]) -> set[str]:
    """The names of the hosts ``pattern`` selects. ``members``: each host's groups (its tags), in
    inventory order; ``groups``: every group name, groups without hosts too."""
    parts: list[tuple[str, str | None]] = []  # (part, where a file holds it; None: typed on the command line)
    for part in split_pattern(pattern):
        parts += _read_parts(part[1:]) if part.startswith("@") else [(part, None)]
    if not parts:
        raise UsageError(f"--limit {pattern!r}: names no host or group")
    known_groups = set(groups) - set(SPECIAL_GROUPS)
    chosen: set[str] = set()
    for part, where in _ordered(parts):
        body = part[1:] if part[0] in "!&" else part
        label = where or repr(part)
        _check(part, body, label)
        found = _matches(body, plain=part[0] not in "!&", members=members, groups=known_groups)
        if found is None:
            raise _unknown(label, body, list(members), known_groups, from_file=where is not None)
        if part[0] == "!":
            chosen -= found
        elif part[0] == "&":
            chosen &= found
        else:
            chosen |= found
    return chosen
