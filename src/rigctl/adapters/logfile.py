"""A container's ``k8s-file`` log, read through rigctl's own descriptor.

quadlet runs every container with ``--rm``. When an engine dies, podman removes the container and its
log file with it, and ``podman logs -f`` may miss the last lines (podman-logs(1) warns of this; on the
podman 5.4 testbed it lost the dying engine's last words in about half the runs under load). Those
lines are the crash signature rigctl exists to show. A descriptor opened while the container lives
keeps the file's bytes readable after the name is removed, so rigctl reads the file itself: from the
moment it attaches until conmon, the log's only writer, has exited and every byte written is read.

The format is conmon's: ``<RFC 3339 time> <stdout|stderr> <F|P> <text>``, where ``P`` marks a piece
of a longer line that the next record continues. Every read is bounded: a line is cut at
``LINE_LIMIT`` bytes, a ``tail`` looks back at most ``TAIL_LOOKBACK`` bytes.
"""

from __future__ import annotations

import errno
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from datetime import datetime

from rigctl.adapters.lines import QueuedLines
from rigctl.util.safefs import open_regular

LINE_LIMIT = 64 * 1024
TAIL_LOOKBACK = 8 * 1024 * 1024
CHUNK = 64 * 1024
POLL_S = 0.1


def conmon_alive(pid: int) -> bool:
    """Whether the process ``pid`` is still a conmon (a reused pid is not)."""
    try:
        with open(f"/proc/{pid}/comm", "rb") as f:
            return f.read(64).strip() == b"conmon"
    except OSError:
        return False


def parse_stamp(text: str | bytes) -> float | None:
    """An RFC 3339 time as conmon and podman write it (nanoseconds, ``Z`` or an offset) in seconds since
    the epoch; None when it is not one."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    text = text.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    head, dot, rest = text.partition(".")
    fraction = 0.0
    if dot:
        digits = len(rest) - len(rest.lstrip("0123456789"))
        fraction = float("0." + rest[:digits]) if digits else 0.0
        text = head + rest[digits:]
    try:
        return datetime.fromisoformat(text).timestamp() + fraction
    except ValueError:
        return None


def parse_record(raw: bytes) -> tuple[bytes, bool, bytes]:
    """(text, complete, time) of one record; a line that is not conmon's shape is taken whole, as
    written, with no time."""
    parts = raw.split(b" ", 3)
    if len(parts) >= 3 and parts[1] in (b"stdout", b"stderr") and parts[2] in (b"F", b"P"):
        return (parts[3] if len(parts) == 4 else b""), parts[2] == b"F", parts[0]
    return raw, True, b""


class Boundary(str):
    """Not a line of the log: where the output of the container started at ``LogFileLines``'s ``mark_at``
    begins, after older containers' lines in a log they share."""


