"""Progress drawn on stderr while a command runs. The core only reports, through small interfaces of its
own: `up` calls ``on_stage(text)`` and ``on_progress(frame)`` (deploy.warmup.Progress), verify calls a
``verify.report.Progress`` (phase/advance/finish), preflight's --checksums a factory of byte counters,
swap ``on_step(step)``. Each is drawn here; with --json (or no terminal) nothing is drawn but stage lines,
and with --quiet (``output.quiet``) nothing at all."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rigctl.cli import output

if TYPE_CHECKING:
    from rigctl.deploy.swap import SwapStep
    from rigctl.deploy.warmup import Progress as WarmupFrame


class LiveDisplay:
    """`up`'s warmup on stderr: the stage lines, then phase, elapsed against the budget, time since the last
    output line, the unit's state and that line."""

    def __init__(self, *, enabled: bool, quiet: bool) -> None:
        self.quiet = quiet or output.quiet()
        self._live: Any = None
        if enabled and not self.quiet:
            from rich.console import Console
            from rich.live import Live

            self._console = Console(stderr=True)
            self._live = Live(console=self._console, refresh_per_second=8, transient=True)
            self._live.start()

    def stage(self, text: str) -> None:
        if self.quiet:
            return
        if self._live is not None:
            self._console.print(f"[dim]- {text}[/dim]", highlight=False)
        else:
            sys.stderr.write(f"- {text}\n")

    def progress(self, p: WarmupFrame) -> None:
        if self._live is None:
            return
        from rich.text import Text

        frame = Text()
        frame.append(f"{p.phase:<28}", style="bold cyan")
        frame.append(f" {p.elapsed_s:6.1f}s / {p.budget_s}s")
        frame.append(f"   quiet {p.since_output_s:4.0f}s / {p.stall_budget_s}s", style="dim")
        frame.append(f"   unit {p.unit_active}/{p.unit_sub}", style="dim")
        if p.last_line:
            frame.append("\n  " + p.last_line[-140:], style="dim")
        self._live.update(frame)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None


class VerifyProgress:
    """verify's live display on stderr while the needle and the soak run (a ``verify.report.Progress``)."""

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
    """A progress bar on stderr for --checksums (a preflight.runner.ProgressFactory); None (no output)
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
