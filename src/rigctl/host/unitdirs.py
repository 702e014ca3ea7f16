"""Where quadlet and systemd read unit files, and each unit as they see it: the one loader ``rigctl status``
(which services are rigctl's, and their keys) and ``rigctl doctor`` (what it audits, here or over ssh)
share, so the two never disagree about a unit or its drop-ins.

A snapshot is a mapping {absolute path: text}: read from this host (``unitsnapshot``) or shipped back
from another one over ssh. ``collect`` turns a snapshot and the roots it was taken from into Units
the way quadlet 5.x and systemd see them (each checked against the real generator in tests/host):

- the first root that holds a name wins; a root below another (/etc/containers/systemd/users below
  /etc/containers/systemd) is its own scope's, and quadlet reads every subdirectory of its roots but
  drop-in directories (``*.d``), systemd none;
- drop-ins come from every root of the unit's own realm and the shared ones. Quadlet's (``container.d``,
  ``NAME.container.d``) are looked up root by root, the unit's own directory before the type's, and
  systemd's (``service.d``, ``SERVICE.service.d`` for the service quadlet generates) name by name; the
  first file of a name wins and all apply in the order of their file names, whatever directory holds
  them; systemd's apply after quadlet's, to the generated service.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath
from typing import Literal

from rigctl.host.unit import SearchScope, SourceFile, Unit, generated_service
from rigctl.host.unitfile import dropin_dirs
from rigctl.invocation import default_below
from rigctl.places import SYSTEM_SYSTEMD_DIR, SYSTEM_UNIT_DIR, USER_SYSTEMD_SUBDIR, USER_UNIT_SUBDIR

RootKind = Literal["quadlet", "systemd", "path"]

# A .service is only worth shipping/parsing when it mentions a container tool or a known engine.
SERVICE_HINT = re.compile(
    r"podman|docker|vllm|sglang|tabby|llama|ollama|text-generation|lmdeploy|trtllm|aphrodite|kobold|mistralrs",
    re.IGNORECASE,
)


USERS_DIR = "/etc/containers/systemd/users"  # every user's units; USERS_DIR/UID one user's


def numbered(name: str) -> bool:
    """Whether quadlet 5.4 takes a directory ``name`` below USERS_DIR for one user's (only ASCII digits:
    not +12, -1 or 0x1), which it reads for no other user."""
    return name.isascii() and name.isdigit()


def uid_of(name: str) -> int | None:
    """The uid whose directory ``name`` is (USERS_DIR/UID, as quadlet spells it: 007 is no one's)."""
    if not numbered(name) or len(name) > 10:  # uids are 32-bit: no int() of a hostile 5,000-digit name
        return None
    return int(name) if str(int(name)) == name else None


def uid_dirs(paths: Iterable[str], base: str = USERS_DIR) -> list[int]:
    """The uids whose ``base``/UID directory holds one of ``paths`` (a snapshot's files)."""
    firsts = {rest[0] for rest in (p[len(base) + 1:].split("/", 1) for p in paths if _under(p, base))
              if len(rest) == 2}
    return sorted(uid for uid in map(uid_of, firsts) if uid is not None)


@dataclass(frozen=True)
class Root:
    """A directory quadlet or systemd reads units from.

    ``realm`` says whose units these are: "" for directories every user of the scope shares (the
    system directories, /etc/containers/systemd/users), else the home (or ``--path``) they belong to;
    drop-ins apply only within one realm and the shared one, as quadlet never merges across users.
    ``anchor`` is the directory trusted as given; the rest of ``path`` below it is walked without
    following links (another user's home, where ``.config`` could be a link to /etc). ``per_uid``: a
    directory whose subdirectories named by a number are each that uid's own (/etc/containers/systemd/users:
    quadlet 5.4 reads users/UID only for that user, as a root of its own, and users/sub/UID as shared)."""

    path: str
    kind: RootKind
    scope: SearchScope
    realm: str = ""
    anchor: str | None = None
    per_uid: bool = False
    rank: int = 0  # where it stands in its user's search order (another user's: the login's counterpart's)

    def parts(self) -> tuple[str, ...]:
        """The components of ``path`` below ``anchor``."""
        if self.anchor is None or self.anchor == self.path:
            return ()
        return tuple(PurePosixPath(self.path).relative_to(self.anchor).parts)


def default_roots(home: str, runtime_dir: str | None, uid: int, other_homes: Sequence[str] = (),
                  *, config: str | None = None, data: str | None = None,
                  other_uids: Mapping[int, str] | None = None) -> list[Root]:
    """The directories quadlet and systemd read, highest priority first within each kind and scope.
    ``config`` and ``data`` are the login's $XDG_CONFIG_HOME and $XDG_DATA_HOME (``home``/.config and
    ``home``/.local/share when unset), as the generator and the manager take them; ``other_uids`` maps
    another user's uid to their home, whose units /etc/containers/systemd/users/UID holds too.

    systemd's are its unit path (``systemd-analyze [--user] unit-paths``, checked in tests/host) with the
    .control directories ``systemctl set-property`` writes and the runtime ones ``systemctl edit
    --runtime`` writes, but not the generators' output (what quadlet made of the .container read here),
    the transient units (podman's healthcheck timers, not serving units) nor /etc/xdg/systemd/user (on
    Debian a link to /etc/systemd/user: the same files again under a second name); $XDG_CONFIG_DIRS and
    $XDG_DATA_DIRS are taken at their defaults."""
    home = home.rstrip("/")  # "/home/u/" from $HOME: no root spelled with a "//" no file path has
    own = home or "/"  # the login's realm: never "", the shared one, even for a home of /
    config = (config or default_below(home, "XDG_CONFIG_HOME")).rstrip("/")
    data = (data or default_below(home, "XDG_DATA_HOME")).rstrip("/")
    runtime = runtime_dir.rstrip("/") if runtime_dir else None
    roots = [
        Root("/run/containers/systemd", "quadlet", "system"),  # quadlet 5.x: transient units
        Root(str(SYSTEM_UNIT_DIR), "quadlet", "system"),
        Root("/usr/share/containers/systemd", "quadlet", "system"),
        *(Root(path, "systemd", "system") for path in (
            "/etc/systemd/system.control", "/run/systemd/system.control", str(SYSTEM_SYSTEMD_DIR),
            "/etc/systemd/system.attached", "/run/systemd/system", "/run/systemd/system.attached",
            "/usr/local/lib/systemd/system", "/lib/systemd/system", "/usr/lib/systemd/system")),
    ]
    if runtime:  # before the config directory: quadlet reads it first
        roots.append(Root(f"{runtime}/containers/systemd", "quadlet", "user", own))
    roots += [
        Root(f"{config}/{USER_UNIT_SUBDIR}", "quadlet", "user", own),
        Root(USERS_DIR, "quadlet", "user", per_uid=True),  # before users/UID, as quadlet reads them
        Root(f"{USERS_DIR}/{uid}", "quadlet", "user", own),
        Root(f"{config}/systemd/user.control", "systemd", "user", own),
        *([Root(f"{runtime}/systemd/user.control", "systemd", "user", own)] if runtime else []),
        Root(f"{config}/{USER_SYSTEMD_SUBDIR}", "systemd", "user", own),
        Root("/etc/systemd/user", "systemd", "user"),
        *([Root(f"{runtime}/systemd/user", "systemd", "user", own)] if runtime else []),
        Root("/run/systemd/user", "systemd", "user"),
        Root(f"{data}/systemd/user", "systemd", "user", own),
        *(Root(path, "systemd", "user") for path in (
            "/usr/local/share/systemd/user", "/usr/share/systemd/user", "/usr/local/lib/systemd/user",
            "/usr/lib/systemd/user")),
    ]
    roots = [replace(r, rank=i) for i, r in enumerate(roots)]
    # another user's directories stand where the login's counterparts do, among the shared ones: their
    # generator reads their own config directory before /etc/containers/systemd/users, as the login's does
    rank = {r.path: r.rank for r in roots}
    for given in other_homes:  # as root, other users' units are audited too, each user on their own
        other = given.rstrip("/")
        if other != home:
            theirs_and_like: list[tuple[str, RootKind, str]] = [
                (f"{other}/.config/containers/systemd", "quadlet", f"{config}/containers/systemd"),
                (f"{other}/.config/systemd/user.control", "systemd", f"{config}/systemd/user.control"),
                (f"{other}/.config/systemd/user", "systemd", f"{config}/systemd/user"),
                (f"{other}/.local/share/systemd/user", "systemd", f"{data}/systemd/user"),
            ]
            for path, kind, like in theirs_and_like:
                roots.append(Root(path, kind, "user", other, anchor=other, rank=rank[like]))
    homes = {h.rstrip("/") for h in other_homes} - {home, ""}
    taken = [h.rstrip("/") for h in (other_uids or {}).values()]
    for other_uid, given in sorted((other_uids or {}).items()):
        other = given.rstrip("/")
        if other_uid != uid:  # root's own directory, so trusted as given (its own anchor)
            theirs = f"{USERS_DIR}/{other_uid}"
            # with their home's units only where that home is audited and no other uid claims it: never
            # shared (""), never the login's; else a realm of its own
            realm = other if other in homes and taken.count(other) == 1 else theirs
            roots.append(Root(theirs, "quadlet", "user", realm, anchor=theirs, rank=rank[f"{USERS_DIR}/{uid}"]))
    return roots


# --- which root a file belongs to ------------------------------------------------------------------------


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def searched(directory: str, root: Root, roots: Sequence[Root]) -> bool:
    """Whether ``root``'s reader looks for units and drop-in directories in ``directory``: systemd only in
    the root itself; quadlet (and a ``--path``) in every subdirectory too, but not inside a drop-in
    directory, nor in a deeper root's (/etc/containers/systemd/users is the user scope's), nor in another
    uid's users/UID. The local snapshot walks by the same rule, so it reads what ``collect`` takes."""
    if directory == root.path.rstrip("/"):
        return True
    if root.kind == "systemd" or not _under(directory, root.path):
        return False
    parts = PurePosixPath(directory).relative_to(root.path).parts
    if any(part.endswith(".d") for part in parts) or (root.per_uid and numbered(parts[0])):
        return False  # inside a drop-in directory, or another user's users/UID
    return root.kind == "path" or not any(
        r is not root and _under(r.path, root.path) and (directory == r.path.rstrip("/") or _under(directory, r.path))
        for r in roots
    )


def _unit_in_root(path: str, root: Root, roots: Sequence[Root]) -> bool:
    if root.kind == "path" and path == root.path:
        return True  # --path FILE
    if not searched(str(PurePosixPath(path).parent), root, roots):
        return False
    if root.kind == "systemd":
        return path.endswith(".service")
    return path.endswith(".container") if root.kind == "quadlet" else True


def _together(unit_root: Root, root: Root) -> bool:
    """Whether units and drop-ins in ``root`` count for a unit found in ``unit_root`` (a same-named unit
    there shadows it or is shadowed, a drop-in there applies). One generator run reads the login's own
    directories and the shared ones together; another user's home, or a ``--path``, goes only with the
    shared directories (quadlet never merges across users)."""
    if root.scope != unit_root.scope:
        return False
    if unit_root.anchor is None and unit_root.kind != "path":
        return root.anchor is None
    return root.realm in (unit_root.realm, "")


ConfIndex = Mapping[str, Sequence[tuple[str, str]]]  # drop-in directory name: [(file path, the directory above)]


def conf_index(tree: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    """The ``*.conf`` files of a snapshot by the name of the directory that holds them, made once per
    ``collect``: each unit then looks only at the files of its own drop-in directories' names, instead
    of every file again (which made a snapshot's work grow with the square of its files)."""
    index: dict[str, list[tuple[str, str]]] = {}
    for path in tree:
        p = PurePosixPath(path)
        if p.suffix == ".conf":
            index.setdefault(p.parent.name, []).append((path, str(p.parent.parent)))
    return index


def _dropin_order(index: ConfIndex, roots: Sequence[Root], all_roots: Sequence[Root],
                  dirnames: Sequence[str], *, by_root: bool) -> list[str]:
    """The ``*.conf`` files in ``dirnames`` (most specific first) of the directories ``roots`` search,
    in the order their reader looks: quadlet directory by directory (a root, then its subdirectories),
    each for the unit's own drop-in directory before the cut names' and the type's; systemd root by root
    for the unit's own and its cut names (a cut name in a higher root wins over the unit's own in a lower
    one: systemd 252 logs the latter "Skipping overridden"), then ``service.d`` root by root."""
    found: list[tuple[tuple[int | tuple[str, ...], ...], str]] = []
    for dirname in dict.fromkeys(dirnames):
        specific = dirnames.index(dirname)
        for path, where in index.get(dirname, ()):
            index_of = next((i for i, root in enumerate(roots) if searched(where, root, all_roots)), None)
            if index_of is not None:
                parts = PurePosixPath(where).parts
                type_level = int(dirname == "service.d")
                key = (index_of, parts, specific) if by_root else (type_level, index_of, specific, parts)
                found.append((key, path))
    return [path for _, path in sorted(found)]


def _dropins(files: dict[str, SourceFile], tree: Mapping[str, str], index: ConfIndex, roots: Sequence[Root],
             all_roots: Sequence[Root], *, dirnames: Sequence[str]) -> tuple[SourceFile, ...]:
    """The drop-ins of a unit whose drop-in directories are ``dirnames`` (type-level first, as
    ``dropin_dirs`` names them): quadlet's, then systemd's; of each, the first file of every name, all
    applied in the order of their names."""
    chosen: list[str] = []
    for systemd in (False, True):
        group = [d for d in reversed(dirnames) if (d == "service.d" or d.endswith(".service.d")) is systemd]
        first: dict[str, str] = {}
        for path in _dropin_order(index, roots, all_roots, group, by_root=not systemd):
            first.setdefault(PurePosixPath(path).name, path)
        chosen += [first[name] for name in sorted(first)]
    return tuple(files.setdefault(path, SourceFile(path, tree[path])) for path in chosen)


def collect(tree: Mapping[str, str], roots: Sequence[Root]) -> list[Unit]:
    """The units of ``tree`` (a snapshot of ``roots``), each with the drop-ins that apply to it. Near
    linear in the files: sorted once, drop-ins looked up by their directory's name (``conf_index``). A
    drop-in that applies to several units is one SourceFile for all of them, parsed once."""
    units: list[Unit] = []
    dropins: dict[str, SourceFile] = {}
    seen: set[tuple[str, str, str]] = set()  # (scope, whose units see each other, file name)
    paths = sorted(p for p in tree if p.endswith((".container", ".service")) or any(r.kind == "path" for r in roots))
    index = conf_index(tree)
    for root in roots:
        top = root.path.rstrip("/")
        for path in paths:
            if path != root.path and not path.startswith(top + "/"):
                continue  # cheap: not below this root at all
            if not _unit_in_root(path, root, roots):
                continue
            text = tree[path]
            name = PurePosixPath(path).name
            if not text.strip():
                continue  # empty or masked (a link to /dev/null reads as empty)
            key = (root.scope, root.realm if root.anchor is not None else "", name)
            if root.kind != "path" and key in seen:
                continue  # shadowed by a higher-priority directory
            if name.endswith(".service") and not SERVICE_HINT.search(text):
                continue
            seen.add(key)
            together = sorted((r for r in roots if _together(root, r)), key=lambda r: r.rank)
            main = SourceFile(path, text)
            dirnames = dropin_dirs(path, generated_service(main))
            units.append(Unit(main, _dropins(dropins, tree, index, together, roots, dirnames=dirnames), root.scope))
    return units


def quadlet_roots(roots: Iterable[Root]) -> list[Root]:
    """The quadlet directories among ``roots``: where a ``.container`` and the drop-ins quadlet applies
    to it live (systemd's own drop-ins of the generated service change no container key)."""
    return [r for r in roots if r.kind == "quadlet"]
