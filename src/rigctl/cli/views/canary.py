"""What `canary` and `metrics` print for a person."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.views.draw import View, duration, paths, prose
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
            # the checks as `rigctl canary NAME --every` listed them when it installed the canary
            checks = [*(summary.get("checks") or []), *(["baseline"] if summary.get("baseline") else [])]
            out.write(f"canary of {name}: every {summary.get('interval_s')}s, checks "
                      f"{printable(','.join(checks))}, on failure {summary.get('on_failure')}\n")
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


def _when(at: object, fmt: str = "%Y-%m-%d %H:%M:%S") -> str:
    return time.strftime(fmt, time.localtime(at)) if isinstance(at, int | float) else "?"


def canary_lines(out: TextIO, c: dict[str, Any]) -> None:
    """The canary under its deployment in `status` (``history.CanaryState.summary``), each line wrapped at the
    width: its interval and last run, why it fails its deployment (unreadable, stale, its last run), the
    restarts it made, and its last failure with its time, said as past once a run passed since."""

    if c.get("unreadable"):
        prose(out, f"cannot be read (counts as failing): {printable(c['unreadable'], LINE_LIMIT)}",
              first="  canary: ", rest="    ")
    every = c.get("interval_s")
    last = c.get("last_run_at")
    when = "never run yet" if last is None else _when(last, "%H:%M:%S")
    head = "FAILING" if c.get("failing") else "ok"
    prose(out, f"{head}, every {duration(every) if every else '?'}  last run {when}  result "
               f"{printable(c.get('last_result') or '-')}  {c.get('consecutive_failures', 0)} failure(s) in a row",
          first="  canary: ", rest="    ")
    if c.get("stale"):
        prose(out, f"STALE: {printable(c.get('stale_reason') or '', LINE_LIMIT)}", first="    ")
    restart = c.get("last_restart")
    if c.get("restarts") and isinstance(restart, dict):
        prose(out, f"restarted {printable(restart.get('unit') or '?')} {c['restarts']} time(s), last at "
                   f"{_when(restart.get('at'))} after {restart.get('after_failures')} failure(s) in a row",
              first="    ")
    if c.get("last_failure_reason"):
        label = "last failure" if c.get("last_failure_current") else "last failure (past, a run passed since)"
        prose(out, f"{label} at {_when(c.get('last_failure_at'))}: "
                   f"{printable(c['last_failure_reason'], LINE_LIMIT)}", first="    ", rest="      ")


def metrics(text: str, path: str | None) -> View:
    def view(out: TextIO) -> None:
        if path is None:
            out.write(text)
            return
        series = sum(1 for line in text.splitlines() if line and not line.startswith("#"))
        out.write(f"wrote {printable(path)} ({series} series)\n")

    return view
