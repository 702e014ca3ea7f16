"""Atomic unit installation.

Every file is first written to a fresh temporary name in the quadlet directory itself (``safefs``:
created O_EXCL|O_NOFOLLOW in the opened directory, fsynced), then renamed over its final name in that
same directory, and the directory is fsynced: nothing is written through a link or outside it. The
quadlet generator only reads names ending in a unit suffix, so a half-written temporary file is never
picked up. The renames of one deployment happen with SIGINT deferred: Ctrl-C leaves either the whole
new set or the whole old set, never a mixture, and the caller learns which from ``InstallResult``.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rigctl.errors import InvalidInputError
from rigctl.util import safefs
from rigctl.util.interrupts import sigint_deferred


@dataclass
class InstallResult:
    directory: Path
    written: list[Path] = field(default_factory=list)  # changed or new
    unchanged: list[Path] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.written)


def installed_texts(directory: Path, names: list[str]) -> dict[str, str | None]:
    """The text of each unit file (None when missing). Bounded, and a link, FIFO or directory at a
    name is refused: rigctl's unit files are regular files it wrote itself."""
    out: dict[str, str | None] = {}
    for name in names:
        path = directory / safefs.check_name(name)
        got = safefs.read_file(path, limit=safefs.UNIT_LIMIT, nofollow=True, missing_ok=True)
        out[name] = None if got is None else got.text(path)
    return out


def _current_text(d: safefs.SafeDir, name: str) -> str | None:
    """What sits at ``name`` now, for the "identical: leave it alone" test. A link, oversized or
    undecodable file is simply not identical (the rename replaces the name, it follows nothing); a
    directory cannot be replaced and is refused."""
    st = d.lstat(name)
    if st is None or stat.S_ISLNK(st.st_mode):
        return None
    if stat.S_ISDIR(st.st_mode):
        raise safefs.refuse(os.path.join(d.path, name), "a directory where a unit file belongs; remove it")
    try:
        return d.read_text(name, limit=safefs.UNIT_LIMIT)
    except InvalidInputError:
        return None


SECRET_MODE = 0o600  # a unit that carries a credential-looking value: root's (or the user's) alone
UNIT_MODE = 0o644


def unit_mode(name: str, text: str) -> int:
    """The mode a unit file is installed with: 0600 when it carries a value that looks like a secret
    (``rigctl.preflight.secrets``: preflight warns about it too), else 0644. A text rigctl's parser
    refuses gets the tighter mode."""
    from rigctl.host.unitfile import MergedUnit, UnitParseError, parse  # noqa: PLC0415
    from rigctl.preflight.secrets import unit_secrets  # noqa: PLC0415 - not for `down`, which only removes

    try:
        merged = MergedUnit.of(parse(name, text))
    except UnitParseError:
        return SECRET_MODE
    return SECRET_MODE if unit_secrets(merged) else UNIT_MODE


def _tighten(d: safefs.SafeDir, name: str, mode: int) -> None:
    """An identical file left in place gets no wider a mode than it would be written with (one installed
    0644 by an older rigctl, holding a secret): changed on the file itself, never through a link."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=d.fd)
    try:
        st = os.fstat(fd)
        if stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) & ~mode:
            os.fchmod(fd, stat.S_IMODE(st.st_mode) & mode)
    finally:
        os.close(fd)


def install_files(directory: Path, files: Mapping[str, str]) -> InstallResult:
    """Write ``files`` (name -> text) into ``directory`` atomically; identical files are left alone
    (their mode only tightened). Each is written ``unit_mode``: 0600 when it carries a secret."""
    result = InstallResult(directory)
    with safefs.own_dir(directory) as d:
        staged: list[tuple[str, str]] = []  # (temporary, name)
        try:
            for name, text in files.items():
                mode = unit_mode(safefs.check_name(name), text)
                if _current_text(d, name) == text:
                    _tighten(d, name, mode)
                    result.unchanged.append(directory / name)
                    continue
                staged.append((d.stage(name, text.encode(), mode=mode), name))
            with sigint_deferred():
                for tmp, name in staged:
                    d.commit(tmp, name)
                    result.written.append(directory / name)
                d.sync()
        finally:
            for tmp, _ in staged:
                d.discard(tmp)  # gone already once committed
    return result


def remove_files(directory: Path, names: list[str]) -> list[Path]:
    """Unlink each name in ``directory`` (a link is removed, never its target). Every name is checked
    first, so one that is not a plain file name, or a directory, removes nothing at all."""
    for name in names:
        safefs.check_name(name)
    try:
        d = safefs.SafeDir.at(directory)
    except InvalidInputError:
        if not directory.exists():
            return []
        raise
    removed = []
    with d:
        for name in names:
            st = d.lstat(name)
            if st is not None and stat.S_ISDIR(st.st_mode):
                raise safefs.refuse(os.path.join(d.path, name), "a directory, not a unit file; nothing was removed")
        with sigint_deferred():
            for name in names:
                if d.remove(name):
                    removed.append(directory / name)
            if removed:
                d.sync()
    return removed
