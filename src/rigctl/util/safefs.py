"""Bounded, link-safe file access: the one place rigctl reads an input file or writes one of its own.

rigctl runs as root and reads files other users can write (unit files in their homes, deployment
records, caches, inventories). So every read here is of a regular file (a FIFO never blocks, a
device is refused) and stops at a size limit; every write goes to a fresh temporary file created
with O_EXCL|O_NOFOLLOW inside an open directory, then renamed over its name in that same directory,
so neither the file, its temporary nor its backup is ever written through a symbolic link, and
nothing lands outside the directory the caller opened.

Refusals are ``InvalidInputError`` (exit 3) with one ``path: why`` line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rigctl.errors import InvalidInputError
from rigctl.invocation import current, distrust, is_root, path_refusal, shared

KiB = 1 << 10
MiB = 1 << 20

# Limits by kind of file. Generous for real files of each kind, far below what hurts.
UNIT_LIMIT = 1 * MiB  # a quadlet/systemd unit or drop-in (real ones are a few KiB)
RECIPE_LIMIT = 1 * MiB  # a recipe or overlay YAML
RECORD_LIMIT = 4 * MiB  # rigctl's own JSON state: deployment records, licences, sha256 cache
INVENTORY_LIMIT = 16 * MiB  # a captured host-facts document or hosts file

_KIND = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC


class FileRefused(InvalidInputError):
    """A file rigctl would not read or write, with the reason on its own (a path may hold ": " too)."""

    def __init__(self, path: str | os.PathLike[str], why: str, fix: str | None = None) -> None:
        super().__init__([f"{os.fspath(path)}: {why}"], fix=fix)
        self.path = os.fspath(path)
        self.reason = why


def refuse(path: str | os.PathLike[str], why: str, fix: str | None = None) -> FileRefused:
    return FileRefused(path, why, fix)


def reason_of(exc: InvalidInputError) -> str:
    """Why a file was refused, without its path."""
    return exc.reason if isinstance(exc, FileRefused) else exc.message


def kind_of(mode: int) -> str:
    return _KIND.get(stat.S_IFMT(mode), "not a regular file")


def format_size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / KiB:.0f} KiB" if n >= KiB else f"{n} bytes"


@dataclass(frozen=True)
class ReadFile:
    data: bytes
    st: os.stat_result

    def text(self, path: str | os.PathLike[str]) -> str:
        return decode(self.data, path)


def decode(data: bytes, path: str | os.PathLike[str]) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None


def _read_fd(fd: int, path: str | os.PathLike[str], limit: int) -> ReadFile:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise refuse(path, f"{kind_of(st.st_mode)}, not a regular file; rigctl reads only regular files")
    if st.st_size > limit:
        raise refuse(path, f"{format_size(st.st_size)}, more than the {format_size(limit)} "
                           "rigctl reads from such a file")
    chunks: list[bytes] = []
    got = 0
    while got <= limit:
        chunk = os.read(fd, min(1 * MiB, limit + 1 - got))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    if got > limit:  # grew while being read, or a file whose size stat does not tell (/proc)
        raise refuse(path, f"more than the {format_size(limit)} rigctl reads from such a file")
    return ReadFile(b"".join(chunks), st)


def open_error(path: str | os.PathLike[str], exc: OSError, *, nofollow: bool) -> InvalidInputError:
    if nofollow and exc.errno == errno.ELOOP:
        return refuse(path, "a symbolic link; rigctl does not follow links here")
    return refuse(path, f"cannot read: {exc.strerror or exc}")


def read_file(path: str | os.PathLike[str], *, limit: int, nofollow: bool = False, dir_fd: int | None = None,
              missing_ok: bool = False) -> ReadFile | None:
    """The bytes of a regular file, at most ``limit`` of them. A FIFO, a device, a directory or (with
    ``nofollow``) a symbolic link is refused without blocking; a missing file is None when
    ``missing_ok``, else refused."""
    flags = _READ_FLAGS | (os.O_NOFOLLOW if nofollow else 0)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise refuse(path, "no such file") from None
    except OSError as exc:
        raise open_error(path, exc, nofollow=nofollow) from None
    try:
        return _read_fd(fd, path, limit)
    finally:
        os.close(fd)


def open_regular(path: str | os.PathLike[str]) -> int | None:
    """A read-only descriptor on the regular file ``path``, opened without following a link and without
    blocking, for a caller that reads it in bounded pieces as it grows (a container's log); None when
    it cannot be opened or is not a regular file."""
    try:
        fd = os.open(path, _READ_FLAGS | os.O_NOFOLLOW)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def read_text(path: str | os.PathLike[str], *, limit: int, nofollow: bool = False) -> str:
    got = read_file(path, limit=limit, nofollow=nofollow)
    assert got is not None
    return got.text(path)


def read_text_or_none(path: str | os.PathLike[str], *, limit: int) -> str | None:
    """A missing file is None; anything else that cannot be read is refused."""
    got = read_file(path, limit=limit, missing_ok=True)
    return None if got is None else got.text(path)


def own_refusal(path: str | os.PathLike[str]) -> str | None:
    """Why ``path`` is not rigctl's own to read or write (``invocation.path_refusal``: it, and every
    directory above it, owned by root or this user and writable by no one else; a sticky shared directory
    only above it); None when it is."""
    return path_refusal(os.path.abspath(os.fspath(path)))


def _not_own(path: str | os.PathLike[str], why: str) -> FileRefused:
    distrust(os.fspath(path), why)
    return refuse(path, f"not rigctl's own ({why})",
                  fix="make it and the directories above it owned by you (or root) and writable by no one else, "
                      "or remove it")


def _make_own(path: str, mode: int) -> None:
    """Make the missing directories of ``path``, each only below one that passes the trust rule; the
    directory they are made in may be a sticky shared one (``/tmp``), as the rule allows above a path."""
    missing: list[str] = []
    here = path
    while not os.path.lexists(here) and here != "/":
        missing.append(os.path.basename(here))
        here = os.path.dirname(here)
    for name in reversed(missing):
        why = path_refusal(here, to_make_in=True)
        if why is not None:
            raise _not_own(here, why)
        here = os.path.join(here, name)
        with contextlib.suppress(FileExistsError):  # someone else's by then: the rule above refuses it
            os.mkdir(here, mode)


def read_own(path: str | os.PathLike[str], *, limit: int, missing_ok: bool = False,
             nofollow: bool = False) -> ReadFile | None:
    """``read_file`` for rigctl's own configuration, state and cache: refused unless the path passes the
    trust rule (``own_refusal``); a link is followed only where the rule holds for it and what it leads to."""
    with contextlib.suppress(OSError):  # what it is comes first: a FIFO or device is refused as that
        st = os.stat(path, follow_symlinks=not nofollow)
        if not stat.S_ISREG(st.st_mode):
            raise refuse(path, f"{kind_of(st.st_mode)}, not a regular file; rigctl reads only regular files")
    why = own_refusal(path)
    if why is not None:
        if missing_ok and not os.path.lexists(path) and "does not exist" in why:
            return None  # nothing there to trust or distrust (its directory is not ours either: nothing is made)
        raise _not_own(path, why)
    return read_file(path, limit=limit, missing_ok=missing_ok, nofollow=nofollow)


def check_name(name: str) -> str:
    """One path component: no separator, no NUL, not ``.`` or ``..``, at most 255 bytes."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or len(name.encode()) > 255:
        raise refuse(repr(name), "not a plain file name")
    return name


