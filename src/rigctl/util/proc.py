"""Every subprocess goes through here: one place that returns (rc, stdout, stderr) and formats failures
with the command that produced them."""

from __future__ import annotations

import shlex
import subprocess
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
