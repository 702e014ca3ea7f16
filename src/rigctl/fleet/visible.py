"""Text from another host made safe to show: every control and format character visible, one value on
one line, cut to a bound. Whatever a host answered passes through here before a person (or a line of
the fleet's JSON summary) sees it."""

from __future__ import annotations

import re
from typing import Any

from rigctl.util.text import printable

# Besides what ``printable`` escapes (C0, DEL, C1, the bidi overrides and marks): every other format
# character (Unicode's Cf: zero-width space and joiners, word joiner, invisible operators, BOM, the bidi
# isolates, interlinear annotation, tag characters) and the line and paragraph separators. They are
# invisible, or break a line where a reader sees none, so remote text shows them as escapes too.
_INVISIBLE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
FIELD_LIMIT = 1000  # one remote value on one line of a text view (a message, a path, an error)


def _escape_invisible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _visible(text: str) -> str:
    return _INVISIBLE.sub(_escape_invisible, printable(text, None))


def shown(text: str) -> str:
    """``text`` (from another host) safe to print on this terminal: every control and format character
    shown escaped (ESC -> ``\\x1b``, U+200B -> ``\\u200b``), except the newlines and tabs that lay out
    several lines of text (for the output of a remote command streamed as it is)."""
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join("\t".join(_visible(part) for part in line.split("\t")) for line in lines)


def shown_line(value: object, limit: int = FIELD_LIMIT) -> str:
    """A remote value for a text view: one line whatever it holds (a newline is shown as ``\\x0a``, so
    it can never start a line of its own, such as a forged ``== host`` block), every control and format
    character escaped, cut to ``limit`` characters."""
    text = str(value)
    text = _visible(text[: limit + 1])  # cut first: bounded work
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def tail(text: str, limit: int = 300) -> str:
    """The end of some remote text, for an error message: one line, control characters made visible."""
    text = text.strip()
    return shown_line(text if len(text) <= limit else "..." + text[-limit:], limit + 40)


def brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
