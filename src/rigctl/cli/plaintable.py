"""A table as plain text: what a view prints when its output is not a terminal (a pipe, a file, a CI log).

There, rich would draw the same table without colour, after a start-up that cost about as much as the
rest of a `rigctl preflight` together (importing rich's console and laying out every cell). This draws
the same rows and columns with two spaces between columns, cells wrapped at word boundaries, and the
widest columns narrowed first when the table is wider than ``width``. Cells must already be printable
(``util.text.printable``): nothing here interprets markup or control characters.

A command the user is to copy is written between backticks (a finding's fix: `podman pull IMAGE@sha256:...`).
Such a span is never broken, neither at its spaces nor inside a word: a column is made at least as wide
as its longest span (``least``), and a view whose spans cannot all fit puts them on full lines of their
own instead (``below``), so the whole command is always on one line, ready to copy.
"""

from __future__ import annotations

from collections.abc import Sequence

GAP = "  "
WIDTH = 160  # what a report is laid out for when neither COLUMNS nor a terminal says otherwise
READABLE = 10  # the narrowest a wrapped column is worth having (``fits``)


def words(text: str) -> list[str]:
    """``text`` split at the spaces outside backtick spans: a word holding a span keeps its spaces. A
    last backtick without a partner is an ordinary character."""
    paired = len(text) if text.count("`") % 2 == 0 else text.rindex("`")
    out: list[str] = []
    current: list[str] = []
    inside = False
    for i, char in enumerate(text):
        if char == "`" and i < paired:
            inside = not inside
        if char == " " and not inside:
            if current:
                out.append("".join(current))
                current = []
            continue
        current.append(char)
    if current:
        out.append("".join(current))
    return out


def spans(word: str) -> bool:
    """Whether ``word`` holds a backtick span (a command to copy whole)."""
    return word.count("`") >= 2


def wrap(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width``, broken at spaces; a longer word is cut into pieces, unless
    it holds a backtick span: that one stays whole on a line of its own (longer than ``width``)."""
    width = max(1, width)
    lines: list[str] = []
    line = ""
    for word in words(text):
        if not line and len(word) <= width:
            line = word
        elif line and len(line) + 1 + len(word) <= width:
            line = f"{line} {word}"
        else:
            if line:
                lines.append(line)
            line = word
            if len(word) > width and not spans(word):
                pieces = [word[i:i + width] for i in range(0, len(word), width)]
                lines += pieces[:-1]
                line = pieces[-1]
    if line or not lines:
        lines.append(line)
    return lines


def hanging(text: str, width: int, *, first: str, rest: str) -> list[str]:
    """``text`` wrapped within ``width``: its first line after ``first``, the others after ``rest`` (a
    label and its indent: ``hint: ...``). Only a backtick span longer than the room overflows it."""
    head = wrap(text, width - len(first))
    if len(head) <= 1:
        return [first + (head[0] if head else "")]
    taken = len(words(head[0]))  # the first line's words; the others fill lines of the rest's room
    return [first + head[0]] + [rest + part for part in wrap(" ".join(words(text)[taken:]), width - len(rest))]


def least(cells: Sequence[str]) -> int:
    """The narrowest a column of ``cells`` can be: its longest word that holds a backtick span (any other
    word may be cut), at least 1."""
    return max([1, *(len(w) for cell in cells for w in words(cell) if spans(w))])


def fit(natural: Sequence[int], width: int, minimum: Sequence[int] | None = None) -> list[int]:
    """Column widths within ``width`` (gaps excluded): the natural ones if they fit, otherwise the widest
    columns cut to one common width so that the narrow ones (ids, results) stay whole, none below its
    ``minimum`` (which wins over ``width`` when they cannot all be had)."""
    floor = list(minimum) if minimum is not None else [1] * len(natural)
    held: dict[int, int] = {}  # columns kept at their minimum
    while True:
        free = [i for i in range(len(natural)) if i not in held]
        shared = _share([natural[i] for i in free], width - sum(held.values()))
        short = [i for i, w in zip(free, shared, strict=True) if w < floor[i]]
        if not short:
            widths = dict(zip(free, shared, strict=True)) | held
            return [widths[i] for i in range(len(natural))]
        held.update({i: floor[i] for i in short})


def _share(natural: Sequence[int], width: int) -> list[int]:
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


def natural(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[int]:
    """Each column's width unwrapped: its header or its widest cell."""
    return [max([len(h), *(len(row[i]) for row in rows)]) for i, h in enumerate(headers)]


def floors(headers: Sequence[str], rows: Sequence[Sequence[str]], keep: int = 0,
           minimum: Sequence[int] | None = None) -> list[int]:
    """Each column's narrowest: the first ``keep`` columns as wide as their widest cell (ids, results:
    never wrapped), any other as its longest backtick span, or ``minimum`` of it where that is more
    (a message column a view wants readable), never more than its widest cell."""
    widest = natural(headers, rows)
    base = [widest[i] if i < keep else least([row[i] for row in rows]) for i in range(len(headers))]
    if minimum is None:
        return base
    return [max(b, min(m, n)) for b, m, n in zip(base, minimum, widest, strict=True)]


def fits(headers: Sequence[str], rows: Sequence[Sequence[str]], width: int, *, keep: int = 0) -> bool:
    """Whether the table fits ``width`` with each column at its floor and every column that wraps at
    least ``READABLE`` wide (a column narrower than that is a stack of fragments)."""
    wanted = [max(f, len(h), READABLE if i >= keep else 0)
              for i, (f, h) in enumerate(zip(floors(headers, rows, keep), headers, strict=True))]
    return sum(wanted) + len(GAP) * (len(headers) - 1) <= width


def render(headers: Sequence[str], rows: Sequence[Sequence[str]], *, title: str | None = None,
           width: int = WIDTH, below: Sequence[str | None] | None = None, keep: int = 0,
           minimum: Sequence[int] | None = None) -> str:
    """The table as lines of text, each at most ``width`` characters (unless the ``floors`` of ``keep``,
    ``minimum`` and the backtick spans need more), ending in a newline. ``below``: for each row, a text
    printed on full lines under it (indented), or None."""
    widest = natural(headers, rows)
    widths = fit(widest, max(len(headers), width - len(GAP) * (len(headers) - 1)),
                 floors(headers, rows, keep, minimum))
    lines = [title] if title else []

    def emit(cells: Sequence[str]) -> None:
        wrapped = [wrap(cell, w) if cell else [""] for cell, w in zip(cells, widths, strict=True)]
        for n in range(max(len(w) for w in wrapped)):
            parts = [(w[n] if n < len(w) else "").ljust(cw) for w, cw in zip(wrapped, widths, strict=True)]
            lines.append(GAP.join(parts).rstrip())

    emit(headers)
    lines.append(GAP.join("-" * w for w in widths))
    for i, row in enumerate(rows):
        emit(row)
        extra = below[i] if below is not None else None
        if extra:
            lines += hanging(extra, width, first="  ", rest="       ")
    return "\n".join(lines) + "\n"
