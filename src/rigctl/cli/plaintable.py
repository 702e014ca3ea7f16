"""A table as plain text: what a view prints when its output is not a terminal (a pipe, a file, a CI log).

There, rich would draw the same table without colour, after a start-up that cost about as much as the
rest of a `rigctl preflight` together (importing rich's console and laying out every cell). This draws
the same rows and columns with two spaces between columns, cells wrapped at word boundaries, and the
widest columns narrowed first when the table is wider than ``width``. Cells must already be printable
(``util.text.printable``): nothing here interprets markup or control characters.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

GAP = "  "
WIDTH = 160  # what a report is laid out for when it does not go to a terminal


def fit(natural: Sequence[int], width: int) -> list[int]:
    """Column widths within ``width`` (gaps excluded): the natural ones if they fit, otherwise the widest
    columns cut to one common width so that the narrow ones (ids, results) stay whole."""
    if sum(natural) <= width:
        return list(natural)
    left, cap = width, 0
    ordered = sorted(natural)
    for i, w in enumerate(ordered):
        remaining = len(ordered) - i
        if w * remaining > left:
            cap = max(1, left // remaining)
            break
        left -= w
    widths = [min(w, cap) for w in natural]
    spare = width - sum(widths)
    for i, w in enumerate(natural):  # what the division left over goes to the first cut columns
        if spare <= 0:
            break
        if w > widths[i]:
            widths[i] += 1
            spare -= 1
    return widths


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None,
           width: int = WIDTH) -> str:
    """The table as lines of text, each at most ``width`` characters, ending in a newline."""
    natural = [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    widths = fit(natural, max(len(headers), width - len(GAP) * (len(headers) - 1)))
    lines = [title] if title else []

    def emit(cells: Sequence[str]) -> None:
        wrapped = [textwrap.wrap(cell, w, break_on_hyphens=False) or [""] for cell, w in zip(cells, widths,
                                                                                            strict=True)]
        for n in range(max(len(w) for w in wrapped)):
            parts = [(w[n] if n < len(w) else "").ljust(cw) for w, cw in zip(wrapped, widths, strict=True)]
            lines.append(GAP.join(parts).rstrip())

    emit(headers)
    lines.append(GAP.join("-" * w for w in widths))
    for row in rows:
        emit(row)
    return "\n".join(lines) + "\n"
