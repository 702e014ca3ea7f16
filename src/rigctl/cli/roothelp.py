"""The root help (`rigctl --help`) written from the command table (``cli.commands``) and the root's
examples (``cli.examples``) the way click lays it out in a terminal of 80 columns or more, so that printing
it loads no command and not typer. tests/cli/test_lazy_commands.py holds it equal to what typer renders.

The layout is click's: the usage line, the help text, then each section as a definition list (the first
column at most 30 wide, two spaces before the second, which wraps to what is left of ``WIDTH``), then the
epilog. Click wraps with ``textwrap``, and so does this."""

from __future__ import annotations

import textwrap

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


def _wrap(text: str, width: int, indent: str) -> list[str]:
    wrapper = textwrap.TextWrapper(width, initial_indent=indent, subsequent_indent=indent, replace_whitespace=False)
    return wrapper.wrap(text) or [""]
