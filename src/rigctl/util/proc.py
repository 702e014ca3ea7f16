"""Every subprocess goes through here: one place that returns (rc, stdout, stderr) and formats failures
with the command that produced them."""

from __future__ import annotations

import contextlib
import shlex
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from rigctl.errors import CommandError


@dataclass(frozen=True)
class Completed:
    argv: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0

    def describe(self) -> str:
        detail = (self.stderr or self.stdout).strip()
        tail = "\n".join(detail.splitlines()[-10:])
        return f"`{shlex.join(self.argv)}` exited {self.rc}" + (f":\n{tail}" if tail else "")


def run(
    argv: Sequence[str],
    *,
    timeout: float | None = 60.0,
    env: Mapping[str, str] | None = None,
    input_text: str | None = None,
    check: bool = False,
) -> Completed:
    """Run a command to completion. A missing executable is rc 127, a timeout rc 124, like a shell."""
    args = tuple(argv)
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(env) if env is not None else None,
            input=input_text,
            check=False,
        )
        done = Completed(args, proc.returncode, proc.stdout, proc.stderr)
    except FileNotFoundError as exc:
        done = Completed(args, 127, "", f"{args[0]}: not found ({exc.strerror})")
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        done = Completed(args, 124, out, f"timed out after {timeout}s")
    if check and not done.ok:
        raise CommandError(done.describe())
    return done


CANCELLED = -9  # the rc of a Started command killed by cancel(): no answer, not a failed one


class Started:
    """A command started now and collected later with ``wait`` (what ``run`` would have returned), so
    that a slow command runs while the caller does other work; ``cancel`` kills one no longer wanted.
    The timeout counts from the start, as it would for ``run`` called at that moment. A probe thread may
    be in ``wait`` while the main thread cancels (Ctrl-C): one lock lets only one of them read the pipes
    and reap; ``cancel`` only sends the signal before taking it. A command that cannot be started at all
    (missing, not executable, the wrong architecture) is a result, never an exception."""

    def __init__(self, argv: Sequence[str], *, timeout: float | None = 60.0) -> None:
        self.argv = tuple(argv)
        self.timeout = timeout
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._cancelled = False
        self._done: Completed | None = None
        self._proc: subprocess.Popen[str] | None = None
        try:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True)
        except FileNotFoundError as exc:
            self._done = Completed(self.argv, 127, "", f"{self.argv[0]}: not found ({exc.strerror})")
        except OSError as exc:
            self._done = Completed(self.argv, 126, "", f"{self.argv[0]}: cannot run it ({exc.strerror or exc})")

    def wait(self) -> Completed:
        with self._lock:
            if self._done is not None:
                return self._done
            assert self._proc is not None
            left = None if self.timeout is None else max(0.0, self.timeout - (time.monotonic() - self._started))
            try:
                out, err = self._proc.communicate(timeout=left)
                killed = self._proc.returncode < 0 and self._cancelled
                self._done = (Completed(self.argv, CANCELLED, "", "cancelled") if killed
                              else Completed(self.argv, self._proc.returncode, out, err))
            except subprocess.TimeoutExpired:
                self._proc.kill()
                out, _ = self._proc.communicate()
                self._done = Completed(self.argv, 124, out or "", f"timed out after {self.timeout}s")
            return self._done

    def cancel(self) -> None:
        """Kill the command if it still runs, and reap it (idempotent; safe while another thread waits)."""
        self._cancelled = True
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended between poll() and kill()
                self._proc.kill()
        self.wait()
