"""What `canary` and `metrics` print for a person."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.views.draw import View, paths
from rigctl.util.text import LINE_LIMIT, printable

if TYPE_CHECKING:
    from rigctl.deploy.canary import CanaryChange, RunResult


def canary_change(change: CanaryChange) -> View:
    def view(out: TextIO) -> None:
        out.write(f"{printable(change.message)} ({change.action})\n")
        paths(out, "wrote", change.written)
        paths(out, "removed", change.removed)
        if change.action in ("installed", "updated"):
            out.write(f"  timer {change.timer} started; `rigctl status` shows each run's result\n")

    return view


def canary_run(result: RunResult) -> View:
    def view(out: TextIO) -> None:
        for line in result.journal:  # in the service, these lines are the journal's record of the run
            out.write(printable(line, LINE_LIMIT) + "\n")

    return view


def canary_summary(name: str, summary: dict[str, Any] | None) -> View:
    """The canary's state (``history.CanaryState.summary``: its numbers are typed and bounded when read)."""
    def view(out: TextIO) -> None:
        if not summary:
            out.write(f"{name} has no canary; `rigctl canary {name} --every 10m` installs one\n")
            return
        if summary.get("unreadable"):
            out.write(f"canary of {name}: FAILING: its record cannot be read: "
                      f"{printable(summary['unreadable'], LINE_LIMIT)}\n"
                      f"  `rigctl canary {name} --every SPAN ...` writes its settings again\n")
        else:
            out.write(f"canary of {name}: every {summary.get('interval_s')}s, checks "
                      f"{printable(','.join(summary.get('checks') or []))}, on failure {summary.get('on_failure')}\n")
        last = summary.get("last_run_at")
        when = "never" if last is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(last))
        out.write(f"  last run {when}: {summary.get('last_result') or '-'}; "
                  f"{summary.get('consecutive_failures', 0)} failure(s) in a row; restarts {summary.get('restarts')}\n")
        base = summary.get("baseline")
        if base:
            out.write(f"  baseline: {base.get('answers')} answer(s) of {printable(str(base.get('source')))} "
                      f"({printable(str(base.get('date')))})\n")
        if summary.get("last_failure_reason"):
            out.write(f"  last failure: {printable(summary['last_failure_reason'], LINE_LIMIT)}\n")

    return view


def metrics(text: str, path: str | None) -> View:
    def view(out: TextIO) -> None:
        if path is None:
            out.write(text)
            return
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        out.write(f"wrote {printable(path)} ({series} series)\n")

    return view
