"""The edits a rule proposes, as plain values: what ``--fix`` would change is data a reader (and a test)
can look at, and ``apply_edit`` is the one place that changes text.

Every edit goes through ``rigctl.host.unitfile``, which splits at "\\n" only and never writes a line
break a reader would not see.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rigctl.host.unitfile import Entry, join_lines, one_line, parse, remove_entries, remove_option, set_key


@dataclass(frozen=True)
class SetKey:
    """Set a scalar key in one file (rewrite its last assignment there, or add it)."""

    path: str
    section: str
    key: str
    value: str
    after: str | None = None  # add it right after this key, when present


@dataclass(frozen=True)
class Remove:
    """In every file of the unit: delete every assignment of ``key``, or with ``option``, only that podman
    option (and its value) from each assignment of it."""

    section: str
    key: str
    option: str | None = None


@dataclass(frozen=True)
class ReplaceWord:
    """Replace one whole word inside the assignment ``entry`` (found again by re-parsing its file, so
    earlier edits do not shift it)."""

    entry: Entry
    old: str
    new: str

    def __post_init__(self) -> None:
        one_line(self.new)  # refused where the rule runs (and is isolated), never half-way through --fix


Edit = SetKey | Remove | ReplaceWord


def apply_edit(edit: Edit, texts: dict[str, str]) -> None:
    """Apply ``edit`` to ``texts`` ({path: text} of one unit's files), in place."""
    match edit:
        case SetKey(path, section, key, value, after):
            texts[path] = set_key(texts[path], path, section, key, value, after=after)
        case Remove(section, key, option):
            for path, text in list(texts.items()):
                texts[path] = (remove_entries(text, path, section, key) if option is None
                               else remove_option(text, path, section, [key], option))
        case ReplaceWord():
            _replace_word(edit, texts)


def _replace_word(edit: ReplaceWord, texts: dict[str, str]) -> None:
    entry, old = edit.entry, edit.old
    # word edges are systemd's WHITESPACE, never \s (which also matches U+2028, U+3000 ...)
    pattern = re.compile(r"(?<![^ \t\n\r=\"'])" + re.escape(old) + r"(?![^ \t\n\r\"'\\])")
    text = texts[entry.file]
    parsed = parse(entry.file, text)
    for current in parsed.entries:
        if current.section == entry.section and current.key == entry.key and old in current.value:
            lines = list(parsed.lines)  # split at "\n" only, like every reader of the unit
            raw = "\n".join(lines[current.first : current.last + 1])
            key, eq, rest = raw.partition("=")
            rest = pattern.sub(lambda _: edit.new, rest, count=1)  # taken literally, no \1 escapes
            lines[current.first : current.last + 1] = (key + eq + rest).split("\n")
            texts[entry.file] = join_lines(lines)
            return
