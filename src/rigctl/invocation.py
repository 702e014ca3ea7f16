"""Who runs this rigctl, and whose directories count: the only module that reads ``HOME``, ``XDG_*`` or the
process's uids. Everything else asks ``current()``.

rigctl is run as root (``up``, ``down``, ``doctor --fix``) and by ordinary users. Root is often run with a
user's environment: ``sudo -E``, ``su`` without ``-``, a sudoers rule that keeps ``HOME``. Those directories
are the user's to change, so what root finds there is the user's word, not root's: a hosts file whose ssh
options run commands, a recipe that would be installed as a root unit, licence acceptances, the checksum
cache, state, ssh control sockets, the shell's start-up files. So, as root, an inherited directory counts
only where root alone could have put it there:

- every component of the path as given (links included, as ``lstat`` sees them) is owned by root;
- a link among them leads to a path whose every component root owns too;
- none of them is writable by anyone else, but a sticky one (``/tmp``) above it; the directory itself never
  is (a sticky shared directory is no home: anyone may make ``rigctl/`` in it first);
- where it does not exist yet, the directory it would be made in is root's and writable by nobody else (a
  ``/tmp/x`` that does not exist may be made by anyone first; a ``/root/.local/state`` only by root).

``path_refusal`` is that rule for any path and its owners (root and the invoking user by default): what
rigctl reads as its own configuration, state, cache or code passes it, or is refused with its reason.

Otherwise root's own directory is used (its home from the password database, the XDG defaults below it,
``/run/user/0``), and the refusal is said once on stderr (``notice``). For anyone else, their environment is
their own, as given. Everyone: an empty value counts as unset and a relative one is ignored, as the XDG
base directory specification says.

A leaf: the standard library only, so every layer can ask.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# The variables decided here, in the order they are said.
VARIABLES = ("HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME", "XDG_DATA_HOME", "XDG_RUNTIME_DIR",
             "TMPDIR")
_DEFAULTS = {  # below the home, per the XDG base directory specification
    "XDG_CONFIG_HOME": ".config",
    "XDG_STATE_HOME": ".local/state",
    "XDG_CACHE_HOME": ".cache",
    "XDG_DATA_HOME": ".local/share",
}
_MAX_COMPONENTS = 64  # a path deeper than this is not anybody's real home


def default_below(home: str, name: str) -> str:
    """Where the XDG variable ``name`` points, unset, for a login whose home is ``home`` (another user's, or
    a remote host's): ``home/.config`` for XDG_CONFIG_HOME."""
    return f"{home.rstrip('/')}/{_DEFAULTS[name]}"


def named_dir(env: Mapping[str, str], name: str) -> Path | None:
    """The XDG directory ``name`` (``XDG_STATE_HOME``...) in the environment of another process, a user's
    service manager (it decides what its units' ``%S`` and generators use, and may differ from this login's):
    its value, else its default below that environment's HOME; None when the environment names neither. An
    empty or relative value counts as unset, as ``decide`` reads this process's own."""
    given = env.get(name) or ""
    if os.path.isabs(given):
        return Path(given)
    home = env.get("HOME") or ""
    return Path(home) / _DEFAULTS[name] if os.path.isabs(home) else None


@dataclass(frozen=True)
class Refusal:
    """An inherited variable root did not take as its own, and what it used instead."""

    name: str
    value: str
    why: str
    used: str

    def line(self) -> str:
        return f"{self.name}={_shown(self.value)} is not root's ({self.why}); using {self.used}"


@dataclass(frozen=True)
class Invocation:
    """The answer for this process: who runs, and the directories that are theirs."""

    euid: int
    uid: int
    home: Path
    config_home: Path
    state_home: Path
    cache_home: Path
    data_home: Path
    runtime_dir: Path  # $XDG_RUNTIME_DIR when it counts, else /run/user/UID
    tmp_dir: Path  # $TMPDIR when it counts, else /tmp
    runtime_given: bool  # whether $XDG_RUNTIME_DIR was set (and counted, or was replaced by root's own)
    config_given: bool  # whether $XDG_CONFIG_HOME counted (unit discovery names it as a root of its own)
    data_given: bool  # likewise $XDG_DATA_HOME
    refused: tuple[Refusal, ...] = ()

    @property
    def is_root(self) -> bool:
        return self.euid == 0

    def user_name(self) -> str | None:
        """The effective user's name in the password database (None for a uid without an entry)."""
        try:
            return pwd.getpwuid(self.euid).pw_name
        except KeyError:
            return None

    def notice(self) -> str | None:
        """The one stderr line that says which inherited directories root refused; None when none."""
        if not self.refused:
            return None
        said = "; ".join(r.line() for r in self.refused)
        return (f"rigctl: running as root with another user's environment (sudo -E, su without -?): {said}. "
                "Run `sudo -i`/`su -`, or pass files by path, to choose otherwise")


def _shown(value: str, limit: int = 120) -> str:
    """A value for a one-line notice: control characters visible, long values cut."""
    text = value.encode("unicode_escape", errors="backslashreplace").decode("ascii")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _password_home(uid: int) -> Path:
    try:
        home = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = ""
    return Path(home) if home.startswith("/") else Path("/")


def shared(st: os.stat_result) -> bool:
    """Whether someone besides the owner may write ``st``: others may, or the group may and it is not the
    owner's private group (a group with no member but the owner, as Debian's OpenSSH accepts for a umask of
    002)."""
    if st.st_mode & stat.S_IWOTH:
        return True
    return bool(st.st_mode & stat.S_IWGRP) and not _private_group(st.st_gid, st.st_uid)


def _private_group(gid: int, uid: int) -> bool:
    try:
        group = grp.getgrgid(gid)
        owner = pwd.getpwuid(uid)
    except KeyError:
        return False
    members = set(group.gr_mem)
    return members <= {owner.pw_name} and (bool(members) or owner.pw_gid == gid)


def path_refusal(value: str, owners: frozenset[int] | None = None, *, to_make_in: bool = False) -> str | None:
    """The trust rule, as OpenSSH's StrictModes: None when the path ``value`` and every directory above it
    (as given, links included as ``lstat`` sees them, and every component a link leads through) are owned
    by one of ``owners`` (default: root and this process's user) and writable by no one else; else why, in
    a few words. A sticky directory (``/tmp``) may be writable by others above the path, never as the path
    itself: nobody can move an entry of ours out of it, but anyone may make a new name in it first. So a
    sticky shared directory is no home, and a path that does not exist yet counts only where the directory
    it would be made in is writable by no one else. ``to_make_in``: the rule for a directory rigctl is about
    to make a new directory in (and then judge), where a sticky shared one is as good as above the path."""
    trusted = owners if owners is not None else frozenset({0, os.geteuid()})
    return _walk_refusal(os.path.normpath(value), trusted, 0, to_make_in)


def _walk_refusal(path: str, owners: frozenset[int], links: int, to_make_in: bool = False) -> str | None:
    if not os.path.isabs(path):
        return "not an absolute path"
    parts = [p for p in path.split("/") if p]
    if len(parts) > _MAX_COMPONENTS:
        return f"more than {_MAX_COMPONENTS} components"
    here = "/"
    for i, part in enumerate(["", *parts]):
        here = os.path.join(here, part) if part else "/"
        last = i == len(parts)
        try:
            st = os.lstat(here)
        except FileNotFoundError:
            parent = os.path.dirname(here)
            try:
                pst = os.stat(parent)
            except OSError:
                return f"{parent} cannot be read"
            if shared(pst):
                return f"{here} does not exist, and {parent} is writable by others: anyone may make it first"
            return None  # below a directory only a trusted owner changes: only they can make the rest
        except OSError as exc:
            return f"{here} cannot be read ({exc.strerror or exc})"
        if st.st_uid not in owners:
            return f"{here} is owned by uid {st.st_uid}"
        if stat.S_ISLNK(st.st_mode):  # its own owner is trusted and no one else could place it: judge where it leads
            if links >= 40:
                return f"{here}: too many symbolic links"
            real = os.path.realpath(here)
            rest = parts[i:]
            why = _walk_refusal(os.path.join(real, *rest) if rest else real, owners, links + 1, to_make_in)
            return None if why is None else f"{here} leads to {real}: {why}"
        if shared(st) and ((last and not to_make_in) or not st.st_mode & stat.S_ISVTX):
            if st.st_mode & stat.S_ISVTX and stat.S_ISDIR(st.st_mode):
                return f"{here} is a sticky directory anyone can write: shared, not a home"
            return f"{here} is writable by others"
        if not last and not stat.S_ISDIR(st.st_mode):
            return f"{here} is not a directory"
    return None


_DISTRUSTED: dict[str, str] = {}  # path -> why, for this run's notice (a path is said once)


def distrust(path: str, why: str) -> None:
    """Remember that ``path`` failed the trust rule, for the one notice the command line prints."""
    if len(_DISTRUSTED) < 100:
        _DISTRUSTED.setdefault(path, why)


def take_distrusted() -> list[tuple[str, str]]:
    """(path, the notice's line) for each path refused since the last call, once."""
    lines = [(path, f"rigctl: not used: {_shown(path, 400)}: {_shown(why, 400)}") for path, why in _DISTRUSTED.items()]
    _DISTRUSTED.clear()
    return lines


def roots_own(value: str) -> str | None:
    """None when ``value`` is a directory path that only root could have put in place (``path_refusal``
    with root the only owner); else why not, in a few words."""
    return path_refusal(value, frozenset({0}))


def decide(environ: dict[str, str] | os._Environ[str], euid: int, uid: int) -> Invocation:
    """The invocation for ``environ`` run by ``euid``/``uid`` (pure but for the file system's owners)."""
    refused: list[Refusal] = []
    counted: dict[str, str | None] = {}
    for name in VARIABLES:
        value = environ.get(name) or None
        if value is not None and not os.path.isabs(value):
            value = None  # XDG: a relative path is invalid and ignored; a relative HOME is no home either
        if value is not None and euid == 0:
            why = roots_own(value)
            if why is not None:
                refused.append(Refusal(name, value, why, ""))
                value = None
        counted[name] = value
    home = Path(counted["HOME"]) if counted["HOME"] else _password_home(euid)
    dirs = {name: Path(counted[name] or home / sub) for name, sub in _DEFAULTS.items()}
    runtime = Path(counted["XDG_RUNTIME_DIR"] or f"/run/user/{uid}")
    tmp = Path(counted["TMPDIR"] or "/tmp")
    used = {"HOME": home, **dirs, "XDG_RUNTIME_DIR": runtime, "TMPDIR": tmp}
    said = tuple(Refusal(r.name, r.value, r.why, str(used[r.name])) for r in refused
                 if os.path.normpath(r.value) != str(used[r.name]))  # root's own default, not there yet
    return Invocation(
        euid=euid, uid=uid, home=home,
        config_home=dirs["XDG_CONFIG_HOME"], state_home=dirs["XDG_STATE_HOME"],
        cache_home=dirs["XDG_CACHE_HOME"], data_home=dirs["XDG_DATA_HOME"],
        runtime_dir=runtime, tmp_dir=tmp, runtime_given=bool(environ.get("XDG_RUNTIME_DIR")),
        config_given=counted["XDG_CONFIG_HOME"] is not None, data_given=counted["XDG_DATA_HOME"] is not None,
        refused=said,
    )


_LAST: list[tuple[tuple[object, ...], Invocation]] = []


def current() -> Invocation:
    """This process's invocation, decided once for its environment and uids (decided again only if they
    change, as a test's monkeypatch does: a long-lived process keeps one answer)."""
    euid, uid = os.geteuid(), os.getuid()
    key = (euid, uid, *(os.environ.get(name) for name in VARIABLES))
    if _LAST and _LAST[0][0] == key:
        return _LAST[0][1]
    found = decide(os.environ, euid, uid)
    _LAST[:] = [(key, found)]
    return found


def is_root() -> bool:
    return os.geteuid() == 0


def expand_user(path: str) -> str:
    """``~`` and ``~/...`` below this invocation's home (as root, never an inherited user's), ``~name/...``
    below that user's home from the password database; anything else as given."""
    if not path.startswith("~"):
        return path
    head, sep, rest = path[1:].partition("/")
    if not head:
        base = str(current().home)
    else:
        try:
            base = pwd.getpwnam(head).pw_dir
        except KeyError:
            return path
    return base.rstrip("/") + "/" + rest if sep else base


# --- programs: as root, only what root alone could have put there runs -------------------------------------


def program_refusal(path: str) -> str | None:
    """Why root must not run the program file ``path`` (another uid owns it, or a directory on the way to
    it, or someone else can write one of them); None when it may, and always for anyone else. A user's
    ``PATH`` entry (``~/bin``) or a program named in a user's environment (``RIGCTL_QUADLET``) would
    otherwise run as root."""
    if not is_root():
        return None
    full = os.path.abspath(path)
    why = roots_own(os.path.dirname(full))
    if why is not None:
        return why
    try:
        st = os.stat(full)
    except OSError as exc:
        return f"{full} cannot be read ({exc.strerror or exc})"
    if st.st_uid != 0:
        return f"{full} is owned by uid {st.st_uid}"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{full} is writable by others"
    return None


def search_path(value: str | None) -> tuple[str, list[str]]:
    """``PATH`` as root may search it: the entries root alone controls, in order (and what was left out, a
    line each); anyone else's as given."""
    entries = [e for e in (value or "").split(os.pathsep) if e]
    if not is_root():
        return os.pathsep.join(entries), []
    kept, dropped = [], []
    for entry in entries:
        why = "not an absolute path" if not os.path.isabs(entry) else roots_own(entry)
        if why is None:
            kept.append(entry)
        else:
            dropped.append(f"PATH entry {_shown(entry)}: {why}")
    return os.pathsep.join(kept), dropped


# Variables naming a program or a file that programs rigctl starts will obey (podman reads CONTAINERS_CONF,
# whose runtime= it executes), and a socket rigctl talks to as if it were the host's podman.
PROGRAM_VARIABLES = ("RIGCTL_QUADLET", "CONTAINERS_CONF", "CONTAINERS_REGISTRIES_CONF", "CONTAINERS_STORAGE_CONF")
SOCKET_VARIABLES = ("CONTAINER_HOST",)


def confine_children() -> list[str]:
    """As root: drop from this process's environment, before any program starts, the ``PATH`` entries and
    the program, configuration and socket variables that are not root's own (each said, a line each); for
    anyone else nothing changes. Called once, at start, by the command line."""
    if not is_root():
        return []
    kept, said = search_path(os.environ.get("PATH"))
    if said:
        os.environ["PATH"] = kept
    for name in PROGRAM_VARIABLES:
        value = os.environ.get(name)
        why = program_refusal(value) if value and name == "RIGCTL_QUADLET" else \
            (_file_refusal(value) if value else None)
        if why is not None:
            del os.environ[name]
            said.append(f"{name}={_shown(value or '')}: {why}; not used")
    for name in SOCKET_VARIABLES:
        value = os.environ.get(name) or ""
        if value.startswith("unix://"):
            why = roots_own(os.path.dirname(os.path.abspath(value[len("unix://"):])))
            if why is not None:
                del os.environ[name]
                said.append(f"{name}={_shown(value)}: {why}; not used")
    return said


def _file_refusal(path: str) -> str | None:
    """Why root must not take the file ``path`` as its configuration: as ``program_refusal``."""
    return program_refusal(path)
