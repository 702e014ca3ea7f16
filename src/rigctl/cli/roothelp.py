"""The root help (`rigctl --help`) written from the command table (``cli.commands``) and the root's
examples (``cli.examples``) the way click lays it out in a terminal of 80 columns or more, so that printing
it loads no command and not typer. tests/cli/test_lazy_commands.py holds it equal to what typer renders.

The layout is click's: the usage line, the help text, then each section as a definition list (the first
column at most 30 wide, two spaces before the second, which wraps to what is left of ``WIDTH``), then the
epilog. Click wraps with ``textwrap``; importing it compiles its patterns, a tenth of what the root help
costs, so ``_wrap`` fills lines the same way for this text: greedily, at spaces and after a hyphen inside
a word (the test above catches a text where the two differ)."""

from __future__ import annotations

from rigctl.cli.commands import COMMANDS, ROOT_OPTIONS, ROOT_SUMMARY, TYPER_ROOT_OPTIONS
from rigctl.cli.examples import root_epilog

WIDTH = 78  # click lays help out for min(terminal columns, 80) - 2
INDENT = "  "


def root_help() -> str:
    """`rigctl --help` as typer prints it at the widest layout."""
    options = [(_option_names(option.names, option.metavar), option.help) for option in ROOT_OPTIONS.values()]
    commands = [(name, command.summary) for name, command in COMMANDS.items()]
    parts = [
        "Usage: rigctl [OPTIONS] COMMAND [ARGS]...\n",
        _text(ROOT_SUMMARY),
        "Options:\n" + _definitions([*options, *TYPER_ROOT_OPTIONS]),
        "Commands:\n" + _definitions(commands),
        _text(root_epilog()),
    ]
    return "\n".join(parts)


def _option_names(names: tuple[str, ...], metavar: str | None) -> str:
    """An option's first column: its names, short ones first (as click orders them), then its metavar."""
    joined = ", ".join(sorted(names, key=lambda name: len(name) - len(name.lstrip("-"))))
    return f"{joined} {metavar}" if metavar else joined


def _definitions(rows: list[tuple[str, str]]) -> str:
    first = min(max(len(name) for name, _ in rows), 30) + 2
    out = []
    for name, text in rows:
        lines = _wrap(text, max(WIDTH - first - 2, 10), "")  # as click has it: the indent is not counted
        head = f"{INDENT}{name}"
        if len(name) <= first - 2:
            head += " " * (first - len(name)) + lines[0]
        else:  # a long first column: the text starts on the next line
            head += "\n" + " " * (first + len(INDENT)) + lines[0]
        out.append("\n".join([head, *(" " * (first + len(INDENT)) + line for line in lines[1:])]))
    return "\n".join(out) + "\n"


def _text(text: str) -> str:
    """A paragraph of help, indented, wrapped to WIDTH; a block after a ``\\b`` line is kept as it is."""
    blocks = []
    for block in text.split("\n\n"):
        lines = block.split("\n")
        if lines[0] == "\b":
            blocks.append("\n".join(INDENT + line for line in lines[1:]))
        else:
            blocks.append("\n".join(_wrap(" ".join(lines), WIDTH, INDENT)))
    return "\n\n".join(blocks) + "\n"


def _chunks(text: str) -> list[tuple[str, bool]]:
    """The pieces a line may break between: (piece, whether a space comes before it)."""
    out: list[tuple[str, bool]] = []
    for word in text.split():
        start, spaced = 0, True
        for i in range(1, len(word) - 1):
            if word[i] == "-" and _breaks_after(word, i):
                out.append((word[start:i + 1], spaced))
                start, spaced = i + 1, False
        out.append((word[start:], spaced))
    return out


def _letter(word: str, i: int) -> bool:
    return 0 <= i < len(word) and (word[i].isalpha() or word[i] == "_")


def _breaks_after(word: str, i: int) -> bool:
    """Whether textwrap breaks ``word`` after its hyphen at ``i``: two letters before it (or a letter, a
    hyphen, a letter), and a letter after it followed by a letter (or a hyphen and a letter)."""
    before = (_letter(word, i - 1) and _letter(word, i - 2)) or (
        _letter(word, i - 1) and word[i - 2:i - 1] == "-" and _letter(word, i - 3))
    after = _letter(word, i + 1) and (_letter(word, i + 2) or (word[i + 2:i + 3] == "-" and _letter(word, i + 3)))
    return before and after


def _wrap(text: str, width: int, indent: str) -> list[str]:
    chunks = _chunks(text)
    if not chunks:
        return [""]
    if any(len(indent) + len(piece) > width for piece, _ in chunks):  # textwrap cuts such a word: let it
        import textwrap  # noqa: PLC0415 - see the module's docstring

        wrapper = textwrap.TextWrapper(width, initial_indent=indent, subsequent_indent=indent,
                                       replace_whitespace=False)
        return wrapper.wrap(text) or [""]
    lines: list[str] = []
    line = ""
    for piece, spaced in chunks:
        joined = f"{line} {piece}" if line and spaced else line + piece
        if line and len(indent) + len(joined) > width:
            lines.append(indent + line)
            joined = piece
        line = joined
    return [*lines, indent + line]