class LogFileLines(QueuedLines):
    """The lines of one container's k8s-file log (a ``LineStream``), followed until ``writer_alive``
    says the writer is gone and the file is read to its end, or until ``close``."""

    def __init__(self, fd: int, path: str, writer_alive: Callable[[], bool], *, tail: int | None = None,
                 not_before: float | None = None, mark_at: float | None = None, poll_s: float = POLL_S) -> None:
        self._fd = fd
        self._path = path
        self._writer_alive = writer_alive
        self._tail = tail
        self._poll_s = poll_s
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._started = False
        self._pending = b""  # bytes after the last newline read
        self._piece = bytearray()  # a line continued over P records
        self._discard = False  # a record cut at LINE_LIMIT: its rest, up to the newline, is dropped
        self._size_at_start = os.fstat(fd).st_size  # what ``tail`` counts back from
        # lines written before this (another container's, in a log a unit's containers share) are skipped;
        # once one is not, none after it is looked at
        self._not_before = not_before
        # a Boundary is yielded before the first line written at or after this, when older lines came first
        self._mark_at = mark_at
        self._older_seen = False

    # -- reading ----------------------------------------------------------------------------------
    def _records(self, data: bytes) -> Iterator[str]:
        if self._discard:
            cut = data.find(b"\n")
            if cut < 0:
                return
            self._discard = False
            data = data[cut + 1:]
        data = self._pending + data
        *whole, self._pending = data.split(b"\n")
        if len(self._pending) > LINE_LIMIT + 256:  # no newline for too long: the record is cut here
            whole.append(self._pending)
            self._pending = b""
            self._discard = True
        for raw in whole:
            text, complete, stamp = parse_record(raw)
            if self._not_before is not None:
                at = parse_stamp(stamp) if stamp else None
                if at is not None and at < self._not_before:
                    continue
                self._not_before = None
            if self._mark_at is not None and stamp and not self._piece:
                at = parse_stamp(stamp)
                if at is not None and at < self._mark_at:
                    self._older_seen = True
                elif at is not None and self._older_seen:
                    self._mark_at = None
                    yield Boundary("")
            room = LINE_LIMIT - len(self._piece)
            if room > 0:
                self._piece += text[:room]
            if complete:
                line = self._piece.decode("utf-8", "replace").rstrip("\r")
                self._piece.clear()
                yield line

    def _read_available(self, fd: int) -> Iterator[str]:
        while not self._closed.is_set():
            try:
                data = os.read(fd, CHUNK)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    return
                raise
            if not data:
                return
            yield from self._records(data)

    def _start_at_tail(self, fd: int) -> list[str]:
        assert self._tail is not None
        size = self._size_at_start
        start = max(0, size - TAIL_LOOKBACK)
        os.lseek(fd, start, os.SEEK_SET)
        if start > 0:  # the first record read may be cut: skip to the next one
            self._pending = b""
            skipped = os.read(fd, LINE_LIMIT + 1024)
            cut = skipped.find(b"\n")
            os.lseek(fd, start + (cut + 1 if cut >= 0 else len(skipped)), os.SEEK_SET)
        kept: deque[str] = deque(maxlen=max(self._tail, 1))
        left = size - os.lseek(fd, 0, os.SEEK_CUR)
        while left > 0:
            data = os.read(fd, min(CHUNK, left))
            if not data:
                break
            left -= len(data)
            kept.extend(self._records(data))
        return list(kept) if self._tail > 0 else []

    def _replaced(self, fd: int) -> int | None:
        """A new descriptor when conmon has rotated the log (a new file under the same name)."""
        try:
            now = os.stat(self._path, follow_symlinks=False)
        except OSError:
            return None  # removed (--rm): what is left is in our descriptor
        mine = os.fstat(fd)
        if (now.st_dev, now.st_ino) == (mine.st_dev, mine.st_ino):
            if now.st_size < os.lseek(fd, 0, os.SEEK_CUR):  # truncated in place: from its start again
                os.lseek(fd, 0, os.SEEK_SET)
                self._pending = b""
            return None
        return open_regular(self._path)

    def __iter__(self) -> Iterator[str]:
        with self._lock:
            if self._started or self._fd < 0:
                return
            self._started = True
        fd = self._fd
        try:
            if self._tail is not None:
                yield from self._start_at_tail(fd)
            else:
                os.lseek(fd, 0, os.SEEK_SET)
            while not self._closed.is_set():
                got = False
                for line in self._read_available(fd):
                    got = True
                    yield line
                if got:
                    continue
                # at the end of what is written: is more coming?
                alive = self._writer_alive()
                newer = self._replaced(fd)
                if newer is not None:
                    yield from self._read_available(fd)  # the rest of the old file first
                    os.close(fd)
                    fd = self._fd = newer
                    self._pending = b""
                    continue
                if not alive:
                    yield from self._read_available(fd)  # the writer's last bytes
                    if self._pending:
                        yield from self._records(b"\n")
                    if self._piece:  # a piece whose continuation never came
                        yield self._piece.decode("utf-8", "replace")
                    return
                self._closed.wait(self._poll_s)
        finally:
            with self._lock:
                if self._fd >= 0:
                    os.close(self._fd)
                    self._fd = -1

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if not self._started and self._fd >= 0:  # never read: nobody else will close it
                os.close(self._fd)
                self._fd = -1
