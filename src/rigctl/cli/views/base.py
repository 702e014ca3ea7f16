"""What every view shares: the style of each severity, the one table, and a line in colour or not.

Colour is for a terminal (or ``FORCE_COLOR``): there rich draws; anywhere else the same content is plain
text, without loading rich (its start-up would cost about as much as the rest of a command).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any, TextIO

from rigctl.cli import plaintable
from rigctl.findings import Severity

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


def in_colour(out: TextIO) -> bool:
    return out.isatty() or bool(os.environ.get("FORCE_COLOR"))


def _text(cell: Cell) -> Any:
    from rich.text import Text  # rich loads only when a view draws in colour

    if isinstance(cell, str):
        return Text(cell)  # Text, not markup: a "[/]" in a GPU name is shown, never read as a style
    text, style = cell
    return Text(text, style=STYLE[style] if isinstance(style, Severity) else (style or ""))


def _plain(cell: Cell) -> str:
    return cell if isinstance(cell, str) else cell[0]


def console(out: TextIO, width: int | None = None) -> Any:
    from rich.console import Console

    return Console(file=out, width=width, emoji=False, highlight=False, soft_wrap=False)


def table(out: TextIO, headers: Sequence[str], rows: Sequence[Sequence[Cell]], *, title: str | None = None,
          width: int | None = None) -> None:
    """Rows under headers: rich's table in colour, ``plaintable``'s columns otherwise (wrapped, never cut).
    Cells must already be printable (``printable``); nothing here reads markup."""
    if not in_colour(out):
        out.write(plaintable.render(headers, [[_plain(c) for c in row] for row in rows], title=title,
                                    width=width or plaintable.WIDTH))
        return
    from rich.table import Table

    grid = Table(*headers, title=None if title is None else _text(title), show_lines=False)
    for row in rows:
        grid.add_row(*(_text(c) for c in row))
    console(out, width).print(grid)


def line(out: TextIO, *parts: Cell) -> None:
    """One line made of pieces, each styled in colour; plain text otherwise."""
    if not in_colour(out):
        out.write("".join(_plain(p) for p in parts) + "\n")
        return
    from rich.text import Text

    console(out).print(Text.assemble(*(_text(p) for p in parts)))
