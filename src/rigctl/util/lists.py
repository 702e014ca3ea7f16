"""The one rule for options that take a list: ``--gpus 0,2``, ``--force a --force b,c``, ``--checks x,y``,
``--tag``, ``--only``, ``--accept-license``.

Every such option may be repeated and each value may hold several items separated by commas; the items
are taken in the order given, blanks around them stripped, empty ones (``a,,b``, a trailing comma)
dropped. An item given twice is refused: it is almost always a typo (``--gpus 0,0`` meant ``0,1``), and
taking it once would hide that. Before this module each command split its lists itself, and the copies
disagreed on exactly these points.
"""

from __future__ import annotations

from collections.abc import Iterable

from rigctl.errors import UsageError


def split_list(values: str | Iterable[str] | None, *, option: str) -> tuple[str, ...]:
    """The items of a list option (``values``: one value, the values of a repeated option, or None when
    it was not given), in order; () when there are none. ``option`` names it in the refusal."""
    if values is None:
        return ()
    given = [values] if isinstance(values, str) else list(values)
    items: list[str] = []
    for value in given:
        for piece in value.split(","):
            item = piece.strip()
            if not item:
                continue
            if item in items:
                raise UsageError(f"{option}: {item!r} is given twice",
                                 fix=f"name each item of {option} once (comma-separated or the option repeated)")
            items.append(item)
    return tuple(items)
