"""Entry point: loads the command the command line names, and owns the last-resort error handling.

Each ``cmd_*`` module registers its commands on the shared typer app when it is imported. Importing all
of them, and building every command's options, was most of what a short command cost before it did
anything, so ``main`` imports only the module the command table (``cli.commands``) names for the command
being run; a root --help, a mistyped command or anything it cannot place gets all of them. ``from
rigctl.cli.app import app`` gives the app with every command registered (tests and tools use it).

The root help is the one screen that lists every command. In a terminal of 80 columns or more (click's
layout stops widening there) it is written from the command table by ``roothelp``, without loading typer
or any command.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import Any

from rigctl.cli.commands import COMMANDS, MODULES, module_of, summary
from rigctl.cli.examples import epilog, root_epilog

ROOT_VALUE_OPTIONS = ("--host", "--hosts")  # the root's options that take a value
ROOT_HELP_COLUMNS = 80  # click wraps help to min(terminal columns, 80) - 2
COMPLETE_VAR = "_RIGCTL_COMPLETE"  # set by the script `rigctl --show-completion` prints, on each Tab


def command_modules(argv: Sequence[str]) -> tuple[str, ...]:
    """The command modules ``argv`` needs: the one its command word names, or all of them (no command,
    a root --help, a word that is no command)."""
    words = iter(argv)
    for word in words:
        if word in ROOT_VALUE_OPTIONS:
            next(words, None)
        elif word in ("-h", "--help"):
            return MODULES
        elif not word.startswith("-"):
            module = module_of(word)
            return (module,) if module else MODULES
    return MODULES


def register(modules: Sequence[str]) -> None:
    """Import these command modules, and keep the app's commands in the table's order whatever order they
    were first imported in (a test or a tool may import one module before the others). Each command's
    line in the root help is its summary in the table, and its --help ends with its examples
    (``cli.examples``)."""
    for name in modules:
        importlib.import_module(f"rigctl.cli.{name}")
    from rigctl.cli.root import app  # noqa: PLC0415 - typer: the root help and --version are printed without it

    order = {name: i for i, name in enumerate(COMMANDS)}
    app.registered_commands.sort(key=lambda info: order.get(info.name or "", len(order)))
    app.info.epilog = app.info.epilog or root_epilog()
    for info in app.registered_commands:
        info.epilog = info.epilog or epilog(info.name or "")
        info.short_help = info.short_help or summary(info.name or "")  # the root help's line, never cut
    for group in app.registered_groups:
        group.epilog = group.epilog or epilog(group.name or "")
        group.short_help = group.short_help or summary(group.name or "")
        for info in group.typer_instance.registered_commands if group.typer_instance else ():
            info.epilog = info.epilog or epilog(f"{group.name} {info.name}")


def __getattr__(name: str) -> Any:
    """``app``: the typer app with every command registered."""
    if name == "app":
        register(MODULES)
        from rigctl.cli.root import app  # noqa: PLC0415 - see register

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _columns() -> int:
    """The terminal width click would lay the root help out for (COLUMNS, else the terminal's)."""
    from rigctl.util.text import columns  # noqa: PLC0415 - only the root help lays text out here

    return columns(sys.__stdout__, ROOT_HELP_COLUMNS)


def _root_help(argv: Sequence[str]) -> int | None:
    """Print the root help as typer would and return the exit code, or None to leave it to typer.
    ``rigctl --version`` is answered here too, for the same reason: it needs nothing of typer's."""
    if list(argv) == ["--version"]:
        from rigctl.util.text import version_line  # noqa: PLC0415 - only for this line

        sys.stdout.write(version_line() + "\n")
        return 0
    if list(argv) not in ([], ["--help"], ["-h"]) or os.path.basename(sys.argv[0]) != "rigctl":
        return None  # `python -m rigctl` is named differently in the usage line: typer says it
    if COMPLETE_VAR in os.environ:  # the shell asking for completions (no words in argv): typer answers
        return None
    if _columns() < ROOT_HELP_COLUMNS:
        return None
    from rigctl.cli.roothelp import root_help  # noqa: PLC0415 - only for the root help

    if argv:
        sys.stdout.write(root_help())
        return 0
    sys.stderr.write(root_help())  # no command at all is a usage error, as typer's no_args_is_help has it
    return 2


def _is_the_program() -> bool:
    """Whether this process is rigctl itself (the console script or ``python -m rigctl``), not a program
    that called ``main`` and goes on afterwards (a test, a tool)."""
    top = sys.modules.get("__main__")
    path = getattr(top, "__file__", None)
    spec = getattr(top, "__spec__", None)
    return bool(path) and (os.path.basename(str(path)) == "rigctl" or getattr(spec, "name", "") == "rigctl.__main__")


def _exit_now(code: object) -> None:
    """End the process the way the interpreter would, without tearing it down: the exit callbacks run and
    stdout and stderr are flushed, then the OS frees the rest. Freeing every module and object one by
    one (pydantic's schemas, the typer app) cost a short command about a tenth of its run. Returns (and
    the interpreter exits as usual) while another thread still runs, or if a stream cannot be flushed."""
    import atexit  # noqa: PLC0415 - only at the end
    import threading  # noqa: PLC0415

    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not threading.main_thread()):
        return
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): the message goes to stderr and the status is 1, as the interpreter does it
        sys.stderr.write(f"{code}\n")
        status = 1
    atexit._run_exitfuncs()  # what the interpreter runs first on exit (e.g. a progress bar's stop)
    try:
        for stream in (sys.stdout, sys.stderr):
            if stream is not None:
                stream.flush()
    except (OSError, ValueError):  # a closed pipe: leave the report of it to the interpreter
        return
    os._exit(status & 0xFF if status >= 0 else status % 256)


