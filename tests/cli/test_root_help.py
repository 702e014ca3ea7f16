"""`rigctl --help` lists every command on one line each, whole (click cut each docstring's first sentence
with "..."), and ends with examples of a first session."""

from __future__ import annotations

import shlex

from rigctl.cli import app as app_module
from rigctl.cli.commands import COMMANDS, SUMMARY_WIDTH
from rigctl.cli.examples import ROOT_EXAMPLES
from rigctl.cli.roothelp import root_help

ROOT_HELP = root_help()
SUMMARY = {name: command.summary for name, command in COMMANDS.items()}


def test_every_command_has_a_summary_that_fits_its_line() -> None:
    assert set(SUMMARY) == set(COMMANDS)
    assert not [name for name, text in SUMMARY.items() if len(text) > SUMMARY_WIDTH or text.endswith(".")]


def test_the_root_help_lists_each_command_whole() -> None:
    listed = ROOT_HELP[ROOT_HELP.index("Commands:\n"):].splitlines()[1:len(COMMANDS) + 1]
    assert sorted(line.split()[0] for line in listed) == sorted(COMMANDS)
    for line in listed:
        name, text = line.split(maxsplit=1)
        assert text == SUMMARY[name]  # as written: not cut, not wrapped onto a second line
    assert "..." not in ROOT_HELP.removeprefix("Usage: rigctl [OPTIONS] COMMAND [ARGS]...")


def test_the_root_help_ends_with_examples_that_parse() -> None:
    tail = ROOT_HELP[ROOT_HELP.index("Examples:"):].splitlines()
    for args, what in ROOT_EXAMPLES:
        assert any(line.strip().startswith(f"rigctl {args} ") and line.endswith(f"# {what}") for line in tail)
    app = app_module.app  # every command registered
    import typer.main

    group = typer.main.get_command(app)
    for args, _ in ROOT_EXAMPLES:
        words = shlex.split(args)
        if words[0] == "COMMAND":
            continue
        command = group.commands[words[0]]  # type: ignore[attr-defined]
        command.make_context(words[0], words[1:])  # raises on an option or argument it does not take


def test_the_root_helps_wrapping_is_textwraps() -> None:
    """roothelp fills lines as click's textwrap does (without importing it): at spaces, after a hyphen
    inside a word, and a word too long for the line cut by textwrap itself."""
    import textwrap

    from rigctl.cli.commands import ROOT_OPTIONS
    from rigctl.cli.roothelp import _wrap

    texts = [c.summary for c in COMMANDS.values()] + [o.help for o in ROOT_OPTIONS.values()] + [
        "", "self-hosted rigctl-managed a-b x-1 well-known-thing ab-c-de e-f-gh my_x-yy non-GPU --fix re-verify",
        "$XDG_CONFIG_HOME/rigctl/hosts.yaml is longer than a narrow line"]
    for text in texts:
        for width in (12, 20, 33, 54, 76):
            want = textwrap.TextWrapper(width, initial_indent="  ", subsequent_indent="  ",
                                        replace_whitespace=False).wrap(text) or [""]
            assert _wrap(text, width, "  ") == want, (text, width)
