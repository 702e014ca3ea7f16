"""Where rigctl works, by scope: the quadlet directory units are installed into, the deployment records,
the lock files, and the per-service lock itself.

A leaf (it needs only ``util`` and ``errors``) so that every layer names a scope and a directory the same
way: the renderer (where a unit goes), host facts (which quadlet generator a scope runs), deploy (where
records and locks live) and the CLI (which scope a command means).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rigctl.errors import LockHeldError, UsageError
from rigctl.invocation import current, named_dir
from rigctl.util.safefs import check_name, kind_of, open_error, own_dir, refuse


class Scope(StrEnum):
    """Which service manager runs the unit: the system one (root) or the user's own."""

    SYSTEM = "system"
    USER = "user"

    @classmethod
    def of(cls, is_root: bool) -> Scope:
        """The one rule: root -> system; anyone else -> user (a non-root user cannot write the system directory)."""
        return cls.SYSTEM if is_root else cls.USER

    @property
    def other(self) -> Scope:
        return Scope.USER if self is Scope.SYSTEM else Scope.SYSTEM


def default_scope() -> Scope:
    """This invocation's scope by ``Scope.of`` (whoever runs it: ``invocation.current``)."""
    return Scope.of(current().is_root)


def resolve_scope(user: bool, system: bool) -> Scope:
    """The scope a command's --user/--system flags mean; neither: ``default_scope``."""
    if user and system:
        raise UsageError("--user and --system exclude each other")
    if user:
        return Scope.USER
    if system:
        if not current().is_root:
            raise UsageError("--system needs root", fix="run as root, or use --user")
        return Scope.SYSTEM
    return default_scope()


# --- directories -----------------------------------------------------------------------------------

SYSTEM_UNIT_DIR = Path("/etc/containers/systemd")
USER_UNIT_SUBDIR = Path("containers/systemd")  # under $XDG_CONFIG_HOME (default ~/.config)


def install_dir(scope: Scope, *, config_home: Path | None = None) -> Path:
    """Where quadlet looks for units: system /etc/containers/systemd/, user
    $XDG_CONFIG_HOME/containers/systemd/ (~/.config/... when unset)."""
    if scope == Scope.SYSTEM:  # by value: a plain "system" from an older caller means the same
        return SYSTEM_UNIT_DIR
    return (config_home or current().config_home) / USER_UNIT_SUBDIR


def install_path(scope: Scope, name: str, *, config_home: Path | None = None) -> Path:
    return install_dir(scope, config_home=config_home) / name


def state_dir(scope: Scope) -> Path:
    """One JSON record per deployment: what was installed, where it answers, the last failure's output."""
    if scope == Scope.SYSTEM:
        return Path("/var/lib/rigctl/deployments")
    return current().state_home / "rigctl" / "deployments"


# Each rigctl unit's engine log, below the state directory of the manager that runs it (systemd's %S:
# /var/lib for the system manager, the user manager's state home for a user's: ``invocation.named_dir``). The
# rendered unit names it (StateDirectory=, --log-opt path=%S/ENGINE_LOG_SUBDIR/%N.log); it outlives --rm.
ENGINE_LOG_SUBDIR = "rigctl/logs"


def engine_log(scope: Scope, unit: str, manager_env: dict[str, str] | None = None) -> Path:
    """The engine log of ``unit`` (``NAME.service``). ``manager_env``: the user manager's environment,
    when it could be asked (it decides %S, and may differ from this shell's); else this login's."""
    stem = unit.removesuffix(".service")
    if scope == Scope.SYSTEM:
        return Path("/var/lib") / ENGINE_LOG_SUBDIR / f"{stem}.log"
    base = named_dir(manager_env or {}, "XDG_STATE_HOME") or current().state_home
    return base / ENGINE_LOG_SUBDIR / f"{stem}.log"


def lock_dir() -> Path:
    # Host-wide for root whatever the scope, so `up --user` and `up --system` of one recipe still exclude
    # each other; a plain user can only lock within their own runtime dir.
    me = current()
    if me.is_root:
        return Path("/run/rigctl/locks")
    return me.runtime_dir / "rigctl" / "locks"


@dataclass(frozen=True)
class Dirs:
    """The two directories a deployment writes: its unit files and rigctl's record of it."""

    units: Path
    state: Path

    @classmethod
    def of(cls, scope: Scope) -> Dirs:
        return cls(install_dir(scope), state_dir(scope))


# --- the service lock ------------------------------------------------------------------------------


class ServiceLock:
    """An exclusive ``flock`` on ``<lock dir>/<service>.lock``, held for a whole command. The kernel
    drops it when the process dies, so a crashed rigctl never leaves a stale lock behind. The file
    carries the holder's pid and command, for the message the next contender sees.

    ``service`` is one plain file name and the file is opened inside the opened lock directory without
    following a link: the lock is truncated and written, so a planted link must never lead elsewhere."""

    def __init__(self, service: str, command: str, directory: Path | None = None) -> None:
        self.name = f"{check_name(service)}.lock"
        self.directory = directory or lock_dir()
        self.path = self.directory / self.name
        self.command = command
        self._fd: int | None = None

    def _open(self) -> int:
        with own_dir(self.directory) as d:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            try:
                fd = os.open(self.name, flags, 0o644, dir_fd=d.fd)
            except OSError as exc:
                raise open_error(self.path, exc, nofollow=True) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise refuse(self.path, f"{kind_of(st.st_mode)}, not a lock file", fix=f"remove {self.path}")
        return fd

    def acquire(self) -> None:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise LockHeldError(
                    f"another rigctl command is working on this service ({holder}); lock {self.path}",
                    fix="wait for it to finish, or stop it; two commands on one service never interleave",
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: rigctl {self.command}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> ServiceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def locked(service: str, command: str, directory: Path | None = None) -> Iterator[ServiceLock]:
    """``service``'s lock taken now (LockHeldError when anyone holds it, this process included)."""
    with ServiceLock(service, command, directory) as lock:
        yield lock


# The locks the operations running in this context hold (``deployment_lock``): a thread starts with none.
_HELD: contextvars.ContextVar[tuple[ServiceLock, ...]] = contextvars.ContextVar("rigctl_held_locks", default=())


@contextlib.contextmanager
def deployment_lock(service: str, command: str, directory: Path | None = None) -> Iterator[ServiceLock]:
    """The one lock rule: each core operation on a deployment (``deploy.up.up``, ``deploy.down.down``,
    ``deploy.swap.swap``, a canary's install, removal and restart) holds the deployment's lock while it runs,
    so that a library caller is locked as the CLI is. An operation that runs inside another one holding that
    lock, in the same thread (swap's up and down, down's removal of the canary), goes on under the held lock:
    a second flock of this process would be refused by its own first. Anyone else holding it, another
    thread or a plain ``locked`` included, refuses the operation with LockHeldError."""
    held = _HELD.get()
    mine = next((lock for lock in held if lock.name == f"{check_name(service)}.lock"), None)
    if mine is not None:
        yield mine
        return
    with ServiceLock(service, command, directory) as lock:
        token = _HELD.set((*held, lock))
        try:
            yield lock
        finally:
            _HELD.reset(token)
