"""Finding unit files for the doctor. This is the edge: it reads the filesystem (or a snapshot shipped
back from another host over ssh) and hands plain values to ``audit``.

A snapshot is a mapping {absolute path: text}. ``collect`` turns a snapshot plus the roots it was taken
from into UnitFiles with their drop-ins, the way quadlet and systemd would see them: the first root
that holds a name wins, drop-ins are applied in file-name order, and a quadlet's generated service also
takes ``NAME.service.d`` drop-ins from the systemd directories.
"""

from __future__ import annotations

import contextlib
import os
import re
import stat
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Literal

from rigctl.doctor.model import DropIn, UnitFile
from rigctl.errors import InvalidInputError
from rigctl.host.unitfile import dropin_dirs
from rigctl.util import safefs
from rigctl.util.safefs import SafeDir

RootKind = Literal["quadlet", "systemd", "path"]
Scope = Literal["system", "user", "path"]

# A .service is only worth shipping/parsing when it mentions a container tool or a known engine.
SERVICE_HINT = re.compile(
    r"podman|docker|vllm|sglang|tabby|llama|ollama|text-generation|lmdeploy|trtllm|aphrodite|kobold|mistralrs",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Root:
    """A directory quadlet or systemd reads units from.

    ``realm`` says whose units these are: "" for directories every user of the scope shares (the
    system directories, /etc/containers/systemd/users), else the home (or ``--path``) they belong to;
    drop-ins apply only within one realm and the shared one, as quadlet never merges across users.
    ``anchor`` is the directory trusted as given; the rest of ``path`` below it is walked without
    following links (another user's home, where ``.config`` could be a link to /etc)."""

    path: str
    kind: RootKind
    scope: Scope
    realm: str = ""
    anchor: str | None = None

    def parts(self) -> tuple[str, ...]:
        """The components of ``path`` below ``anchor``."""
        if self.anchor is None or self.anchor == self.path:
            return ()
        return tuple(PurePosixPath(self.path).relative_to(self.anchor).parts)


def default_roots(home: str, runtime_dir: str | None, uid: int, other_homes: Sequence[str] = ()) -> list[Root]:
    """The directories quadlet and systemd read, highest priority first within each kind and scope."""
    roots = [
        Root("/etc/containers/systemd", "quadlet", "system"),
        Root("/usr/share/containers/systemd", "quadlet", "system"),
        Root("/etc/systemd/system", "systemd", "system"),
        Root("/usr/local/lib/systemd/system", "systemd", "system"),
        Root("/usr/lib/systemd/system", "systemd", "system"),
        Root("/lib/systemd/system", "systemd", "system"),
        Root(f"{home}/.config/containers/systemd", "quadlet", "user", home),
    ]
    if runtime_dir:
        roots.append(Root(f"{runtime_dir}/containers/systemd", "quadlet", "user", home))
    roots += [
        Root(f"/etc/containers/systemd/users/{uid}", "quadlet", "user", home),
        Root("/etc/containers/systemd/users", "quadlet", "user"),
        Root(f"{home}/.config/systemd/user", "systemd", "user", home),
        Root("/etc/systemd/user", "systemd", "user"),
        Root("/usr/lib/systemd/user", "systemd", "user"),
    ]
    for given in other_homes:  # as root, other users' units are audited too, each user on their own
        other = given.rstrip("/")
        if other != home.rstrip("/"):
            roots.append(Root(f"{other}/.config/containers/systemd", "quadlet", "user", other, anchor=other))
            roots.append(Root(f"{other}/.config/systemd/user", "systemd", "user", other, anchor=other))
    return roots


def path_roots(paths: Iterable[str]) -> list[Root]:
    """``--path`` arguments: each a realm of its own, trusted as given (a file or a directory)."""
    roots = []
    for p in paths:
        path = str(Path(p).absolute())
        roots.append(Root(path, "path", "path", path))
    return roots


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def _in_dropin_dir(path: str) -> bool:
    return PurePosixPath(path).parent.name.endswith(".d")


def _unit_in_root(path: str, root: Root, all_roots: Sequence[Root]) -> bool:
    if root.kind == "path":
        if path == root.path:
            return True
        return _under(path, root.path) and not _in_dropin_dir(path)
    if not _under(path, root.path) or _in_dropin_dir(path):
        return False
    if root.kind == "systemd":
        # systemd does not recurse (subdirectories are *.wants, *.requires and drop-ins)
        return str(PurePosixPath(path).parent) == root.path.rstrip("/") and path.endswith(".service")
    # quadlet recurses, but a deeper root (…/users) belongs to another scope
    deeper = [r for r in all_roots if r is not root and _under(r.path, root.path) and _under(path, r.path)]
    return path.endswith(".container") and not deeper


def _dropins(tree: Mapping[str, str], roots: Sequence[Root], dirnames: Sequence[str]) -> tuple[DropIn, ...]:
    """``*.conf`` under any of ``dirnames`` in any root; the first root wins for a given file name;
    applied in order of ``dirnames`` (type-level first), then by file name."""
    chosen: dict[tuple[int, str], str] = {}
    for order, dirname in enumerate(dirnames):
        for root in roots:
            for path in tree:
                p = PurePosixPath(path)
                if p.suffix != ".conf" or p.parent.name != dirname or not _under(path, root.path):
                    continue
                if root.kind != "quadlet" and str(p.parent.parent) != root.path.rstrip("/"):
                    continue
                chosen.setdefault((order, p.name), path)
    return tuple(DropIn(path, tree[path]) for _, path in sorted(chosen.items()))


def collect(tree: Mapping[str, str], roots: Sequence[Root]) -> list[UnitFile]:
    units: list[UnitFile] = []
    seen: set[tuple[str, str, str]] = set()
    for root in roots:
        for path in sorted(tree):
            if not _unit_in_root(path, root, roots):
                continue
            text = tree[path]
            name = PurePosixPath(path).name
            if not text.strip():
                continue  # empty or masked (a link to /dev/null reads as empty)
            if root.kind != "path" and (root.scope, root.realm, name) in seen:
                continue  # shadowed by a higher-priority directory
            if name.endswith(".service") and not SERVICE_HINT.search(text):
                continue
            seen.add((root.scope, root.realm, name))
            # drop-ins from this unit's own realm and the shared directories, never another user's
            same_scope = [r for r in roots if r.scope == root.scope and r.realm in (root.realm, "")]
            units.append(UnitFile(path, text, _dropins(tree, same_scope, dropin_dirs(path, text)), root.scope))
    return units


# --- local snapshot ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Found:
    """Where a file of a local snapshot was read: enough to find it again, without following links,
    and to tell whether rigctl may rewrite it."""

    root: Root
    rel: tuple[str, ...]  # directories below the root, then the file's name
    st: os.stat_result  # of the directory entry itself (lstat)
    owner: int  # uid of the realm's owner: the root directory's (or the anchor's) owner

    @property
    def link(self) -> bool:
        return stat.S_ISLNK(self.st.st_mode)


@dataclass(frozen=True)
class Skipped:
    path: str
    reason: str


@dataclass
class Snapshot:
    """Unit, drop-in and CDI texts read from this host: {path: text}, with where each came from and
    what was left unread, and why."""

    files: dict[str, str] = field(default_factory=dict)
    found: dict[str, Found] = field(default_factory=dict)
    skipped: list[Skipped] = field(default_factory=list)


_SKIP_DIRS = (".wants", ".requires", ".upholds")
MAX_DEPTH = 8  # quadlet recurses; nobody nests units deeper than this
MAX_FILES = 10_000  # per root


def _wanted(name: str, parent: str) -> bool:
    return name.endswith((".container", ".service")) or (name.endswith(".conf") and parent.endswith(".d"))


def _masked(d: SafeDir, name: str) -> bool:
    with contextlib.suppress(OSError):
        return os.readlink(name, dir_fd=d.fd) == "/dev/null"
    return False


def _read_entry(d: SafeDir, name: str, st: os.stat_result, owner: int, path: str) -> str:
    """The text of one directory entry. A link is followed only to a file the realm's owner owns (or
    when the realm is the caller's own): root reading a user's directory must not become a way to
    read root's files. Anything else unreadable is refused (InvalidInputError) with the reason."""
    if stat.S_ISLNK(st.st_mode):
        if _masked(d, name):
            return ""
        got = safefs.read_file(name, limit=safefs.UNIT_LIMIT, dir_fd=d.fd)
        assert got is not None
        if owner != os.geteuid() and got.st.st_uid != owner:
            raise safefs.refuse(path, f"a link to a file owned by uid {got.st.st_uid}, not by uid {owner} "
                                      "who owns this directory: not followed")
        return got.text(path)
    got = safefs.read_file(name, limit=safefs.UNIT_LIMIT, nofollow=True, dir_fd=d.fd)
    assert got is not None
    return got.text(path)


@dataclass
class _Walk:
    root: Root
    owner: int
    snap: Snapshot
    budget: int = MAX_FILES


def _walk(d: SafeDir, rel: tuple[str, ...], w: _Walk) -> None:
    snap, owner, root = w.snap, w.owner, w.root
    for name in d.names():
        path = os.path.join(d.path, name)
        st = d.lstat(name)
        if st is None:
            continue
        if stat.S_ISDIR(st.st_mode):
            # systemd's *.wants/*.requires hold links to units found elsewhere; skip them
            if name.endswith(_SKIP_DIRS):
                continue
            if len(rel) >= MAX_DEPTH:
                snap.skipped.append(Skipped(path, f"deeper than {MAX_DEPTH} directories: not read"))
                continue
            try:
                sub = d.subdir(name)
            except InvalidInputError as exc:
                snap.skipped.append(Skipped(path, safefs.reason_of(exc)))
                continue
            with sub:
                _walk(sub, (*rel, name), w)
            continue
        if not _wanted(name, d.path):
            continue
        w.budget -= 1
        if w.budget < 0:
            snap.skipped.append(Skipped(path, f"more than {MAX_FILES} unit files under {root.path}: not read"))
            return
        try:
            text = _read_entry(d, name, st, owner, path)
        except InvalidInputError as exc:
            snap.skipped.append(Skipped(path, safefs.reason_of(exc)))
            continue
        if name.endswith(".service") and not SERVICE_HINT.search(text):
            continue
        snap.files[path] = text
        snap.found[path] = Found(root, (*rel, name), st, owner)


def _snapshot_root(root: Root, snap: Snapshot) -> None:
    base = Path(root.path)
    if root.kind == "path" and not base.is_dir():
        # --path FILE: the file the operator named, read through its parent directory
        if not os.path.lexists(base):
            return
        with contextlib.suppress(InvalidInputError), SafeDir.open(base.parent) as parent:
            owner = parent.stat().st_uid
            st = parent.lstat(base.name)
            if st is None:
                return
            try:
                snap.files[root.path] = _read_entry(parent, base.name, st, owner, root.path)
            except InvalidInputError as exc:
                snap.skipped.append(Skipped(root.path, safefs.reason_of(exc)))
                return
            snap.found[root.path] = Found(Root(str(base.parent), "path", "path", root.realm), (base.name,), st, owner)
        return
    if not os.path.lexists(root.path):
        return
    anchor = root.anchor or root.path
    try:
        opened = SafeDir.open(anchor, root.parts())
    except InvalidInputError as exc:
        snap.skipped.append(Skipped(root.path, safefs.reason_of(exc)))
        return
    with opened:
        owner = (os.stat(anchor).st_uid if root.anchor else opened.stat().st_uid)
        _walk(opened, (), _Walk(root, owner, snap))


def local_snapshot(roots: Sequence[Root]) -> Snapshot:
    snap = Snapshot()
    for root in roots:
        _snapshot_root(root, snap)
    return snap


def local_roots() -> list[Root]:
    home = os.path.expanduser("~")
    uid = os.getuid()
    others: list[str] = []
    if uid == 0 and Path("/home").is_dir():
        others = sorted(str(p) for p in Path("/home").iterdir() if p.is_dir())
    return default_roots(home, os.environ.get("XDG_RUNTIME_DIR"), uid, others)
