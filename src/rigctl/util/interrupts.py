"""Ctrl-C held while a set of files is committed: the installer's renames and doctor --fix's rewrites
end all done or all undone, and the interrupt is raised once they are."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


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
