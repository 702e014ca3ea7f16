"""JSON an engine sent, read under bounds: the one parser for every answer verify and the readiness probe read
(/v1/models, /props, /tokenize, completions, stream chunks, error bodies), and the one rule for the figures
taken from it.

``json.loads`` alone is not safe on a hostile answer: it recurses once per level of nesting (100,000 ``[`` end in
a RecursionError), reads any run of digits as an int (a number longer than 4,300 digits is a ValueError, and a
300-digit one would be printed whole), and reads ``NaN``, ``Infinity`` and ``1e999`` as floats no figure may be.
``parse`` measures the nesting first (in time linear in the text, without recursion), reads a number of more than
``MAX_DIGITS`` digits as an inexact float and every non-finite number as null; whatever it refuses is an
``EngineJSONError`` whose message is a plain sentence, for a finding. ``as_count`` bounds a figure to
``FIGURE_LIMIT`` and ``figure_text`` prints one short.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

MAX_DEPTH = 64  # levels of nesting read; engines' answers use fewer than ten
MAX_DIGITS = 20  # the longest integer read as an int (a figure past FIGURE_LIMIT is clipped anyway)
FIGURE_LIMIT = 10**12  # the largest count believed as a number: past it, a figure reads "over 10^12"

_NOT_BRACKET = re.compile(r"[^\[\]]++")
_JUNCTION = re.compile(r"(\]++)(\[++)")  # a level closed, then others opened: "]]][["
_QUOTE = '"'


class EngineJSONError(ValueError):
    """An answer that is not JSON rigctl reads; the message says why in plain words."""


def nesting_problem(text: str, limit: int = MAX_DEPTH) -> str | None:
    """Why ``text`` nests deeper than ``limit`` levels, or None, in a few passes that each run at C speed.

    Strings are set aside first (a bracket in one is text): escapes go (``\\\\`` first, so ``\\"`` is one),
    then every other piece between quotes is a string. What stays of the rest is its brackets, all one kind.
    The deepest level is the largest count of opened minus closed brackets at any point; it does not change
    when a close-then-open run ``]^a[^b`` becomes ``]^(a-b)`` or ``[^(b-a)`` (``][`` goes), and each pass
    halves the number of such runs at least, until the skeleton is ``[^b]^c``: b is the depth."""
    no_escapes = text.replace("\\\\", "").replace('\\"', "")
    outside = "".join(no_escapes.split(_QUOTE)[::2])
    skeleton = _NOT_BRACKET.sub("", outside.replace("{", "[").replace("}", "]"))
    for _ in range(64):  # runs halve each pass: 64 passes end any text a str can hold
        if len(skeleton) <= limit:
            return None
        for _ in range(8):  # the cheap case first: "][" goes at C speed (a run of k takes k passes)
            skeleton = skeleton.replace("][", "")
        if "][" not in skeleton:
            break
        skeleton = _JUNCTION.sub(_merge, skeleton)
    depth = len(skeleton) - len(skeleton.lstrip("["))
    return f"nested deeper than {limit} levels" if depth > limit else None


def _merge(run: re.Match[str]) -> str:
    closed, opened = len(run.group(1)), len(run.group(2))
    return "]" * (closed - opened) if closed >= opened else "[" * (opened - closed)


def _integer(digits: str) -> int | float | None:
    if len(digits.lstrip("-")) <= MAX_DIGITS:
        return int(digits)
    return _finite(float(digits))  # inexact, bounded; a number past a float's range is no number


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _number(text: str) -> float | None:
    return _finite(float(text))


def parse(text: str | bytes, what: str = "the answer") -> Any:
    """``text`` as JSON, under the bounds of this module's docstring; EngineJSONError names ``what`` and why."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    problem = nesting_problem(text)
    if problem is not None:
        raise EngineJSONError(f"{what} is JSON {problem}")
    try:
        return json.loads(text, parse_int=_integer, parse_float=_number, parse_constant=lambda _: None)
    except json.JSONDecodeError as exc:
        raise EngineJSONError(f"{what} is not JSON ({exc.msg} at character {exc.pos})") from None
    except (ValueError, RecursionError):  # defensive: the nesting was measured, the numbers bounded
        raise EngineJSONError(f"{what} is not JSON rigctl can read") from None


def parse_or_none(text: str | bytes) -> Any:
    """``parse``, with None for an answer it refuses (where "no answer" is what a refusal means)."""
    try:
        return parse(text)
    except EngineJSONError:
        return None


def as_count(value: object) -> int | None:
    """A non-negative count from an engine's JSON, or None: a bool, text, a negative or non-finite number is
    no count. A count past FIGURE_LIMIT is clipped to it, so that no figure grows without bound."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value < 0:
        return None
    return FIGURE_LIMIT if value >= FIGURE_LIMIT else int(value)


def figure_text(n: int) -> str:
    """A count as a report shows it: ``131,072``; a clipped one as ``over 10^12``."""
    return "over 10^12" if n >= FIGURE_LIMIT else f"{n:,}"