class SafeDir:
    """An open directory. Names given to its methods are single components, opened relative to the
    directory's descriptor without following links, so every read and write stays inside it."""

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path

    # --- opening ------------------------------------------------------------------------------------

    @classmethod
    def open(cls, anchor: str | os.PathLike[str], parts: Sequence[str] = (), *, create: bool = False,
             mode: int = 0o755) -> SafeDir:
        """Open ``anchor`` (trusted as given, links included), then walk ``parts`` below it without
        following any link. ``create`` makes missing directories (the anchor's parents included)."""
        anchor = os.fspath(anchor)
        if create:
            os.makedirs(anchor, mode=mode, exist_ok=True)
        try:
            fd = os.open(anchor, _DIR_FLAGS)
        except OSError as exc:
            raise refuse(anchor, f"cannot open the directory: {exc.strerror or exc}") from None
        with cls(fd, anchor) as here:
            return here.subdirs(parts, create=create, mode=mode)

    @classmethod
    def at(cls, path: str | os.PathLike[str], *, create: bool = False, mode: int = 0o755) -> SafeDir:
        """A directory of rigctl's own (its state, unit or lock directory), made when missing with
        ``create``: refused unless it passes the trust rule (``own_refusal``), after the making too (a name
        taken first in a sticky directory is someone else's)."""
        if create:
            _make_own(os.path.abspath(os.fspath(path)), mode)
        why = own_refusal(path)
        if why is not None:
            raise _not_own(path, why)
        handle = cls.open(path)
        st = handle.stat()
        if not _mine(st.st_uid) or shared(st):  # replaced between the rule and the open: not by anyone we trust
            handle.close()
            raise _not_own(path, "it changed while it was opened")
        return handle

    def subdir(self, name: str, *, create: bool = False, mode: int = 0o755) -> SafeDir:
        check_name(name)
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(name, mode, dir_fd=self.fd)
        try:
            fd = os.open(name, _DIR_FLAGS | os.O_NOFOLLOW, dir_fd=self.fd)
        except OSError as exc:
            where = os.path.join(self.path, name)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                st = self.lstat(name)
                what = kind_of(st.st_mode) if st else "gone"
                raise refuse(where, f"{what}, not a directory rigctl can enter") from None
            raise refuse(where, f"cannot open the directory: {exc.strerror or exc}") from None
        return SafeDir(fd, os.path.join(self.path, name))

    def subdirs(self, parts: Sequence[str], *, create: bool = False, mode: int = 0o755) -> SafeDir:
        """The directory ``parts`` below this one, walked without following any link; a new descriptor
        (this one stays open)."""
        here = SafeDir(os.dup(self.fd), self.path)
        try:
            for part in parts:
                nxt = here.subdir(part, create=create, mode=mode)
                here.close()
                here = nxt
        except BaseException:
            here.close()
            raise
        return here

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> SafeDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ------------------------------------------------------------------------------------

    def stat(self) -> os.stat_result:
        return os.fstat(self.fd)

    def lstat(self, name: str) -> os.stat_result | None:
        try:
            return os.stat(check_name(name), dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    def names(self) -> list[str]:
        return sorted(os.listdir(self.fd))

    def read(self, name: str, *, limit: int, missing_ok: bool = False) -> ReadFile | None:
        return read_file(check_name(name), limit=limit, nofollow=True, dir_fd=self.fd, missing_ok=missing_ok)

    def read_text(self, name: str, *, limit: int) -> str | None:
        """The text of ``name`` (None when missing); a link, FIFO or oversized file is refused."""
        try:
            got = self.read(name, limit=limit, missing_ok=True)
        except InvalidInputError as exc:
            raise refuse(os.path.join(self.path, name), reason_of(exc)) from None
        return None if got is None else got.text(os.path.join(self.path, name))

    # --- writing ------------------------------------------------------------------------------------

    def _create(self, name: str, data: bytes, mode: int, owner: tuple[int, int] | None) -> None:
        """Create ``name`` exclusively (never opening anything already there, a link included)."""
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self.fd)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if owner is not None and is_root():
                os.fchown(fd, *owner)
            os.fchmod(fd, mode & 0o7777)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=self.fd)
            raise
        os.close(fd)

    def stage(self, name: str, data: bytes, *, mode: int = 0o644, owner: tuple[int, int] | None = None) -> str:
        """Write ``data`` to a fresh hidden temporary beside ``name``; returns the temporary's name, for
        ``commit``. The quadlet generator and systemd ignore it (it ends in neither unit suffix)."""
        check_name(name)
        for _ in range(16):
            tmp = f".{name[:200]}.{os.urandom(6).hex()}.rigctl-tmp"
            try:
                self._create(tmp, data, mode, owner)
            except FileExistsError:
                continue
            return tmp
        raise refuse(os.path.join(self.path, name), "could not create a temporary file beside it")

    def commit(self, tmp: str, name: str) -> None:
        """Rename a staged temporary over ``name``: a link sitting at ``name`` is replaced, not followed."""
        os.replace(tmp, check_name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def discard(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(check_name(name), dir_fd=self.fd)

    def sync(self) -> None:
        os.fsync(self.fd)

    def write_atomic(self, name: str, data: bytes, *, mode: int = 0o644,
                     owner: tuple[int, int] | None = None) -> None:
        tmp = self.stage(name, data, mode=mode, owner=owner)
        try:
            self.commit(tmp, name)
        except BaseException:
            self.discard(tmp)
            raise
        self.sync()

    def write_new(self, name: str, data: bytes, *, mode: int = 0o644) -> None:
        """Write ``name`` whole, only where nothing is (no file, no link): staged, then linked into place,
        so a reader never sees half of it and whatever appeared there meanwhile is refused, never replaced."""
        tmp = self.stage(name, data, mode=mode)
        try:
            os.link(tmp, check_name(name), src_dir_fd=self.fd, dst_dir_fd=self.fd, follow_symlinks=False)
        except FileExistsError:
            raise refuse(os.path.join(self.path, name), "already exists; rigctl does not overwrite it") from None
        finally:
            self.discard(tmp)
        self.sync()

    def backup(self, name: str, data: bytes, *, mode: int, owner: tuple[int, int] | None = None,
               most: int = 100) -> str:
        """Keep ``data`` as ``name.bak`` — or, when that exists (a file or a link), the first free
        ``name.bak.N``: an earlier backup is never overwritten. Returns the backup's name."""
        for n in range(most):
            candidate = f"{name}.bak" if n == 0 else f"{name}.bak.{n}"
            try:
                self._create(check_name(candidate), data, mode, owner)
            except FileExistsError:
                continue
            return candidate
        raise refuse(os.path.join(self.path, name), f"{most} backups already sit beside it; remove old ones first")

    def remove(self, name: str) -> bool:
        """Unlink ``name`` in this directory (a link is removed, never its target)."""
        try:
            os.unlink(check_name(name), dir_fd=self.fd)
        except FileNotFoundError:
            return False
        return True


# --- a path named on the command line --------------------------------------------------------------

MAX_LINKS = 40  # the kernel's own bound on the links one lookup follows


def _mine(uid: int) -> bool:
    return uid in (0, current().euid)


def trusted_dir(st: os.stat_result) -> bool:
    """Whether only this process's user (or root) can change what a directory holds: they own it and
    neither its group nor others may write it."""
    return _mine(st.st_uid) and not st.st_mode & 0o022


def _trusted_link(holder: os.stat_result, link: os.stat_result) -> bool:
    """Whether a link was placed by this user or root and no one else can replace it: it sits in a
    directory only they can change, or it is their own in their sticky directory (/tmp)."""
    if trusted_dir(holder):
        return True
    return bool(holder.st_mode & stat.S_ISVTX) and _mine(holder.st_uid) and _mine(link.st_uid)


@dataclass
class Given:
    """What ``open_given`` reached: ``dir`` is the path itself (``name`` None), or the directory holding
    its last component ``name``, which is not a directory rigctl entered (a file, or a link it did not
    follow: ``link``). The caller owns ``dir`` and closes it."""

    dir: SafeDir
    name: str | None = None
    link: bool = False


def open_given(path: str | os.PathLike[str], *, walked: bool = False) -> Given:
    """Open a path someone named (``doctor --path``), component by component from ``/`` with
    O_NOFOLLOW, following a symbolic link only where this user or root placed it (``_trusted_link``): a
    link in a directory another uid owns or can write (group/other-writable without the sticky bit) is
    never followed, so a user cannot point root at root's own files by swapping their directory for a
    link, before the open or during it. The descriptor returned is what every later read and write is
    relative to: what happens to the path after this call redirects nothing.

    A link as the last component is returned unfollowed (``link``) when it is not trusted; one above it
    is refused. ``..`` goes back to the directory the walk came from (as the kernel does after a link).
    The directory is named as given, or with ``walked`` where the walk really went (links resolved)."""
    shown = os.fspath(path)
    absolute = shown if shown.startswith("/") else os.path.join(os.getcwd(), shown)
    todo = [p for p in absolute.split("/") if p not in ("", ".")]
    todo.reverse()  # a stack: the next component is last
    stack: list[SafeDir] = [SafeDir(os.open("/", _DIR_FLAGS), "/")]
    links = 0
    try:
        while todo:
            name = todo.pop()
            here = stack[-1]
            if name == "..":
                if len(stack) > 1:
                    stack.pop().close()
                continue
            st = here.lstat(name)
            where = os.path.join(here.path, name)
            if st is None:
                raise refuse(shown, f"no such file or directory ({where})")
            if stat.S_ISLNK(st.st_mode):
                holder = here.stat()
                trusted = _trusted_link(holder, st)
                if not todo and not (trusted and leads_to_dir(here, name)):
                    return _given(stack, shown, name, link=True)  # a link to a file is the caller's to judge
                if not trusted:
                    raise refuse(shown, f"{where} is a symbolic link in a directory uid {holder.st_uid} owns"
                                        f"{' and others can write' if holder.st_mode & 0o022 else ''}: "
                                        "not followed (name the directory it leads to)")
                links += 1
                if links > MAX_LINKS:
                    raise refuse(shown, f"more than {MAX_LINKS} symbolic links: not followed")
                target = os.readlink(name, dir_fd=here.fd)
                if target.startswith("/"):
                    while len(stack) > 1:
                        stack.pop().close()
                todo.extend(reversed([p for p in target.split("/") if p not in ("", ".")]))
                continue
            if not stat.S_ISDIR(st.st_mode):
                if todo:
                    raise refuse(shown, f"{where} is {kind_of(st.st_mode)}, not a directory")
                return _given(stack, shown, name)
            stack.append(here.subdir(name))  # O_NOFOLLOW: swapped for a link meanwhile, it is refused
        return _given(stack, shown if not walked else None, None)
    except BaseException:
        for d in stack:
            d.close()
        raise


def leads_to_dir(d: SafeDir, name: str) -> bool:
    """Whether ``name`` in ``d``, followed, is a directory."""
    try:
        return stat.S_ISDIR(os.stat(name, dir_fd=d.fd).st_mode)
    except OSError:
        return False


def _given(stack: list[SafeDir], shown: str | None, name: str | None, *, link: bool = False) -> Given:
    """The last directory of the walk: the path itself named as the caller gave it (``shown``), or the
    directory holding the last component named as walked (where it really is); the others closed."""
    top = stack.pop()
    for d in stack:
        d.close()
    if name is None and shown is not None:
        top.path = shown
    return Given(top, name, link)


def open_out(path: str | os.PathLike[str], *, create: bool = False, mode: int = 0o755) -> SafeDir:
    """A directory named on the command line for rigctl to write into (``render --out``, ``verify
    --export``, ``metrics --textfile``): walked as ``open_given`` walks, so a link is followed only where
    this user or root placed it, and with ``create`` its missing components are made one by one inside
    the directory reached so far, never through a link. The result's ``path`` is where the walk really
    went, for the report."""
    shown = os.fspath(path)
    absolute = os.path.normpath(shown if shown.startswith("/") else os.path.join(os.getcwd(), shown))
    missing: list[str] = []
    here = absolute
    while create and here != "/" and not os.path.lexists(here):
        missing.append(os.path.basename(here))
        here = os.path.dirname(here)
    given = open_given(here, walked=True)
    if given.name is not None:
        where = os.path.join(given.dir.path, given.name)
        given.dir.close()
        why = ("a symbolic link another user could have placed: not followed" if given.link
               else "not a directory")
        said = why if os.path.normpath(where) == absolute else f"{where} is {why}"
        raise refuse(shown, said, fix="name a directory of your own (or the one the link leads to)")
    with given.dir as reached:
        return reached.subdirs(list(reversed(missing)), create=True, mode=mode)


@contextlib.contextmanager
def own_dir(path: str | os.PathLike[str], *, mode: int = 0o755) -> Iterator[SafeDir]:
    """One of rigctl's own directories (created when missing), open for the duration."""
    handle = SafeDir.at(path, create=True, mode=mode)
    try:
        yield handle
    finally:
        handle.close()


def write_own(path: str | os.PathLike[str], data: str | bytes, *, mode: int = 0o644) -> None:
    """Atomically replace a file in one of rigctl's own directories (created when missing)."""
    target = Path(path)
    with own_dir(target.parent) as d:
        d.write_atomic(target.name, data.encode() if isinstance(data, str) else data, mode=mode)
