"""systemd / quadlet unit files: parsing, word splitting, time spans, and line-level edits.

Both quadlet and systemd read the same INI dialect: ``#``/``;`` comment lines, ``[Section]`` headers,
``Key=Value`` with a trailing backslash continuing the line (the backslash becomes a space, and comment
lines inside a continuation are skipped), repeated keys (list keys append, an empty assignment resets
the list; scalar keys: the last one wins), and drop-ins ``NAME.d/*.conf`` applied after the main file
in file-name order. Values are not unquoted here; each key decides how to split its value
(``split_words`` follows systemd's quoting rules).

Nothing here touches the filesystem: callers hand in text and get text back.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

# --- parsing -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Entry:
    """One ``Key=Value`` assignment. ``first``..``last`` are 0-based line indices in ``file`` (more than
    one line when the assignment was continued with a backslash)."""

    file: str
    section: str
    key: str
    value: str
    first: int
    last: int


@dataclass(frozen=True)
class ParsedFile:
    path: str
    lines: tuple[str, ...]
    entries: tuple[Entry, ...]
    sections: tuple[tuple[str, int], ...]  # (name, header line index) in file order


def parse(path: str, text: str) -> ParsedFile:
    lines = tuple(text.splitlines())
    entries: list[Entry] = []
    sections: list[tuple[str, int]] = []
    section = ""
    i = 0
    while i < len(lines):
        raw = lines[i].strip()
        if not raw or raw[0] in "#;":
            i += 1
            continue
        if raw.startswith("[") and raw.endswith("]"):
            section = raw[1:-1].strip()
            sections.append((section, i))
            i += 1
            continue
        first = i
        logical = raw
        while logical.endswith("\\") and i + 1 < len(lines):
            logical = logical[:-1] + " "
            i += 1
            nxt = lines[i].strip()
            # systemd skips comment lines inside a continuation rather than ending it
            while nxt[:1] in ("#", ";") and i + 1 < len(lines):
                i += 1
                nxt = lines[i].strip()
            if nxt[:1] in ("#", ";"):
                break
            logical += nxt
        if logical.endswith("\\"):
            logical = logical[:-1]
        key, sep, value = logical.partition("=")
        if sep and section:
            entries.append(Entry(path, section, key.strip(), value.strip(), first, i))
        i += 1
    return ParsedFile(path, lines, tuple(entries), tuple(sections))


@dataclass(frozen=True)
class MergedUnit:
    """A unit file with its drop-ins applied: every assignment in effect order."""

    files: tuple[ParsedFile, ...]
    entries: tuple[Entry, ...] = field(default=())

    @staticmethod
    def of(main: ParsedFile, dropins: Sequence[ParsedFile] = ()) -> MergedUnit:
        files = (main, *dropins)
        return MergedUnit(files, tuple(e for f in files for e in f.entries))

    def all(self, section: str, key: str) -> list[Entry]:
        """A list key: every assignment in order, restarting after an empty assignment."""
        found: list[Entry] = []
        for entry in self.entries:
            if entry.section == section and entry.key == key:
                if entry.value == "":
                    found = []
                else:
                    found.append(entry)
        return found

    def last(self, section: str, key: str) -> Entry | None:
        """A scalar key: the last assignment wins; an empty one resets to the default (None)."""
        found: Entry | None = None
        for entry in self.entries:
            if entry.section == section and entry.key == key:
                found = entry
        if found is None or found.value == "":
            return None
        return found

    def value(self, section: str, key: str) -> str | None:
        entry = self.last(section, key)
        return entry.value if entry else None

    def words(self, section: str, key: str) -> list[str]:
        """Every assignment of a list key, each split into words, concatenated."""
        return [w for e in self.all(section, key) for w in split_words(e.value)]


# --- quoting -----------------------------------------------------------------------------------------

_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v", "s": " "}


def split_words(value: str) -> list[str]:
    """Split like systemd's extract_first_word(UNQUOTE|CUNESCAPE): whitespace separates words, single
    or double quotes group (and may sit inside a word), backslash escapes the next character."""
    words: list[str] = []
    current: list[str] = []
    in_word = False
    quote: str | None = None
    i = 0
    while i < len(value):
        ch = value[i]
        if ch == "\\" and i + 1 < len(value):
            nxt = value[i + 1]
            current.append(_ESCAPES.get(nxt, nxt))
            in_word = True
            i += 2
            continue
        if quote:
            if ch == quote:
                quote = None
            else:
                current.append(ch)
        elif ch in "'\"":
            quote = ch
            in_word = True
        elif ch.isspace():
            if in_word:
                words.append("".join(current))
                current = []
                in_word = False
        else:
            current.append(ch)
            in_word = True
        i += 1
    if in_word:
        words.append("".join(current))
    return words


def quote_word(word: str) -> str:
    """The inverse of split_words for one word: quote only when needed."""
    if word and not re.search(r"[\s'\"\\]", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


# --- time spans --------------------------------------------------------------------------------------

_UNITS = {
    "us": 1e-6, "usec": 1e-6, "ms": 1e-3, "msec": 1e-3,
    "s": 1.0, "sec": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hr": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
    "w": 604800.0, "week": 604800.0, "weeks": 604800.0,
    "M": 2629800.0, "month": 2629800.0, "months": 2629800.0,
    "y": 31557600.0, "year": 31557600.0, "years": 31557600.0,
}
_SPAN_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)")


def parse_timespan(value: str) -> float | None:
    """systemd time span in seconds: ``90``, ``5min``, ``1h 30min``, ``infinity``. ``0`` and
    ``infinity`` both mean "no timeout" for TimeoutStartSec and come back as math.inf. None when
    the value does not parse (systemd would ignore the assignment)."""
    text = value.strip()
    if text == "infinity":
        return math.inf
    total = 0.0
    pos = 0
    while pos < len(text):
        match = _SPAN_PART.match(text, pos)
        if not match or match.end() == pos:
            return None
        number, unit = match.groups()
        if unit and unit not in _UNITS:
            return None
        total += float(number) * _UNITS.get(unit or "s", 1.0)
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    if not text:
        return None
    return math.inf if total == 0 else total


def format_seconds(seconds: float) -> str:
    if math.isinf(seconds):
        return "infinity"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}min"
    return f"{seconds:g}s"


# --- edits -------------------------------------------------------------------------------------------


def _ensure_newline(text: str) -> str:
    return text if text.endswith("\n") or not text else text + "\n"


def replace_entry(text: str, path: str, entry: Entry, new_line: str | None) -> str:
    """Replace the physical lines of ``entry`` with ``new_line`` (None deletes them)."""
    lines = text.splitlines()
    replacement = [] if new_line is None else [new_line]
    lines[entry.first : entry.last + 1] = replacement
    return _ensure_newline("\n".join(lines) + "\n")


def set_key(text: str, path: str, section: str, key: str, value: str, *, after: str | None = None) -> str:
    """Set a scalar key: rewrite its last assignment in this file, or add it right after the key
    ``after`` when present, else at the end of the section (creating the section before [Install]
    when the file has none)."""
    parsed = parse(path, text)
    mine = [e for e in parsed.entries if e.section == section and e.key == key]
    if mine:
        return replace_entry(text, path, mine[-1], f"{key}={value}")
    lines = text.splitlines()
    anchor = [e for e in parsed.entries if e.section == section and e.key == after] if after else []
    if anchor:
        lines[anchor[-1].last + 1 : anchor[-1].last + 1] = [f"{key}={value}"]
        return _ensure_newline("\n".join(lines) + "\n")
    headers = [(name, idx) for name, idx in parsed.sections if name == section]
    if headers:
        _, start = headers[-1]
        later = [idx for _, idx in parsed.sections if idx > start]
        end = later[0] if later else len(lines)
        insert_at = end
        while insert_at - 1 > start and not lines[insert_at - 1].strip():
            insert_at -= 1  # keep the blank line that separates sections after the new key
        lines[insert_at:insert_at] = [f"{key}={value}"]
    else:
        install = [idx for name, idx in parsed.sections if name == "Install"]
        block = [f"[{section}]", f"{key}={value}", ""]
        if install:
            lines[install[0] : install[0]] = block
        else:
            if lines and lines[-1].strip():
                lines.append("")
            lines.extend(block[:-1])
    return _ensure_newline("\n".join(lines) + "\n")


def remove_entries(text: str, path: str, section: str, key: str) -> str:
    parsed = parse(path, text)
    for entry in reversed([e for e in parsed.entries if e.section == section and e.key == key]):
        text = replace_entry(text, path, entry, None)
    return text


def option_pattern(option: str, takes_value: bool = True) -> re.Pattern[str]:
    """A podman option with its value inside a raw command line: ``--opt=v``, ``--opt v``,
    ``--opt "v w"``. Continuation backslashes and line breaks count as whitespace."""
    ws = r"(?:\s|\\\n)+"
    value = r"(?:=|" + ws + r")(?:\"[^\"]*\"|'[^']*'|[^\s\\]+)" if takes_value else ""
    # the option may follow whitespace or the `Key=` of the assignment itself
    return re.compile(r"(?<![^\s=])" + re.escape(option) + value + r"(?![^\s\\])")


def remove_option(text: str, path: str, section: str, keys: Iterable[str], option: str) -> str:
    """Delete ``option`` (and its value) from every assignment of ``keys`` in this file. An assignment
    left with no value is dropped."""
    pattern = option_pattern(option)
    bare = option_pattern(option, takes_value=False)
    parsed = parse(path, text)
    wanted = set(keys)
    for entry in reversed([e for e in parsed.entries if e.section == section and e.key in wanted]):
        raw = "\n".join(text.splitlines()[entry.first : entry.last + 1])
        new = pattern.sub("", raw)
        new = bare.sub("", new)
        if new == raw:
            continue
        # tidy: whitespace runs left behind, and continued lines that now hold nothing
        new_lines = [re.sub(r"(?<=\S)[ \t]{2,}", " ", ln).rstrip() for ln in new.split("\n")]
        new_lines = [ln for ln in new_lines if ln.strip() not in ("\\",)]
        if new_lines and new_lines[-1].endswith("\\"):
            new_lines[-1] = new_lines[-1][:-1].rstrip()
        joined = re.sub(r"^([^=]*=)[ \t]+", r"\1", "\n".join(new_lines))
        _, _, v = joined.partition("=")
        if not v.strip():
            text = replace_entry(text, path, entry, None)
        else:
            lines = text.splitlines()
            lines[entry.first : entry.last + 1] = joined.split("\n")
            text = _ensure_newline("\n".join(lines) + "\n")
    return text


def replace_in_entry(text: str, path: str, entry: Entry, old: str, new: str) -> str:
    """Replace the first occurrence of ``old`` inside the raw lines of ``entry``."""
    lines = text.splitlines()
    raw = "\n".join(lines[entry.first : entry.last + 1])
    if old not in raw:
        return text
    lines[entry.first : entry.last + 1] = raw.replace(old, new, 1).split("\n")
    return _ensure_newline("\n".join(lines) + "\n")
