"""Lines from a long-running child process (``podman logs -f``, ``journalctl -f``), as the podman and
journal adapters hand them out."""

from __future__ import annotations

import queue
import subprocess
import threading
from collections.abc import Iterator, Sequence
from typing import Protocol


class LineStream(Protocol):
    def __iter__(self) -> Iterator[str]: ...
    def next_lines(self, timeout: float) -> list[str] | None:
        """The lines that came within ``timeout`` seconds (maybe none); None once the stream has ended
        and every line was read. Use either this or iteration on one stream, not both."""
        ...
    def close(self) -> None: ...


class QueuedLines:
    """``next_lines`` over a subclass's ``__iter__`` (a blocking read): a reader thread puts each line on a
    queue, so the caller can look around between lines."""

    _queue: queue.SimpleQueue[str | None] | None = None
    _ended = False

    def __iter__(self) -> Iterator[str]:
        raise NotImplementedError

    def _read_into(self, into: queue.SimpleQueue[str | None]) -> None:
        try:
            for line in self:
                into.put(line)
        except (OSError, ValueError):  # the pipe or file closed under the reader by close(): the stream is over
            pass
        finally:
            into.put(None)  # the end of the stream

    def next_lines(self, timeout: float) -> list[str] | None:
        if self._queue is None:
            self._queue = queue.SimpleQueue()
            threading.Thread(target=self._read_into, args=(self._queue,), name="lines", daemon=True).start()
        if self._ended:
            return None
        out: list[str] = []
        try:
            item = self._queue.get(timeout=timeout)
            while True:
                if item is None:
                    self._ended = True
                    return out or None
                out.append(item)
                if len(out) >= 1000:  # a burst is handed on in pieces, so signatures show as they come
                    return out
                item = self._queue.get_nowait()
        except queue.Empty:
            return out


class ProcLines(QueuedLines):
    """Lines from a long-running child; stdout and stderr merged, as the engine wrote them. The only
    subprocess not run through ``proc.run``: that helper waits for completion."""

    def __init__(self, argv: Sequence[str]) -> None:
        self._proc = subprocess.Popen(  # fixed argv, no shell
            list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", bufsize=1,
        )

    def __iter__(self) -> Iterator[str]:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            yield line.rstrip("\r\n")

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._proc.stdout is not None:
            self._proc.stdout.close()
