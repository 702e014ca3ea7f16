"""The one renderer. A command hands over an Outcome; it becomes one JSON object on stdout (``--json``,
through ``util.jsonable``: results stay typed until here) or text for a person (its view, from
``cli.views``). Core functions never print; this module and the views are the only writers.

How much a person is told is decided here too, once per run, from the root's ``--quiet``/``--verbose``
(``set_verbosity``): quiet keeps stdout to the artefact or the result lines (``Outcome.quiet_view`` where
a command has a shorter one) and stderr to errors and warnings, so every note and progress line goes
through ``note`` (or asks ``quiet()``) and every warning through ``warn``; verbose shows each command
rigctl starts, from the one place every subprocess passes through (Python's ``subprocess.Popen`` audit
event), whichever layer starts it."""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from rigctl.errors import InvalidInputError, RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.invocation import take_distrusted
from rigctl.util.jsonable import jsonable
from rigctl.util.text import CELL_LIMIT, LINE_LIMIT, SCHEMA_VERSION, envelope, printable

__all__ = [
    "CELL_LIMIT", "LINE_LIMIT", "SCHEMA_VERSION", "Outcome", "emit", "emit_error", "envelope", "for_rich", "note",
    "printable", "quiet", "set_verbosity", "warn",
]


@dataclass
class Verbosity:
    quiet: bool = False  # --quiet: the artefact or result lines, and errors; no notes, no progress
    verbose: bool = False  # --verbose: also every command rigctl starts, on stderr


LEVEL = Verbosity()
# Each user recipe this run took in place of a bundled one of its name: said on stderr when loaded, and
# in the JSON envelope as ``recipe_overrides`` (reset on every run, with the verbosity).
OVERRIDES: list[dict[str, str]] = []
_HOOKED = [False]  # the audit hook is process-wide and cannot be removed: added once, it follows LEVEL


def set_verbosity(*, quiet: bool, verbose: bool) -> None:
    """What the root options asked for, for the whole run (reset on every run: tests run many in one
    process)."""
    LEVEL.quiet, LEVEL.verbose = quiet, verbose
    OVERRIDES.clear()
    if verbose and not _HOOKED[0]:
        sys.addaudithook(_show_command)
        _HOOKED[0] = True


def quiet() -> bool:
    return LEVEL.quiet


def note(text: str) -> None:
    """A line for a person that is not the command's result (a note, a warning, a progress step): on
    stderr, so stdout stays the artefact, and not at all with --quiet."""
    if not LEVEL.quiet:
        sys.stderr.write(text if text.endswith("\n") else text + "\n")
        sys.stderr.flush()


def recipe_override(name: str, path: str, bundled: str) -> None:
    """Say that recipe ``name`` is the user's file ``path``, not the bundled ``bundled``: on stderr at
    once (with --quiet too: it changes what is deployed), and in this run's JSON."""
    OVERRIDES.append({"name": name, "path": path, "overrides": bundled})
    warn(f"rigctl: recipe {printable(name, 80)} is {printable(path, LINE_LIMIT)}, a user recipe that overrides the "
         f"bundled one ({printable(bundled, LINE_LIMIT)}); pass the bundled file's path to use it instead")


def _with_overrides(payload: dict[str, Any]) -> dict[str, Any]:
    return {**payload, "recipe_overrides": list(OVERRIDES)} if OVERRIDES else payload


def warn(text: str) -> None:
    """A warning for a person (something may be wrong with the result): on stderr, with --quiet too.
    Quiet leaves out what is only informative (notes, progress), never what the reader should act on."""
    sys.stderr.write(text if text.endswith("\n") else text + "\n")
    sys.stderr.flush()


def _show_command(event: str, args: tuple[Any, ...]) -> None:
    """--verbose: ``+ argv`` on stderr for each process rigctl starts (podman, systemctl, ssh, quadlet...),
    from whichever thread or layer starts it. The words are quoted as a shell would need them, with any
    control character made visible."""
    if event != "subprocess.Popen" or not LEVEL.verbose:
        return
    argv = args[1] if len(args) > 1 else args[0]
    words = [argv] if isinstance(argv, str | bytes) else list(argv or ())
    shown = shlex.join(w.decode(errors="replace") if isinstance(w, bytes) else str(w) for w in words)
    try:
        sys.stderr.write(f"+ {printable(shown, LINE_LIMIT)}\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed: verbose output is never worth a failure
        pass


@dataclass
class Outcome:
    """What a command produced: ``payload`` (a dict, or a typed result whose JSON is an object) is merged
    into the JSON envelope; ``view`` (one of ``cli.views``) renders text."""

    command: str
    ok: bool
    payload: Any = field(default_factory=dict)
    view: Callable[[TextIO], None] | None = None
    exit_code: ExitCode | None = None
    quiet_view: Callable[[TextIO], None] | None = None  # with --quiet, when the command has a shorter result

    def code(self) -> ExitCode:
        if self.exit_code is not None:
            return self.exit_code
        return ExitCode.OK if self.ok else ExitCode.CHECKS_FAILED


def to_json(data: Any) -> str:
    """rigctl's JSON: always strict JSON. A NaN or infinity (which Python's json would write as the
    non-JSON ``NaN``/``Infinity``) is an error here, never output; remote answers refuse them on entry."""
    return json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False) + "\n"


def for_rich(value: object, limit: int | None = CELL_LIMIT) -> str:
    """``printable``, with rich's markup escaped too: ``[/]`` in a GPU name must not end a style (or
    raise MarkupError) and ``[link=...]`` must not make a link."""
    from rich.markup import escape  # noqa: PLC0415 - rich loads only for text views

    return escape(printable(value, limit))


def _say_distrusted(error: str = "") -> None:
    """The paths this run did not use because they fail the trust rule: on stderr, a line each (but the
    one the error being printed names already)."""
    for path, line in take_distrusted():
        if path not in error:
            warn(line)


def emit(outcome: Outcome, *, as_json: bool, out: TextIO | None = None) -> int:
    _say_distrusted()
    stream = out or sys.stdout
    if as_json:
        stream.write(to_json(envelope(outcome.command, outcome.ok, _with_overrides(jsonable(outcome.payload)))))
    elif LEVEL.quiet and outcome.quiet_view is not None:
        outcome.quiet_view(stream)
    elif outcome.view is not None:
        outcome.view(stream)
    stream.flush()
    return int(outcome.code())


def emit_error(command: str, err: RigctlError, *, as_json: bool) -> int:
    _say_distrusted(err.message)
    if as_json:
        error: dict[str, Any] = {"code": err.code, "message": err.message}
        if isinstance(err, InvalidInputError):
            error["problems"] = err.problems
        if err.fix:
            error["fix"] = err.fix
        sys.stdout.write(to_json(envelope(command, False, _with_overrides({"error": error}))))
        sys.stdout.flush()
    else:
        lines = [printable(line, LINE_LIMIT) for line in err.message.splitlines()] or [""]
        sys.stderr.write(f"rigctl {command}: error: {lines[0]}\n")
        for line in lines[1:]:
            sys.stderr.write(f"  {line}\n")
        if err.fix:
            sys.stderr.write(f"  fix: {printable(err.fix, LINE_LIMIT)}\n")
    return int(err.exit_code)
