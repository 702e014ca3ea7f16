"""The edits a rule proposes, as plain values: what ``--fix`` would change is data a reader (and a test)
can look at, and ``apply_edit`` is the one place that changes a unit.

Every edit is applied to the parsed lines of the unit's files (``rigctl.host.unit.UnitEdits``, through
``rigctl.host.unitfile``'s edits), which split at "\\n" only and never write a line break a reader would
not see; the new texts are spelt once, when the plan is made.
"""

from __future__ import annotations

from dataclasses import dataclass

from rigctl.host.unit import UnitEdits
from rigctl.host.unitfile import Entry, one_line, remove_entries, remove_option, replace_word, set_key


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
    """Replace one whole word inside the assignment ``entry`` (found again among the edited lines of its
    file by section, key and the word, so earlier edits do not shift it)."""

    entry: Entry
    old: str
    new: str

    def __post_init__(self) -> None:
        one_line(self.new)  # refused where the rule runs (and is isolated), never half-way through --fix


Edit = SetKey | Remove | ReplaceWord


def apply_edit(edit: Edit, unit: UnitEdits) -> None:
    """Apply ``edit`` to ``unit`` (the parsed files of one unit, as edited so far), in place."""
    files = unit.files
    match edit:
        case SetKey(path, section, key, value, after):
            files[path] = set_key(files[path], section, key, value, after=after)
        case Remove(section, key, option):
            for path, f in list(files.items()):
                files[path] = (remove_entries(f, section, key) if option is None
                               else remove_option(f, section, [key], option))
        case ReplaceWord(entry, old, new):
            files[entry.file] = replace_word(files[entry.file], entry.section, entry.key, old, new)
