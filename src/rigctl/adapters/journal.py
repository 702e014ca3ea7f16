"""The systemd journal, through ``journalctl``, where there is one: it keeps a unit's output across the
containers quadlet removes (``--rm``), and following it spans restarts by itself."""

from __future__ import annotations

import os
import shutil
from typing import Protocol

from rigctl.adapters.lines import LineStream, ProcLines
from rigctl.places import Scope
from rigctl.util.proc import run

FOLLOW_TAIL = 200  # where `logs -f` starts in the journal when neither --tail nor --since is given


class Journal(Protocol):
    def available(self) -> bool: ...
    def lines(self, unit: str, *, since: str | None = None, tail: int | None = None) -> list[str]: ...
    def follow(self, unit: str, *, tail: int | None = None, since: str | None = None) -> LineStream: ...


class Journalctl:
    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def _argv(self, unit: str, *, follow: bool = False) -> list[str]:
        return ["journalctl", *(["--follow"] if follow else []), "--no-pager", "-o", "cat",
                *(["--user"] if self.scope is Scope.USER else []), f"--unit={unit}"]

    def available(self) -> bool:
        return shutil.which("journalctl") is not None and os.path.exists("/run/systemd/journal/socket")

    def lines(self, unit: str, *, since: str | None = None, tail: int | None = None) -> list[str]:
        argv = self._argv(unit)
        if since:
            argv += ["--since", since]
        if tail:
            argv += ["-n", str(tail)]
        done = run(argv, timeout=60.0)
        return done.stdout.splitlines() if done.ok else []

    def follow(self, unit: str, *, tail: int | None = None, since: str | None = None) -> LineStream:
        """``journalctl -f`` on the unit: it follows the unit, not a container, so it spans restarts."""
        argv = self._argv(unit, follow=True)
        if since:
            argv += ["--since", since]
        argv += ["-n", str(tail if tail is not None else "all" if since else FOLLOW_TAIL)]
        return ProcLines(argv)
