"""The command table: every command rigctl has, the ``cmd_*`` module that registers it, and its line in the
root help, in the order the root help lists them (typer lists a group such as fleet after the commands).

It is the one list of commands. ``app.main`` imports only the module of the command being run (from this
table), and ``roothelp`` writes `rigctl --help` from it without loading typer or any command;
tests/architecture/test_command_table.py holds the table and what the modules register to each other.
Importing this module loads nothing: it is read before anything else on every start.

Each summary is written to fit its one line in the root help: at most ``SUMMARY_WIDTH`` characters, so
that click never cuts it with "...", and without a closing full stop. The root's own options are here
too (``ROOT_OPTIONS``): ``cli.options`` declares them to typer from these, and the root help lists them."""

from __future__ import annotations


class Command:
    """One command of the table: the module under ``rigctl.cli`` that registers it, and its summary."""

    __slots__ = ("module", "summary")

    def __init__(self, module: str, summary: str) -> None:
        self.module = module
        self.summary = summary


class RootOption:
    """One option of the root (before the command): its names, the metavar of its value (None: a flag),
    and its help."""

    __slots__ = ("help", "metavar", "names")

    def __init__(self, names: tuple[str, ...], metavar: str | None, help: str) -> None:
        self.names = names
        self.metavar = metavar
        self.help = help


SUMMARY_WIDTH = 63  # click's room beside the longest command name (inventory) in the 78-column layout
ROOT_SUMMARY = "Make self-hosted LLM serving boring: recipes, preflight, quadlet units, verification."

COMMANDS: dict[str, Command] = {
    "up": Command("cmd_deploy", "Deploy a recipe: preflight, install, start, warm up, verify"),
    "status": Command("cmd_deploy", "Every rigctl-managed service here: state, health, GPU memory"),
    "logs": Command("cmd_deploy", "The engine's output, with known crash signatures explained"),
    "down": Command("cmd_deploy", "Stop a service and say whether its GPUs were released"),
    "doctor": Command("cmd_doctor", "Audit every serving unit on this host (--fix rewrites them)"),
    "swap": Command("cmd_deploy", "Replace one served recipe by another, rolling back on failure"),
    "inventory": Command("cmd_preflight", "This host's facts: GPUs, shm, podman, CDI, systemd, ports"),
    "preflight": Command("cmd_preflight", "Check that a recipe can run here, or on a captured inventory"),
    "recipes": Command("cmd_recipes", "List the recipes rigctl can find, each validated"),
    "show": Command("cmd_recipes", "A recipe after overlays and --set, every default filled in"),
    "validate": Command("cmd_recipes", "Check recipes strictly: every problem with its file and line"),
    "new": Command("cmd_recipes", "Write a new user recipe, a copy of another to edit"),
    "schema": Command("cmd_recipes", "Print the recipe JSON Schema, for editors"),
    "render": Command("cmd_render", "Render the quadlet unit `up` would install (or kube manifests)"),
    "verify": Command("cmd_verify", "Check a served model: answers, loops, context, a soak"),
    "canary": Command("cmd_canary", "Re-verify a deployment on a timer; restart it once on failure"),
    "metrics": Command("cmd_canary", "Every deployment as Prometheus text (or a node_exporter file)"),
    "checks": Command("cmd_meta", "List every check rigctl runs and what it guards"),
    "explain": Command("cmd_meta", "One check: what it guards and why, its fixes, --force"),
    "version": Command("cmd_meta", "rigctl's version and Python's"),
    "fleet": Command("cmd_fleet", "status, doctor, preflight or swap on every inventory host"),
}
MODULES = tuple(dict.fromkeys(command.module for command in COMMANDS.values()))  # each command module, once

ROOT_OPTIONS: dict[str, RootOption] = {
    "--host": RootOption(("--host",), "NAME", "Run the command on this inventory host over ssh."),
    "--hosts": RootOption(("--hosts",), "FILE", "Host inventory for --host and the fleet commands (default "
                                                "$XDG_CONFIG_HOME/rigctl/hosts.yaml)."),
    "--allow-ssh-options": RootOption(
        ("--allow-ssh-options", "--allow-ssh-commands"), None,
        "With --host: trust the inventory's ssh options beyond connection settings (ProxyCommand, forwards)."),
    "--quiet": RootOption(("--quiet", "-q"), None, "Print only the result and errors: no notes, no progress."),
    "--verbose": RootOption(("--verbose", "-v"), None, "Also print each command rigctl runs (podman, systemctl, ssh)."),
    "--version": RootOption(("--version",), None, "Print rigctl's version and exit."),
}
# What typer and click add to the root's options, in their words (the root help test compares them)
TYPER_ROOT_OPTIONS: tuple[tuple[str, str], ...] = (
    ("--install-completion", "Install completion for the current shell."),
    ("--show-completion", "Show completion for the current shell, to copy it or customize the installation."),
    ("-h, --help", "Show this message and exit."),
)


def module_of(command: str) -> str | None:
    """The module that registers ``command`` (None: no such command)."""
    found = COMMANDS.get(command)
    return found.module if found else None


def summary(command: str) -> str | None:
    """The root help's line for ``command`` (None: click's cut of its docstring)."""
    found = COMMANDS.get(command)
    return found.summary if found else None
