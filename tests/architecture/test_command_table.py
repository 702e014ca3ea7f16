"""The command table (``rigctl.cli.commands``) is the one list of commands: every command in it is
registered by the module it names, and nothing registers a command outside it. ``main`` loads only the
module the table names for the command typed, and the root help is written from the table, so a command
registered elsewhere would be missing from both, and one the table names wrongly would fail to load."""

from __future__ import annotations

import importlib
from pathlib import Path

from rigctl.cli.commands import COMMANDS, MODULES

CLI = Path(__file__).resolve().parents[2] / "src" / "rigctl" / "cli"


def registered() -> dict[str, set[str]]:
    """Every command and group on the app once every module of rigctl.cli is imported, with the modules
    whose functions it runs (a group: its subcommands')."""
    for path in sorted(CLI.rglob("*.py")):
        parts = path.relative_to(CLI).with_suffix("").parts
        importlib.import_module(".".join(("rigctl", "cli", *(p for p in parts if p != "__init__"))))
    from rigctl.cli.root import app

    found: dict[str, set[str]] = {}
    for info in app.registered_commands:
        assert info.name, f"{info.callback}: every command is registered under its name"
        found.setdefault(info.name, set()).add(info.callback.__module__ if info.callback else "?")
    for group in app.registered_groups:
        assert group.name and group.typer_instance is not None
        found.setdefault(group.name, set()).update(
            c.callback.__module__ if c.callback else "?" for c in group.typer_instance.registered_commands)
    return found


def test_every_command_registers_from_the_module_the_table_names_and_nothing_else_registers() -> None:
    found = registered()
    assert sorted(found) == sorted(COMMANDS), "the registered commands and the command table differ"
    wrong = {name: sorted(modules) for name, modules in found.items()
             if modules != {f"rigctl.cli.{COMMANDS[name].module}"}}
    assert not wrong, f"registered elsewhere than the table says: {wrong}"


def test_each_command_module_is_in_the_table() -> None:
    files = sorted(p.stem for p in CLI.glob("cmd_*.py"))
    assert sorted(MODULES) == files, "a cmd_*.py module the table names none of its commands for, or one missing"
