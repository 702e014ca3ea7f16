"""The one renderer. A command hands over an Outcome; it becomes one JSON object on stdout (``--json``,
through ``util.jsonable``: results stay typed until here) or text for a person (its view, from
``cli.views``). Core functions never print; this module and the views are the only writers."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from rigctl.errors import InvalidInputError, RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.util.jsonable import jsonable
from rigctl.util.text import CELL_LIMIT, LINE_LIMIT, SCHEMA_VERSION, envelope, printable

__all__ = [
    "CELL_LIMIT", "LINE_LIMIT", "SCHEMA_VERSION", "Outcome", "emit", "emit_error", "envelope", "for_rich", "printable",
]


@dataclass
class Outcome:
    """What a command produced: ``payload`` (a dict, or a typed result whose JSON is an object) is merged
    into the JSON envelope; ``view`` (one of ``cli.views``) renders text."""

    command: str
    ok: bool
    payload: Any = field(default_factory=dict)
    view: Callable[[TextIO], None] | None = None
    exit_code: ExitCode | None = None

    def code(self) -> ExitCode:
        if self.exit_code is not None:
            return self.exit_code
        return ExitCode.OK if self.ok else ExitCode.CHECKS_FAILED


def to_json(data: Any) -> str:
    return json.dumps(jsonable(data), indent=2, sort_keys=False) + "\n"


def for_rich(value: object, limit: int | None = CELL_LIMIT) -> str:
    """``printable``, with rich's markup escaped too: ``[/]`` in a GPU name must not end a style (or
    raise MarkupError) and ``[link=...]`` must not make a link."""
    from rich.markup import escape  # noqa: PLC0415 - rich loads only for text views

    return escape(printable(value, limit))


def emit(outcome: Outcome, *, as_json: bool, out: TextIO | None = None) -> int:
    stream = out or sys.stdout
    if as_json:
        stream.write(to_json(envelope(outcome.command, outcome.ok, jsonable(outcome.payload))))
    elif outcome.view is not None:
        outcome.view(stream)
    stream.flush()
    return int(outcome.code())


def emit_error(command: str, err: RigctlError, *, as_json: bool) -> int:
    if as_json:
        error: dict[str, Any] = {"code": err.code, "message": err.message}
        if isinstance(err, InvalidInputError):
            error["problems"] = err.problems
        if err.fix:
            error["fix"] = err.fix
        sys.stdout.write(to_json(envelope(command, False, {"error": error})))
        sys.stdout.flush()
    else:
        lines = [printable(line, LINE_LIMIT) for line in err.message.splitlines()] or [""]
        sys.stderr.write(f"rigctl {command}: error: {lines[0]}\n")
        for line in lines[1:]:
            sys.stderr.write(f"  {line}\n")
        if err.fix:
            sys.stderr.write(f"  fix: {printable(err.fix, LINE_LIMIT)}\n")
    return int(err.exit_code)
