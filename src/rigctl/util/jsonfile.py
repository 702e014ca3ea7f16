"""JSON documents read through ``safefs``: bounded, regular files only, strict UTF-8, bounded nesting.

Beside safefs's readers (it would sit in safefs itself, which is shared and not edited here). Every JSON
file rigctl reads — its deployment records, the licence record, the sha256 cache, a captured inventory —
comes through ``load_json``, so a FIFO, a device, a huge file, non-UTF-8 bytes or 100000 nested ``[``
each end in one ``InvalidInputError`` (exit 3) naming the file, never a hang or a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from typing import Any

from rigctl.errors import InvalidInputError
from rigctl.util import safefs

# No document rigctl writes or reads nests deeper than a handful of levels; 64 leaves room for a
# recorded failure's details without letting a hostile file make any consumer recurse deeply.
MAX_DEPTH = 64


class JsonFileError(InvalidInputError):
    """A JSON file that cannot be accepted; ``path`` and ``why`` let a caller reword the one problem."""

    def __init__(self, path: str | os.PathLike[str], why: str, *, fix: str | None = None) -> None:
        self.path = os.fspath(path)
        self.why = why
        super().__init__([f"{self.path}: {why}"], fix=fix)


def _too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` nests containers more than ``limit`` deep (iterative: never recurses itself)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def parse_json(data: bytes, path: str | os.PathLike[str], *, fix: str | None = None) -> Any:
    """Decode strict UTF-8 (``json.loads`` would guess UTF-16/32 from bytes) and parse, nesting bounded."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise JsonFileError(path, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})",
                            fix=fix) from None
    try:
        value = json.loads(text)
    except RecursionError:  # the C decoder gives up on deep nesting long before the stack does
        value = None
        deep = True
    except ValueError as exc:  # JSONDecodeError, and integers too long to convert
        raise JsonFileError(path, f"not JSON: {exc}", fix=fix) from None
    else:
        deep = _too_deep(value, MAX_DEPTH)
    if deep:
        raise JsonFileError(path, f"JSON nested more than {MAX_DEPTH} levels deep; rigctl does not read such files",
                            fix=fix)
    return value


def load_json(path: str | os.PathLike[str], *, limit: int, missing_ok: bool = False, nofollow: bool = False,
              own: bool = False, fix: str | None = None) -> Any:
    """The JSON value in ``path`` (None when missing and ``missing_ok``). A FIFO, device, directory,
    oversized file (or, with ``nofollow``, a symbolic link) is refused without blocking; with ``own`` (rigctl's
    own state or cache), so is a file that fails the trust rule (``safefs.read_own``)."""
    try:
        got = (safefs.read_own(path, limit=limit, missing_ok=missing_ok) if own
               else safefs.read_file(path, limit=limit, nofollow=nofollow, missing_ok=missing_ok))
    except InvalidInputError as exc:
        raise JsonFileError(path, exc.problems[0].removeprefix(f"{os.fspath(path)}: "), fix=fix) from None
    if got is None:
        return None
    return parse_json(got.data, path, fix=fix)


# A cache rigctl keeps for itself: ``{"version": 1, KEY: {name: entry}}`` in one small file of this user's. A
# damaged file or entry counts as absent (the cache only saves work), and one that cannot be written only costs
# that work again next time.
CACHE_VERSION = 1


def load_cache_map(path: str | os.PathLike[str], key: str,
                   sound: Callable[[Any], bool] = lambda entry: isinstance(entry, dict)) -> dict[str, dict[str, Any]]:
    """The cache's entries under ``key`` that pass ``sound``; {} where the file is missing, damaged, another
    version's, or fails the trust rule."""
    try:
        raw = load_json(path, limit=safefs.RECORD_LIMIT, missing_ok=True, own=True)
    except InvalidInputError:
        raw = None
    entries = raw.get(key) if isinstance(raw, dict) and raw.get("version") == CACHE_VERSION else None
    return {k: v for k, v in entries.items() if isinstance(k, str) and sound(v)} if isinstance(entries, dict) else {}


def save_cache_map(path: str | os.PathLike[str], key: str, entries: dict[str, dict[str, Any]], *,
                   mode: int = 0o644) -> None:
    with contextlib.suppress(OSError, InvalidInputError):
        safefs.write_own(path, json.dumps({"version": CACHE_VERSION, key: entries}, allow_nan=False,
                                          separators=(",", ":")), mode=mode)
