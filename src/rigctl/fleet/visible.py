"""Text from another host made safe to show: every control and format character visible, one value on
one line, cut to a bound. Whatever a host answered passes through here before a person (or a line of
the fleet's JSON summary) sees it."""

from __future__ import annotations

from typing import Any

from rigctl.util.text import printable

FIELD_LIMIT = 1000  # one remote value on one line of a text view (a message, a path, an error)


def _visible(text: str) -> str:
    return printable(text, None)


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