def _run_for_json(app: Any) -> int:
    """Run the app with ``--json`` somewhere in argv, and return the exit status.

    click prints its own usage errors (a missing argument, an unknown option) as text on stderr, which
    would leave a script that asked for ``--json`` with nothing on stdout. Here click hands them back
    instead (``standalone_mode=False``) and they become the one error object, exit 2. Everything else
    ends as it would: a command's ``typer.Exit`` comes back as its status."""
    import typer  # noqa: PLC0415 - loaded by the app already

    try:
        status = app(standalone_mode=False)
    except typer.Abort:
        sys.stderr.write("Aborted!\n")
        return 1
    except typer.TyperException as err:  # click's errors, all of them about the command line
        return _usage_error_object(err)
    return status if isinstance(status, int) else 0


def _usage_error_object(err: Exception) -> int:
    """Print a click usage error as rigctl's JSON error envelope, for the command it was about."""
    from rigctl.cli.output import emit_error  # noqa: PLC0415 - only for this error
    from rigctl.errors import UsageError  # noqa: PLC0415

    names: list[str] = []
    ctx = getattr(err, "ctx", None)  # the context of the (sub)command being parsed, when click knows it
    while ctx is not None and ctx.parent is not None:  # the root's own name is the program's
        names.append(str(ctx.info_name))
        ctx = ctx.parent
    command = " ".join(reversed(names))
    format_message = getattr(err, "format_message", None)
    message = str(format_message() if callable(format_message) else err)
    fix = f"`rigctl {command} --help` lists what it takes"
    if not command:  # the root's error: `rigctl --json status` is the likely slip
        fix = ("--json goes after the command: `rigctl COMMAND ... --json`" if "--json" in message
               else "`rigctl --help` lists the commands")
    return emit_error(command or "rigctl", UsageError(message, fix=fix), as_json=True)


def _never_fail_to_print() -> None:
    """Views escape what they print (``util.text.printable``); should a value slip past that, a character
    the stream cannot encode (a lone surrogate from an engine's JSON) is written as an escape, not raised
    as UnicodeEncodeError halfway through a report."""
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="backslashreplace")


def main() -> None:
    _never_fail_to_print()
    argv = sys.argv[1:]
    if sorted(argv) == ["--json", "--version"]:  # --json asks for the answer `version --json` gives
        argv = sys.argv[1:] = ["version", "--json"]
    code = _root_help(argv)
    if code is None and argv and argv[0].endswith("-completion"):
        from rigctl.cli.complete import answer  # noqa: PLC0415 - only for --install/--show-completion

        code = answer(argv)
    if code is not None:
        sys.exit(code)
    from rigctl.cli.root import app  # noqa: PLC0415 - typer: not for the root help
    from rigctl.exitcodes import ExitCode  # noqa: PLC0415 - likewise

    register(command_modules(argv))
    try:
        if "--json" in argv:
            sys.exit(_run_for_json(app))
        app()
    except SystemExit as done:  # how click ends every command, success included
        if _is_the_program():
            _exit_now(done.code)
        raise
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        sys.exit(int(ExitCode.INTERRUPTED))
    except Exception:  # a traceback here is a bug by definition; say so
        import traceback  # noqa: PLC0415 - only for a bug

        traceback.print_exc()
        sys.stderr.write("rigctl: internal error (this is a bug in rigctl; please report the traceback above)\n")
        sys.exit(int(ExitCode.INTERNAL))
