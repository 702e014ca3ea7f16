"""Text that crosses a trust boundary on its way out: values shown to a terminal, and the JSON envelope
every command prints (and a remote rigctl's answer is checked against)."""

from __future__ import annotations

import os
import re
from typing import Any, TextIO

from rigctl import __version__

VERSION = __version__  # rigctl's own (tests/cli/test_meta_commands.py keeps it equal to the package's metadata)
SCHEMA_VERSION = "1"  # the "rigctl" key of every JSON document; bump on incompatible changes


def envelope(command: str, ok: bool, payload: dict[str, Any]) -> dict[str, Any]:
    """Every JSON document's head. ``version`` says which rigctl wrote it: a fleet reads the remote
    rigctl's from its answer, with no extra call, and warns when it differs from its own. It comes after
    the payload: scripts that read the head in order (schema, command, ok, then the command's own keys)
    keep working."""
    return {"rigctl": SCHEMA_VERSION, "command": command, "ok": ok, **payload, "version": VERSION}


def version_facts() -> dict[str, str]:
    """This rigctl's version and its Python's: `rigctl version`'s JSON (and, beside a host's, `--host`'s)."""
    import platform  # noqa: PLC0415 - only for the version

    return {"version": VERSION, "python": platform.python_version()}


def version_line() -> str:
    """What `rigctl --version` prints."""
    return f"rigctl {VERSION} (Python {version_facts()['python']})"


# What a terminal would act on rather than show, or what a reader cannot see: C0 controls (ESC starts
# CSI/OSC sequences, BEL ends OSC 8 links and OSC 52 clipboard writes), DEL, C1 controls (U+009B is CSI by
# itself, U+0085 is a line break to some readers), every format character (Unicode's Cf: the bidi overrides,
# marks and isolates, zero-width characters, BOM, tag characters), the line and paragraph separators, and a
# lone surrogate (no encoder writes one: printed as it is, it raises UnicodeEncodeError and the view dies).
# Every value a view, the Prometheus text or a journal line carries from a file, NVML, an engine or a remote
# host goes through ``printable`` (and ``for_rich`` where rich parses markup).
_CONTROL = re.compile(
    "[\x00-\x1f\x7f-\x9f\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a"
    "\U000e0001\U000e0020-\U000e007f]"
)
CELL_LIMIT = 200  # a table cell or a value in a line: names, versions, paths
LINE_LIMIT = 4000  # a whole message


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(value: object, limit: int | None = CELL_LIMIT) -> str:
    """``value`` as text safe to print: control characters shown escaped (``\\x1b``), then cut to
    ``limit`` characters (a 100 KB name must not stall or flood a table)."""
    text = str(value)
    text = _CONTROL.sub(_escape, text if limit is None else text[: limit + 1])  # cut first: bounded work
    if limit is not None and len(text) > limit:
        return f"{text[: limit - 1]}…"
    return text


def columns(stream: TextIO | None, default: int) -> int:
    """The width to lay text out for: COLUMNS when set to a positive number (what the shell or a script
    asks for, wherever the output goes), else the width of the terminal ``stream`` is, else ``default``."""
    try:
        wanted = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        wanted = 0
    if wanted > 0:
        return wanted
    try:
        if stream is not None and stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or default
    except (AttributeError, ValueError, OSError):  # no descriptor (a test's StringIO), or a closed stream
        pass
    return default


def counted(n: int, word: str, plural: str | None = None) -> str:
    """``n`` and ``word`` as a count reads: ``1 shard``, ``8 shards`` (``plural`` where adding an s is
    wrong)."""
    return f"{n} {word if n == 1 else plural or word + 's'}"


def clip(text: str, most: int = 60) -> str:
    """``text`` for a message: its repr, cut to about ``most`` characters (a hostile value can be huge)."""
    return repr(text) if len(text) <= most else f"{text[:most]!r}... ({len(text):,} characters)"
