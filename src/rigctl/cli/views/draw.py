"""What every view shares: the style of each severity, the one table, and a line in colour or not.

Colour is for a terminal (or ``FORCE_COLOR``): there rich draws; anywhere else the same content is plain
text, without loading rich (its start-up would cost about as much as the rest of a command). A terminal
whose TERM says it is ``dumb`` (or ``unknown``: Emacs' shell, some CI log pages) gets the plain text too:
rich would draw it no colour. Either way a table is as wide as ``columns`` says: COLUMNS when it is set (in
a file or a pipe too), else the terminal's width, else ``plaintable.WIDTH``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from rigctl.cli import plaintable
from rigctl.severity import Severity
from rigctl.util.text import columns as text_columns
from rigctl.util.text import printable

View = Callable[[TextIO], None]

STYLE: dict[Severity, str] = {
    Severity.OK: "green",
    Severity.INFO: "cyan",
    Severity.SKIP: "dim",
    Severity.WARN: "yellow",
    Severity.FAIL: "bold red",
    Severity.ERROR: "bold magenta",
}

# A styled piece of text: (text, rich style) or (text, the severity whose style it takes); None: unstyled.
Styled = tuple[str, str | Severity | None]
Cell = str | Styled


DUMB_TERMS = {"dumb", "unknown"}  # what rich takes for a terminal that shows no colour


def _dumb() -> bool:
    return os.environ.get("TERM", "").lower() in DUMB_TERMS


def in_colour(out: TextIO) -> bool:
    """FORCE_COLOR, or a terminal that shows colour."""
    return bool(os.environ.get("FORCE_COLOR")) or (out.isatty() and not _dumb())


def _text(cell: Cell) -> Any:
    from rich.text import Text  # rich loads only when a view draws in colour

    if isinstance(cell, str):
        return Text(cell)  # Text, not markup: a "[/]" in a GPU name is shown, never read as a style
    text, style = cell
    return Text(text, style=STYLE[style] if isinstance(style, Severity) else (style or ""))


def _plain(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def columns(out: TextIO) -> int:
    """COLUMNS, else the width of the terminal ``out`` is, else ``plaintable.WIDTH``."""
    return text_columns(out, plaintable.WIDTH)


def console(out: TextIO, width: int | None = None) -> Any:
    """rich's console on ``out``, ``width`` (default ``columns``) wide. The height is given too: with a width
    alone rich takes a dumb TERM's size, 80 columns, and squeezed a table laid out wider (its result column
    came out empty). FORCE_COLOR colours even there, as it asks; rich alone would leave it plain."""
    from rich.console import Console

    forced = bool(os.environ.get("FORCE_COLOR")) and _dumb()
    return Console(file=out, width=width or columns(out), height=25, color_system="standard" if forced else "auto",
                   emoji=False, highlight=False, soft_wrap=False)


def table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, title: str | None = None,
          width: int | None = None, below: Sequence[str | None] | None = None, keep: int = 0,
          minimum: Sequence[int] | None = None) -> None:
    """Rows under headers, at most ``width`` (default ``columns``) wide: rich's table in colour,
    ``plaintable``'s columns otherwise; wrapped, never cut, a backtick span (a command to copy) never
    broken. ``below``: a text for each row (or None) on full lines of its own: under its row in plain
    text, under the table in colour (a rich table cannot span a line across its columns). The first
    ``keep`` columns are never narrowed (ids); ``minimum``: the narrowest each column is made, where its
    cells are that wide (``plaintable.floors``). Cells must already be printable (``printable``); nothing
    here reads markup."""
    width = width or columns(out)
    if not in_colour(out):
        out.write(plaintable.render(headers, [[_plain(c) for c in row] for row in rows], title=title, width=width,
                                    below=below, keep=keep, minimum=minimum))
        return
    from rich.table import Table
    from rich.text import Text

    plain = [[_plain(c) for c in row] for row in rows]
    natural = plaintable.natural(headers, plain)
    # rich's box and padding take three characters a column, and one more
    widths = plaintable.fit(natural, max(len(headers), width - 3 * len(headers) - 1),
                            plaintable.floors(headers, plain, keep, minimum))
    grid = Table(title=None if title is None else _text(title), show_lines=False)
    for header, w in zip(headers, widths, strict=True):
        grid.add_column(header, width=w, no_wrap=True)  # wrapped here, as plaintable does: spans stay whole
    for row in rows:
        grid.add_row(*(_styled("\n".join(plaintable.wrap(_plain(c), w)), c)
                       for c, w in zip(row, widths, strict=True)))
    shown = console(out, max(width, sum(widths) + 3 * len(headers) + 1))
    shown.print(grid)
    for row, extra in zip(rows, below or [None] * len(rows), strict=True):
        if extra:  # wrapped within the width as in plain text; a command to copy stays whole on its line
            for part in plaintable.hanging(extra, width, first=f"{_plain(row[0])} ", rest="    "):
                shown.print(Text(part), soft_wrap=True)


def _styled(text: str, cell: Cell) -> Any:
    return _text(text if isinstance(cell, str) else (text, cell[1]))


def line(out: TextIO, *parts: Cell) -> None:
    """One line made of pieces, each styled in colour; plain text otherwise."""
    if not in_colour(out):
        out.write("".join(_plain(p) for p in parts) + "\n")
        return
    from rich.text import Text

    console(out).print(Text.assemble(*(_text(p) for p in parts)))


def paths(out: TextIO, verb: str, names: Sequence[str], note: str = "") -> None:
    """One indented line per file a command wrote or removed: ``  removed PATH (canary)``."""
    for name in names:
        out.write(f"  {verb} {printable(name)}{f' ({note})' if note else ''}\n")


def overhead(out: TextIO, count: int) -> int:
    """What a table of ``count`` columns takes beyond its cells: rich's box and padding in colour (three
    characters a column, and one more), the gaps between columns otherwise."""
    return 3 * count + 1 if in_colour(out) else len(plaintable.GAP) * (count - 1)


def prose(out: TextIO, text: str, *, first: str = "", rest: str | None = None, width: int | None = None) -> None:
    """A sentence for a person, wrapped within ``width`` (default ``columns``) after ``first`` on its first
    line and ``rest`` (default: as much space as ``first``) on the others; a backtick span is never broken."""
    follow = " " * len(first) if rest is None else rest
    for part in plaintable.hanging(text, width or columns(out), first=first, rest=follow):
        out.write(part + "\n")


def last_column(out: TextIO, cells: str, text: str, *, width: int | None = None) -> None:
    """A row of a list whose last column is prose: ``cells`` (the other columns, laid out, with the gap
    after them), then ``text`` wrapped within ``width`` (default ``columns``), its later lines under its
    first; where that leaves the prose less than ``plaintable.READABLE`` twice over, it goes on lines of
    its own under the row."""
    room = width or columns(out)
    if room - len(cells) >= 2 * plaintable.READABLE:
        prose(out, text, first=cells, width=room)
        return
    out.write(cells.rstrip() + "\n")
    prose(out, text, first="    ", width=room)


def paragraph(out: TextIO, label: Cell, text: str, *, width: int | None = None) -> None:
    """``label: text`` as prose wrapped within ``width`` (default ``columns``), its later lines indented
    under the text; a backtick span (a command to copy) is never broken, so only a span longer than the
    room makes a line longer."""
    name = _plain(label)
    indent = " " * (len(name) + 2)
    lines = plaintable.hanging(text, width or columns(out), first=indent, rest=indent)
    line(out, label, f": {lines[0][len(indent):]}")
    for rest in lines[1:]:
        line(out, rest)


def duration(seconds: float) -> str:
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"
