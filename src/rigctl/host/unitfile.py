"""systemd / quadlet unit files: parsing, word splitting, time spans, drop-in directories, line edits.

The one reader of unit files: doctor audits with it, and ``rigctl status`` finds rigctl's units with it,
so both see the same keys (drop-ins included) that quadlet and systemd see.

Both quadlet and systemd read an INI dialect: ``#``/``;`` comment lines, ``[Section]`` headers,
``Key=Value`` with a trailing backslash continuing the line (comment lines inside a continuation are
skipped), repeated keys (list keys append, an empty assignment resets the list; scalar keys: the last
one wins), and drop-ins ``NAME.d/*.conf`` applied after the main file in file-name order. Values are
not unquoted here; each key decides how to split its value (``split_words`` follows systemd's quoting
rules, which quadlet copies).

The two readers differ in details that decide which keys a file holds, so each file is read the way its
real reader reads it (``quadlet_reads``): quadlet source files (``.container`` ... and their drop-ins)
the way quadlet 5.x does (``pkg/systemd/parser/unitfile.go``), everything else the way systemd does
(``src/shared/conf-parser.c``). What both agree on, and what every parse and edit here relies on
(``unit_lines``): a line ends at ``"\\n"`` and nowhere else. ``str.splitlines()`` would also end lines
at U+0085, U+2028, VT, FF, FS/GS/RS ..., which neither reader does: a value holding such a character
would turn into extra keys here while the real unit has none, and an edit would write them back as
real lines. Likewise whitespace is systemd's ``WHITESPACE`` (" \\t\\n\\r"), never Python's Unicode-aware
``str.strip()`` / ``str.isspace()`` / ``\\s``.

Nothing here touches the filesystem: callers hand in text and get a ParsedFile back, which the edits
take and give (their text spelt once, when asked: ``ParsedFile.text``). The unit a file belongs to, parsed
once with its drop-ins, is ``rigctl.host.unit``'s.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath

# systemd's WHITESPACE; quadlet splits words on the same four characters (WhitespaceSeparators)
WHITESPACE = " \t\n\r"
# Go's unicode.IsSpace (the Unicode White_Space property): quadlet trims every line of a quadlet file
# with strings.TrimSpace, so "\u3000Restart=no" is a Restart= line to quadlet (and to the .service it
# writes) though systemd would read the key "\u3000Restart". Spelled out, not taken from Python.
GO_SPACE = "\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + "\u2028\u2029\u202f\u205f\u3000"
# quadlet trims the key before '=' and the value after it byte by byte with unicode.IsSpace: in valid
# UTF-8 only these ASCII bytes can match there (0x85/0xA0 are continuation bytes, never a whole key end
# that spells an ASCII key)
_QUADLET_KEY_SPACE = "\t\n\v\f\r "
# the files quadlet reads (and their drop-in directories NAME.d / TYPE.d); systemd reads the rest
QUADLET_SUFFIXES = frozenset({".container", ".volume", ".network", ".kube", ".pod", ".image", ".build", ".artifact"})
_BOM = "\ufeff"

# --- lines -------------------------------------------------------------------------------------------


class UnitParseError(ValueError):
    """The file cannot be read without guessing: its real readers disagree on it, or quadlet refuses it."""


# systemd ends a line at "\n", "\r", "\r\n" and NUL (fileio.c read_line); quadlet at "\n" only, keeping
# "\r" and NUL as characters of the line -- and copies them into the .service it writes, where systemd
# then splits there. A bare CR or a NUL therefore hides keys from one reader or the other whichever way
# it is read, so such a file is refused (reported) rather than guessed at. "\r\n" is fine: both end the
# line there (quadlet trims the CR as whitespace).
_AMBIGUOUS_EOL = re.compile(r"\x00|\r(?!\n|\Z)")


def unit_lines(text: str) -> list[str]:
    """The physical lines of a unit file: split at "\\n" only (a trailing CR of "\\r\\n" stays on its
    line, and both readers strip it). Every parse and edit in this module goes through here."""
    bad = _AMBIGUOUS_EOL.search(text)
    if bad:
        line = text.count("\n", 0, bad.start()) + 1
        what = "a NUL byte" if bad.group() == "\x00" else "a carriage return not followed by a newline"
        raise UnitParseError(
            f"line {line} holds {what}: systemd ends a line there and quadlet does not, "
            "so the keys of this file depend on who reads it"
        )
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline that ends the last line opens no new one
    return lines


def lines_with_ends(text: str) -> list[str]:
    """The physical lines with their "\n" kept (the last one may have none): for diffs."""
    return re.findall(r"[^\n]*\n|[^\n]+\Z", text)


def join_lines(lines: Sequence[str]) -> str:
    """The inverse of ``unit_lines``: every line ends with "\\n"."""
    return "".join(line + "\n" for line in lines)


def quadlet_reads(path: str) -> bool:
    """Whether quadlet (not systemd) reads this file: a quadlet source file, or a drop-in in
    ``NAME.container.d/`` or ``container.d/`` (and the other quadlet types)."""
    p = PurePosixPath(path)
    if p.suffix in QUADLET_SUFFIXES:
        return True
    parent = p.parent.name
    if p.suffix != ".conf" or not parent.endswith(".d"):
        return False
    base = parent[: -len(".d")]
    return (PurePosixPath(base).suffix or "." + base) in QUADLET_SUFFIXES


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
    """One file, read: its physical lines, assignments and section headers. The edits below take one and
    give a new one, changing its lines and the entries read from them in place of reading the text again
    (podman's UnitFile.Set/Unset keep their parsed lines the same way); ``text`` is spelt once, when asked.
    ``cont[i]``: a logical line is still open after line ``i`` (were more lines to follow), so no edit
    may cut in there without changing how the lines around it read."""

    path: str
    lines: tuple[str, ...]
    entries: tuple[Entry, ...]
    sections: tuple[tuple[str, int], ...]  # (name, header line index) in file order
    cont: tuple[bool, ...]
    source: str | None = None  # the text as read, while no edit has touched it
    broken: UnitParseError | None = None  # an edit left lines its reader refuses: the next edit raises it

    @property
    def text(self) -> str:
        """The file's text: as read, or (once edited) its lines, each ending with "\\n"."""
        return self.source if self.source is not None else join_lines(self.lines)

    def readable(self) -> ParsedFile:
        """This file, when its reader accepts it; else the refusal an earlier edit left (``broken``), raised
        as reading its text would raise it. Every edit that looks at entries asks first."""
        if self.broken:
            raise self.broken
        return self


def parse(path: str, text: str) -> ParsedFile:
    """Every section header and assignment of one file, read the way its real reader reads it.
    Raises UnitParseError for a file its readers disagree on or its reader refuses. Linear in the
    size of the text (continuations are collected in a list and joined once)."""
    try:
        lines = unit_lines(text)
    except UnitParseError as exc:
        raise UnitParseError(f"{path}: {exc}") from None
    reader = _reader(path)
    reader.read(lines, 0, len(lines) - 1)
    return ParsedFile(path, tuple(lines), tuple(reader.entries), tuple(reader.sections), tuple(reader.cont), text)


def _reader(path: str, section: str | None = None) -> _Reader:
    """The reader of this file (``quadlet_reads``), starting in ``section``."""
    return _QuadletReader(path, section) if quadlet_reads(path) else _SystemdReader(path, section)


class _Reader:
    """Reads ``lines``, the file's lines from index ``offset`` on (the whole file, or the lines an edit wrote),
    ``end`` being the index of the file's last line. ``read`` says whether a logical line is left open at the
    end of ``lines`` before ``end`` (the lines after them would continue it)."""

    def __init__(self, path: str, section: str | None = None) -> None:
        self.path = path
        self.section = section
        self.entries: list[Entry] = []
        self.sections: list[tuple[str, int]] = []
        self.cont: list[bool] = []

    def read(self, lines: Sequence[str], offset: int, end: int) -> bool:
        raise NotImplementedError

    def refuse(self, index: int, why: str) -> UnitParseError:
        return UnitParseError(f"{self.path}: line {index + 1}: {why}")


class _SystemdReader(_Reader):
    """systemd's config_parse(): comment lines (after leading WHITESPACE) are skipped everywhere, also
    inside a continuation; a line continues when it ends in an odd run of backslashes, the last one
    becoming a space; anything else (a blank line too) ends the logical line; a continuation still open
    at the end of the file is parsed."""

    def read(self, lines: Sequence[str], offset: int, end: int) -> bool:
        pending: list[str] = []
        first = last = 0
        cont = self.cont
        for i, physical in enumerate(lines, offset):
            raw = physical.removesuffix("\r")  # "\r\n" ends the line (unit_lines let no other CR through)
            if i == 0:
                raw = raw.removeprefix(_BOM)
            if raw.lstrip(WHITESPACE)[:1] in ("#", ";"):
                cont.append(bool(pending))
                continue
            if not pending:
                first = i
            last = i
            if (len(raw) - len(raw.rstrip("\\"))) % 2:
                pending.append(raw[:-1] + " ")
                cont.append(True)
                continue
            pending.append(raw)
            cont.append(False)
            self.logical("".join(pending), first, last)
            pending = []
        if pending and offset + len(lines) - 1 == end:
            self.logical("".join(pending), first, last)
            return False
        return bool(pending)

    def logical(self, text: str, first: int, last: int) -> None:
        line = text.strip(WHITESPACE)
        if not line:
            return
        if line[0] == "[":
            if line[-1] != "]":
                raise self.refuse(first, f"invalid section header {line!r}: systemd refuses to load the unit")
            self.section = line[1:-1]
            self.sections.append((self.section, first))
            return
        key, sep, value = line.partition("=")
        if sep and self.section is not None:  # systemd ignores a line without '=' or outside a section
            self.entries.append(
                Entry(self.path, self.section, key.strip(WHITESPACE), value.strip(WHITESPACE), first, last)
            )


class _QuadletReader(_Reader):
    """quadlet's UnitFile.Parse(): every line is trimmed with Go's TrimSpace (Unicode White_Space);
    blank and comment lines are skipped, also inside a continuation (so a blank line does not end one,
    unlike systemd); a trailing backslash is removed (no space put in its place) and the next line
    appended; a continuation still open at the end of the file is dropped. A line that is not a group,
    a key or a comment, a key before any group, or a bad group name makes quadlet refuse the file."""

    def read(self, lines: Sequence[str], offset: int, end: int) -> bool:
        pending: list[str] = []
        first = 0
        cont = self.cont
        for i, raw in enumerate(lines, offset):
            line = raw.strip(GO_SPACE)
            if not line or line[0] in "#;":
                cont.append(bool(pending))
                continue
            if not pending:
                first = i
            if line.endswith("\\"):
                line = line[:-1]
                if i != end:
                    pending.append(line)
                    cont.append(True)
                    continue
                cont.append(True)  # the last line is taken as it is, but a line added after it would continue it
            else:
                cont.append(False)
            pending.append(line)
            self.logical("".join(pending), first, i)
            pending = []
        return bool(pending) and offset + len(lines) - 1 != end

    def logical(self, line: str, first: int, last: int) -> None:
        close = line.find("]")
        if line[:1] == "[" and close != -1 and not line[close + 1 :].strip(" \t"):
            name = line[1:close]
            if not name or "[" in name or any(_is_control(c) for c in name):
                raise self.refuse(first, f"invalid group name {name!r}: quadlet refuses the file")
            self.section = name
            self.sections.append((name, first))
            return
        eq = line.find("=")
        if eq <= 0:
            raise self.refuse(first, f"{line[:80]!r} is not a key, a group or a comment: quadlet refuses the file")
        if self.section is None:
            raise self.refuse(first, "a key before any [Group]: quadlet refuses the file")
        key = line[:eq].rstrip(_QUADLET_KEY_SPACE)
        if not key:
            raise self.refuse(first, "an empty key name: quadlet refuses the file")
        value = line[eq + 1 :].lstrip(_QUADLET_KEY_SPACE)
        self.entries.append(Entry(self.path, self.section, key, value, first, last))


def _is_control(ch: str) -> bool:
    """Go's unicode.IsControl: C0, DEL and C1."""
    return ch <= "\x1f" or "\x7f" <= ch <= "\x9f"


def dropin_dirs(path: str, service: str) -> list[str]:
    """The names of the drop-in directories that apply to a unit, least specific first: quadlet's
    ``container.d``, ``PREFIX-.container.d`` for every prefix of the name cut after a dash, and
    ``NAME.container.d``; then, for a ``.container``, systemd's the same way for ``service``, the service
    quadlet generates from it (``rigctl.host.unit.generated_service``). Cut names matter to rigctl: a
    drop-in in ``rigctl-.container.d`` applies to every unit rigctl installs (quadlet 5.4 and systemd both
    read them)."""
    name = PurePosixPath(path).name
    if not name.endswith(".container"):
        return _levels(name)
    return [*_levels(name), *_levels(service)]


def shared_dropin_dir(name: str) -> bool:
    """Whether a drop-in directory of this name (one ``dropin_dirs`` gives) applies to more units than
    one: a type's (``container.d``, ``service.d``), a name cut at a dash (``rigctl-.container.d``) or a
    template's (``web@.service.d``)."""
    base, dot, _ = name.removesuffix(".d").rpartition(".")
    return not dot or base.endswith(("-", "@"))


def _levels(name: str) -> list[str]:
    """``web-a-b.container`` -> container.d, web-.container.d, web-a-.container.d, web-a-b.container.d. An
    instance ``web-x@a-b.service`` is cut before its ``@`` only, and takes its template's ``web-x@.service.d``;
    a name that begins with a dash has no cut before it (as systemd 252 reads them)."""
    stem, dot, suffix = name.rpartition(".")
    if not dot:
        return [f"{name}.d"]
    prefix, at, _ = stem.partition("@")
    pieces = prefix.split("-")
    cut = [f"{head}-.{suffix}.d" for i in range(1, len(pieces)) if (head := "-".join(pieces[:i]))]
    return [f"{suffix}.d", *cut, *([f"{prefix}@.{suffix}.d"] if at else []), f"{name}.d"]


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
    """Split like systemd's extract_first_word(UNQUOTE|CUNESCAPE): WHITESPACE separates words, single
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
        elif ch in WHITESPACE:
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
# ASCII digits and systemd's WHITESPACE only (Python's \d and \s would also take "٣" or U+3000)
_SPAN_PART = re.compile(r"[ \t\n\r]*([0-9]+(?:\.[0-9]+)?)[ \t\n\r]*([A-Za-z]*)")


def parse_timespan(value: str) -> float | None:
    """systemd time span in seconds: ``90``, ``5min``, ``1h 30min``, ``infinity``. ``0`` and
    ``infinity`` both mean "no timeout" for TimeoutStartSec and come back as math.inf. None when
    the value does not parse (systemd would ignore the assignment)."""
    text = value.strip(WHITESPACE)
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
        while pos < len(text) and text[pos] in WHITESPACE:
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
# An edit takes a ParsedFile and gives a new one: the lines it writes replace lines of the old one, and only
# those are read (``splice``), the entries around them kept, moved by as many lines as were added or taken.
# Lines it does not touch come back byte for byte (U+2028 and friends included), and it never adds a line
# break a reader would not see. Each edit spells its lines as the edit of the text before it did, so the
# text written is the same, byte for byte, as editing the text and reading it again at every step.

_LINE_END = re.compile(r"[\n\r\x00]")


def one_line(line: str) -> str:
    """A line an edit writes must stay one line for every reader (no LF, CR or NUL)."""
    if _LINE_END.search(line):
        raise ValueError(f"{line!r} would be more than one line of a unit file")
    return line


def _section_before(f: ParsedFile, index: int) -> str | None:
    """The section in effect for a line at ``index``: the last header above it."""
    found = None
    for name, idx in f.sections:
        if idx >= index:
            break
        found = name
    return found


def splice(f: ParsedFile, start: int, stop: int, new: Sequence[str]) -> ParsedFile:
    """``f`` with its lines ``start``..``stop`` (exclusive) replaced by ``new``: only ``new`` is read, from the
    section in effect there. Where that could read differently from reading the whole new text (the cut lies
    inside a continued line, the new lines leave one open, a header among them would take the lines below,
    a byte-order mark comes to the first line) the whole text is read again instead. Lines a reader refuses
    are kept, and so is the refusal (``broken``): the next edit raises it, as reading its text would."""
    lines = (*f.lines[:start], *new, *f.lines[stop:])
    if f.broken:
        return ParsedFile(f.path, lines, f.entries, f.sections, f.cont, broken=f.broken)
    end = len(lines) - 1
    reader = _reader(f.path, _section_before(f, start))
    clean = (start == 0 or not f.cont[start - 1]) and (stop == start or stop == len(f.lines) or not f.cont[stop - 1])
    if clean and start == 0 and not new and lines and isinstance(reader, _SystemdReader):
        clean = not lines[0].startswith(_BOM)
    try:
        if clean:
            clean = not reader.read(new, start, end)
        if clean and stop < len(f.lines) and reader.section != _section_before(f, stop) \
                and not any(idx == stop for _, idx in f.sections):
            clean = False
    except UnitParseError as exc:
        return ParsedFile(f.path, lines, f.entries, f.sections, f.cont, broken=exc)
    if not clean:
        try:
            return replace(parse(f.path, join_lines(lines)), source=None)
        except UnitParseError as exc:
            return ParsedFile(f.path, lines, f.entries, f.sections, f.cont, broken=exc)
    delta = len(new) - (stop - start)
    entries = (*(e for e in f.entries if e.last < start), *reader.entries,
               *(replace(e, first=e.first + delta, last=e.last + delta) for e in f.entries if e.first >= stop))
    sections = (*((n, i) for n, i in f.sections if i < start), *reader.sections,
                *((n, i + delta) for n, i in f.sections if i >= stop))
    return ParsedFile(f.path, lines, entries, sections, (*f.cont[:start], *reader.cont, *f.cont[stop:]))


def replace_entry(f: ParsedFile, entry: Entry, new_line: str | None) -> ParsedFile:
    """Replace the physical lines of ``entry`` with ``new_line`` (None deletes them)."""
    return splice(f, entry.first, entry.last + 1, [] if new_line is None else [one_line(new_line)])


def set_key(f: ParsedFile, section: str, key: str, value: str, *, after: str | None = None) -> ParsedFile:
    """Set a scalar key: rewrite its last assignment in this file, or add it right after the key
    ``after`` when present, else at the end of the section (creating the section before [Install]
    when the file has none)."""
    assignment = one_line(f"{key}={value}")
    f = f.readable()
    mine = [e for e in f.entries if e.section == section and e.key == key]
    if mine:
        return replace_entry(f, mine[-1], assignment)
    lines = f.lines
    anchor = [e for e in f.entries if e.section == section and e.key == after] if after else []
    if anchor:
        return splice(f, anchor[-1].last + 1, anchor[-1].last + 1, [assignment])
    headers = [(name, idx) for name, idx in f.sections if name == section]
    if headers:
        _, start = headers[-1]
        later = [idx for _, idx in f.sections if idx > start]
        end = later[0] if later else len(lines)
        insert_at = end
        while insert_at - 1 > start and not lines[insert_at - 1].strip(WHITESPACE):
            insert_at -= 1  # keep the blank line that separates sections after the new key
        return splice(f, insert_at, insert_at, [assignment])
    install = [idx for name, idx in f.sections if name == "Install"]
    block = [one_line(f"[{section}]"), assignment, ""]
    if install:
        return splice(f, install[0], install[0], block)
    gap = [""] if lines and lines[-1].strip(WHITESPACE) else []
    return splice(f, len(lines), len(lines), [*gap, *block[:-1]])


def remove_entries(f: ParsedFile, section: str, key: str) -> ParsedFile:
    f = f.readable()
    for entry in reversed([e for e in f.entries if e.section == section and e.key == key]):
        f = replace_entry(f, entry, None)
    return f


# systemd's WHITESPACE, and a continuation (backslash, newline) between words of a raw command line
_WS = r"[ \t\n\r]"
_NOT_WS = r"[^ \t\n\r]"


def option_pattern(option: str, takes_value: bool = True) -> re.Pattern[str]:
    """A podman option with its value inside a raw command line: ``--opt=v``, ``--opt v``,
    ``--opt "v w"``. Continuation backslashes and line breaks count as whitespace."""
    ws = rf"(?:{_WS}|\\\n)+"
    value = r"(?:=|" + ws + r")(?:\"[^\"]*\"|'[^']*'|[^ \t\n\r\\]+)" if takes_value else ""
    # the option may follow whitespace or the `Key=` of the assignment itself
    return re.compile(r"(?<![^ \t\n\r=])" + re.escape(option) + value + r"(?![^ \t\n\r\\])")


def remove_option(f: ParsedFile, section: str, keys: Iterable[str], option: str) -> ParsedFile:
    """Delete ``option`` (and its value) from every assignment of ``keys`` in this file. An assignment
    left with no value is dropped."""
    pattern = option_pattern(option)
    bare = option_pattern(option, takes_value=False)
    f = f.readable()
    wanted = set(keys)
    for entry in reversed([e for e in f.entries if e.section == section and e.key in wanted]):
        raw = "\n".join(f.lines[entry.first : entry.last + 1])
        new = pattern.sub("", raw)
        new = bare.sub("", new)
        if new == raw:
            continue
        # tidy: whitespace runs left behind, and continued lines that now hold nothing
        new_lines = [re.sub(rf"(?<={_NOT_WS})[ \t]{{2,}}", " ", ln).rstrip(WHITESPACE) for ln in new.split("\n")]
        new_lines = [ln for ln in new_lines if ln.strip(WHITESPACE) != "\\"]
        if new_lines and new_lines[-1].endswith("\\"):
            new_lines[-1] = new_lines[-1][:-1].rstrip(WHITESPACE)
        joined = re.sub(r"^([^=]*=)[ \t]+", r"\1", "\n".join(new_lines))
        _, _, v = joined.partition("=")
        if not v.strip(WHITESPACE):
            f = replace_entry(f, entry, None)
        else:
            f = splice(f, entry.first, entry.last + 1, joined.split("\n"))
    return f


def replace_in_entry(f: ParsedFile, entry: Entry, old: str, new: str) -> ParsedFile:
    """Replace the first occurrence of ``old`` inside the raw lines of ``entry``."""
    raw = "\n".join(f.lines[entry.first : entry.last + 1])
    if old not in raw:
        return f
    return splice(f, entry.first, entry.last + 1, raw.replace(old, one_line(new), 1).split("\n"))


def replace_word(f: ParsedFile, section: str, key: str, old: str, new: str) -> ParsedFile:
    """Replace the whole word ``old`` (its edges systemd's WHITESPACE or quotes, never \\s, which also
    matches U+2028, U+3000 ...) with ``new`` in the first assignment of ``key`` whose value holds it."""
    pattern = re.compile(r"(?<![^ \t\n\r=\"'])" + re.escape(old) + r"(?![^ \t\n\r\"'\\])")
    f = f.readable()
    for current in f.entries:
        if current.section == section and current.key == key and old in current.value:
            raw = "\n".join(f.lines[current.first : current.last + 1])
            name, eq, rest = raw.partition("=")
            rest = pattern.sub(lambda _: new, rest, count=1)  # taken literally, no \1 escapes
            return splice(f, current.first, current.last + 1, (name + eq + rest).split("\n"))
    return f
