"""Reading the unit directories of this host (``unitdirs``) into a snapshot: bounded, without following
a link out of another user's directory, every file left unread named with the reason. ``rigctl doctor``
audits such a snapshot; ``rigctl status`` (``scope_units``) finds the units of one scope in it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field

from rigctl.errors import InvalidInputError
from rigctl.host.unit import Unit
from rigctl.host.unitdirs import SERVICE_HINT, Root, collect, default_roots, numbered, quadlet_roots, searched
from rigctl.invocation import current
from rigctl.util import safefs
from rigctl.util.safefs import SafeDir


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
    # the directories of --path roots, kept open: a rewrite goes through the very directory that was read
    # (by root path, as Found.root names it), never through the path again, which its owner may have swapped
    opened: dict[str, SafeDir] = field(default_factory=dict)

    def directory(self, found: Found) -> SafeDir:
        """The directory holding a file found here, opened again without following any link: below the
        root's kept descriptor when there is one, else from the root's anchor."""
        kept = self.opened.get(found.root.path)
        if kept is None:
            root = found.root
            return SafeDir.open(root.anchor or root.path, (*root.parts(), *found.rel[:-1]))
        return kept.subdirs(found.rel[:-1])

    def close(self) -> None:
        for d in self.opened.values():
            d.close()
        self.opened.clear()

    def __enter__(self) -> Snapshot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


SKIP_DIRS = (".wants", ".requires", ".upholds")  # systemd's links to units found elsewhere
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
        if owner != current().euid and got.st.st_uid != owner:
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
    roots: Sequence[Root] = ()  # every root ``collect`` will be given: a deeper one is walked as itself
    budget: int = MAX_FILES


def _walk(d: SafeDir, rel: tuple[str, ...], w: _Walk) -> None:
    snap, owner, root = w.snap, w.owner, w.root
    for name in d.names():
        path = os.path.join(d.path, name)
        st = d.lstat(name)
        if st is None:
            continue
        if stat.S_ISLNK(st.st_mode) and _another_uids(name, rel, w):
            snap.skipped.append(Skipped(path, "another user's unit directory is a link: not followed as root "
                                              "(quadlet follows it; audit what it leads to with --path)"))
            continue
        if stat.S_ISDIR(st.st_mode):
            # systemd's *.wants/*.requires hold links to units found elsewhere; skip them. Only what the
            # root's reader searches is walked (a deeper root's files by that root's own walk, with its own
            # anchor and owner), and the drop-in directories there
            if name.endswith(SKIP_DIRS) or not (searched(path, root, w.roots)
                                                or (name.endswith(".d") and searched(d.path, root, w.roots))):
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


def _another_uids(name: str, rel: tuple[str, ...], w: _Walk) -> bool:
    """Whether ``name``, at the top of /etc/containers/systemd/users, is another uid's directory that root
    must not follow: where a link there leads may be that user's to change."""
    return (not rel and w.root.per_uid and numbered(name) and current().is_root
            and not any(r.path.rstrip("/") == os.path.join(w.root.path.rstrip("/"), name) for r in w.roots))


def _snapshot_root(root: Root, snap: Snapshot, roots: Sequence[Root] = ()) -> None:
    if root.kind == "path":
        _snapshot_given(root, snap, roots)
        return
    if not os.path.lexists(root.path):
        return
    try:
        if root.anchor:  # the realm's owner is the anchor's (a home): read from the directory opened
            with SafeDir.open(root.anchor) as anchor:
                owner = anchor.stat().st_uid
                opened = anchor.subdirs(root.parts())
        else:
            opened = SafeDir.open(root.path)
            owner = opened.stat().st_uid
    except InvalidInputError as exc:
        snap.skipped.append(Skipped(root.path, safefs.reason_of(exc)))
        return
    with opened:
        _walk(opened, (), _Walk(root, owner, snap, roots))


def _snapshot_given(root: Root, snap: Snapshot, roots: Sequence[Root]) -> None:
    """A ``--path``: opened once without following a link another uid could have placed
    (``safefs.open_given``), kept open for ``--fix``; the realm's owner is the opened directory's."""
    if not os.path.lexists(root.path):
        return
    try:
        given = safefs.open_given(root.path)
    except InvalidInputError as exc:
        snap.skipped.append(Skipped(root.path, safefs.reason_of(exc)))
        return
    d = given.dir
    owner = d.stat().st_uid
    if given.name is None:
        snap.opened[root.path] = d
        _walk(d, (), _Walk(root, owner, snap, roots))
        return
    # --path FILE: the file the operator named, read through the directory that holds it
    name = given.name
    keep = False
    try:
        st = d.lstat(name)
        if st is None:
            return
        if given.link and safefs.leads_to_dir(d, name):
            snap.skipped.append(Skipped(root.path, f"a symbolic link to a directory, in {d.path} (uid {owner}'s, "
                                                   f"mode {stat.S_IMODE(d.stat().st_mode):o}), which someone other "
                                                   "than root could have placed: not followed (name the directory "
                                                   "it leads to)"))
            return
        try:
            snap.files[root.path] = _read_entry(d, name, st, owner, root.path)
        except InvalidInputError as exc:
            snap.skipped.append(Skipped(root.path, safefs.reason_of(exc)))
            return
        parent = Root(d.path, "path", "path", root.realm)
        snap.found[root.path] = Found(parent, (name,), st, owner)
        if parent.path not in snap.opened:
            snap.opened[parent.path] = d
            keep = True
    finally:
        if not keep:
            d.close()



def local_snapshot(roots: Sequence[Root], known: Sequence[Root] = ()) -> Snapshot:
    """The files of ``roots``, each read by the walk of the deepest root that holds it (of ``roots`` and
    ``known``, the roots not read now but named to ``collect``)."""
    snap = Snapshot()
    every = [*roots, *known]
    for root in roots:
        _snapshot_root(root, snap, every)
    return snap


def login_roots(other_homes: Sequence[str] = (), other_uids: Mapping[int, str] | None = None) -> list[Root]:
    """The directories quadlet and systemd read for this login: its home, $XDG_CONFIG_HOME, $XDG_DATA_HOME
    and $XDG_RUNTIME_DIR as the generator and the manager get them (``other_homes``: other users' too, each
    on their own, and the /etc/containers/systemd/users/UID of each uid ``other_uids`` maps to its home)."""
    me = current()  # as root, an inherited HOME or XDG directory that is not root's is replaced by root's own
    return default_roots(str(me.home), str(me.runtime_dir) if me.runtime_given else None, me.uid, other_homes,
                         config=str(me.config_home) if me.config_given else None,
                         data=str(me.data_home) if me.data_given else None, other_uids=other_uids)


def scope_units(scopes: Collection[str]) -> tuple[list[Unit], Snapshot]:
    """The quadlet units of ``scopes`` on this host, each as the generator of its scope sees it: the
    first of the login's directories that holds a name, with every drop-in quadlet applies. Only the
    directories of ``scopes`` are read, but all are named to ``collect``: a deeper directory
    (/etc/containers/systemd/users) is the user scope's even when only the system's are listed."""
    roots = quadlet_roots(login_roots())
    snap = local_snapshot([r for r in roots if r.scope in scopes], roots)
    return [u for u in collect(snap.files, roots) if u.scope in scopes], snap
