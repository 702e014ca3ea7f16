"""Progress drawn on stderr while a command runs. The core only reports, through small interfaces of its
own: `up` calls ``on_stage(text)`` and ``on_progress(frame)`` (deploy.warmup.WarmupProgress), verify calls a
``verify.report.RunProgress`` (phase/advance/finish), preflight's --checksums a factory of byte counters,
swap ``on_step(step)``. Each is drawn here.

How `up`'s warmup is shown is ``--progress`` (``MODES``): ``live`` redraws one frame in place (a
terminal), ``plain`` writes a line at each stage, at each change of warmup phase and at least every
``PLAIN_EVERY_S`` (a pipe, CI, `ssh host rigctl up`: a ten-minute warmup is not ten silent minutes),
``none`` writes nothing. ``auto`` (the default) is live on a terminal, plain elsewhere, and none with
--json (stdout is the document; a script reads it). With --quiet (``output.quiet``) nothing at all."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli import output
from rigctl.util.text import printable

if TYPE_CHECKING:
    from rigctl.adapters.clock import Clock
    from rigctl.deploy.swap import SwapStep
    from rigctl.deploy.warmup import WarmupProgress as WarmupFrame

MODES = ("auto", "live", "plain", "none")
PLAIN_EVERY_S = 30.0  # the longest a plain display stays silent while the warmup goes on
_COUNT = re.compile(r" \d+/\d+$")  # "loading weights 3/8": the phase is "loading weights"


def progress_mode(mode: str, *, as_json: bool, terminal: bool) -> str:
    """What ``--progress MODE`` comes to here: ``auto`` is live on a terminal, plain elsewhere and none
    with --json; --quiet is none whatever was asked."""
    if mode not in MODES:
        from rigctl.errors import UsageError

        raise UsageError(f"--progress takes {', '.join(MODES)}, not {printable(mode)!r}")
    if output.quiet():
        return "none"
    if mode == "auto":
        return "none" if as_json else "live" if terminal else "plain"
    return mode


def seconds(value: float) -> str:
    """A duration for a progress line, whole seconds and never below 0 (a line read a moment after the
    clock was read is not "-0s" ago)."""
    return f"{max(0, round(value))}s"


class PlainProgress:
    """`up`'s warmup as plain lines on ``stream``: each stage, each new warmup phase, and a line at least
    every ``every_s`` seconds of ``clock`` while the warmup goes on (phase, elapsed against the budget,
    time since the engine's last output, the unit's state, that output)."""

    def __init__(self, clock: Clock, stream: TextIO | None = None, *, every_s: float = PLAIN_EVERY_S) -> None:
        self._clock = clock
        self._stream = stream
        self._every_s = every_s
        self._phase: str | None = None
        self._last: float | None = None  # when the last warmup line was written

    def _write(self, text: str) -> None:
        stream = self._stream or sys.stderr
        stream.write(text + "\n")
        stream.flush()

    def stage(self, text: str) -> None:
        self._write(f"- {printable(text)}")
        self._phase, self._last = None, None  # a new stage: its first frame is written at once

    def progress(self, p: WarmupFrame) -> None:
        now = self._clock.monotonic()
        phase = _COUNT.sub("", p.phase)
        if phase == self._phase and self._last is not None and now - self._last < self._every_s:
            return
        self._phase, self._last = phase, now
        restarts = f", {p.restarts} restart{'' if p.restarts == 1 else 's'}" if p.restarts else ""
        text = (f"  warmup: {printable(p.phase)}, {seconds(p.elapsed_s)} of {p.budget_s}s; "
                f"no output for {seconds(p.since_output_s)} of {p.stall_budget_s}s; "
                f"unit {printable(p.unit_active)}/{printable(p.unit_sub)}{restarts}")
        if p.last_line:
            text += f"\n    | {printable(p.last_line[-140:])}"
        self._write(text)

    def close(self) -> None:
        pass


class LiveDisplay:
    """`up`'s warmup on stderr: the stage lines, then one frame redrawn in place (``mode`` live), plain
    lines (``PlainProgress``, mode plain) or nothing (none); ``mode`` as ``progress_mode`` decides it."""

    def __init__(self, *, mode: str, clock: Clock | None = None) -> None:
        self.mode = "none" if output.quiet() else mode
        self._live: Any = None
        self._plain: PlainProgress | None = None
        if self.mode == "live":
            from rich.console import Console
            from rich.live import Live

            self._console = Console(stderr=True)
            self._live = Live(console=self._console, refresh_per_second=8, transient=True)
            self._live.start()
        elif self.mode == "plain":
            if clock is None:
                from rigctl.adapters.clock import RealClock

                clock = RealClock()
            self._plain = PlainProgress(clock)

    def stage(self, text: str) -> None:
        if self._plain is not None:
            self._plain.stage(text)
        elif self._live is not None:
            self._console.print(f"[dim]- {output.for_rich(text)}[/dim]", highlight=False)

    def progress(self, p: WarmupFrame) -> None:
        if self._plain is not None:
            self._plain.progress(p)
        if self._live is None:
            return
        from rich.text import Text

        frame = Text()
        frame.append(f"{p.phase:<28}", style="bold cyan")
        frame.append(f" {p.elapsed_s:6.1f}s / {p.budget_s}s")
        frame.append(f"   quiet {seconds(p.since_output_s):>4} / {p.stall_budget_s}s", style="dim")
        frame.append(f"   unit {p.unit_active}/{p.unit_sub}", style="dim")
        if p.last_line:
            frame.append("\n  " + printable(p.last_line[-140:]), style="dim")
        self._live.update(frame)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class VerifyProgress:
    """verify's live display on stderr while the needle and the soak run (a ``verify.report.RunProgress``)."""

    def __init__(self) -> None:
        self._quiet = output.quiet()
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            SpinnerColumn(), TextColumn("{task.fields[check]:<6} {task.description}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), console=Console(stderr=True), transient=True,
        )
        self._tasks: dict[str, Any] = {}
        self._started = False

    def phase(self, check: str, description: str, total: int | None = None) -> None:
        if self._quiet:
            return
        if not self._started:
            self._progress.start()
            self._started = True
        task = self._tasks.get(check)
        if task is None:
            self._tasks[check] = self._progress.add_task(description, total=total, check=check)
        else:
            self._progress.reset(task, total=total, description=description)

    def advance(self, check: str, amount: int = 1) -> None:
        if check in self._tasks:
            self._progress.advance(self._tasks[check], amount)

    def finish(self, check: str) -> None:
        task = self._tasks.pop(check, None)
        if task is not None:
            self._progress.remove_task(task)

    def close(self) -> None:
        if self._started:
            self._progress.stop()


def checksum_bar(enabled: bool) -> Callable[[int, int], Callable[[int], None]] | None:
    """A progress bar on stderr for --checksums (a preflight.registry.ProgressFactory); None (no output)
    with --json or --quiet."""
    if not enabled or output.quiet():
        return None

    def factory(total: int, files: int) -> Callable[[int], None]:
        import atexit

        from rich.console import Console
        from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn

        bar = Progress("sha256", BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                       console=Console(stderr=True), transient=True)
        task = bar.add_task("sha256", total=total)
        bar.start()
        done = [0]

        def advance(n: int) -> None:
            bar.advance(task, n)
            done[0] += n
            if done[0] >= total:
                bar.stop()

        atexit.register(bar.stop)  # a failure mid-hash must still restore the terminal
        return advance

    return factory


def swap_step(step: SwapStep) -> None:
    """One line on stderr as each step of a swap ends."""
    output.note(f"- {step.name}: {'ok' if step.ok else 'FAILED'}")
