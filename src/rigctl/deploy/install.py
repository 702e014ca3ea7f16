"""Atomic unit installation.

Every file is first written to a temporary name in the quadlet directory itself (same filesystem),
fsynced, then renamed over its final name, and the directory is fsynced. The quadlet generator only
reads names ending in a unit suffix, so a half-written temporary file is never picked up. The renames
of one deployment happen with SIGINT deferred: Ctrl-C leaves either the whole new set or the whole old
set, never a mixture, and the caller learns which from ``InstallResult``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType


@dataclass
class InstallResult:
    directory: Path
    written: list[Path] = field(default_factory=list)  # changed or new
    unchanged: list[Path] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.written)


def installed_texts(directory: Path, names: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = (directory / name).read_text()
        except FileNotFoundError:
            out[name] = None
    return out


@contextlib.contextmanager
def sigint_deferred() -> Iterator[list[bool]]:
    """Hold Ctrl-C for the duration; re-raise it as KeyboardInterrupt afterwards if one arrived."""
    got: list[bool] = []
    try:
        previous = signal.getsignal(signal.SIGINT)

        def remember(signum: int, frame: FrameType | None) -> None:
            got.append(True)

        signal.signal(signal.SIGINT, remember)
    except ValueError:  # not the main thread: signals are not ours to defer
        yield got
        return
    try:
        yield got
    finally:
        signal.signal(signal.SIGINT, previous)
    if got:
        raise KeyboardInterrupt


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def install_files(directory: Path, files: Mapping[str, str]) -> InstallResult:
    """Write ``files`` (name -> text) into ``directory`` atomically; identical files are left alone."""
    directory.mkdir(parents=True, exist_ok=True)
    result = InstallResult(directory)
    current = installed_texts(directory, list(files))
    staged: list[tuple[Path, Path]] = []
    try:
        for name, text in files.items():
            target = directory / name
            if current[name] == text:
                result.unchanged.append(target)
                continue
            fd, tmp_name = tempfile.mkstemp(prefix=f".{name}.", suffix=".rigctl-tmp", dir=directory)
            with os.fdopen(fd, "w") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp_name, 0o644)
            staged.append((Path(tmp_name), target))
        with sigint_deferred():
            for tmp, target in staged:
                os.replace(tmp, target)
                result.written.append(target)
            _fsync_dir(directory)
    finally:
        for tmp, _ in staged:
            with contextlib.suppress(FileNotFoundError):
                tmp.unlink()
    return result


def remove_files(directory: Path, names: list[str]) -> list[Path]:
    removed = []
    with sigint_deferred():
        for name in names:
            path = directory / name
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
        if removed:
            _fsync_dir(directory)
    return removed


def write_atomic(path: Path, text: str) -> None:
    install_files(path.parent, {path.name: text})
