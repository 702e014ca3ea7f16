"""Shell completion: the callback that offers recipe names, and ``rigctl --install-completion [SHELL]`` /
``--show-completion [SHELL]``.

A callback runs on every Tab press, so it reads as little as it can: recipe names come from file names in
the recipe directories, without opening or validating a recipe (``rigctl recipes`` does that).

Installing writes into a home directory, often as root. The home is the invocation's own
(``rigctl.invocation``: as root never an inherited user's), and every file is written through the safe
writer: directories entered without following a link, each file replaced atomically, and a start-up file
that is a link (a dotfiles manager's, or one planted to lead elsewhere) is never written through: rigctl
names the line to add instead. The shell given on the command line is the one installed for."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rigctl.util.safefs import SafeDir

PROG = "rigctl"
COMPLETE_VAR = "_RIGCTL_COMPLETE"
SHELLS = ("bash", "zsh", "fish")
OPTIONS = ("--install-completion", "--show-completion")
_RC_LIMIT = 1 << 20  # a shell start-up file larger than this is not one rigctl edits


def recipe_names(incomplete: str) -> list[tuple[str, str]]:
    """The recipes whose name starts with what was typed, each with where it comes from. A file whose
    name cannot name a recipe (a space, a control character) is left out: the shell would split it."""
    from rigctl.recipe.catalog import list_recipe_files  # noqa: PLC0415 - only when completing
    from rigctl.recipe.names import recipe_name_problem  # noqa: PLC0415

    return [(name, origin) for name, _, origin in list_recipe_files()
            if name.startswith(incomplete) and recipe_name_problem(name) is None]


@dataclass(frozen=True)
class CompletionPlace:
    """Where one shell's completion goes: the script's file, and the line its start-up file needs."""

    script: tuple[str, ...]  # below the home
    rc: tuple[str, ...] | None  # the start-up file below the home, or None (fish reads its directory)
    line: str | None


def placement(shell: str, home: Path, config_home: Path) -> CompletionPlace:
    if shell == "bash":
        script = (".bash_completions", f"{PROG}.sh")
        return CompletionPlace(script, (".bashrc",), f"source '{home / Path(*script)}'")
    if shell == "zsh":
        return CompletionPlace((".zfunc", f"_{PROG}"), (".zshrc",), "fpath+=~/.zfunc; autoload -Uz compinit; compinit")
    rel = config_home.relative_to(home).parts if config_home.is_relative_to(home) else None
    if rel is None:
        raise ValueError(f"XDG_CONFIG_HOME ({config_home}) is outside the home; use --show-completion fish")
    return CompletionPlace((*rel, "fish", "completions", f"{PROG}.fish"), None, None)


def script_for(shell: str) -> str:
    from typer._completion_shared import get_completion_script  # noqa: PLC0415 - typer's own script text

    return get_completion_script(prog_name=PROG, complete_var=COMPLETE_VAR, shell=shell)


def detect_shell() -> str | None:
    """The shell this runs under: typer's detection (shellingham) where it answers, else $SHELL."""
    try:
        from typer._completion_shared import _get_shell_name  # noqa: PLC0415 - private, pinned below 0.29

        found = _get_shell_name()
    except Exception:  # detection is a convenience: $SHELL and the argument remain
        found = None
    return found or (os.path.basename(os.environ.get("SHELL", "")) or None)


class CompletionError(Exception):
    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


def install(shell: str) -> list[str]:
    """Install ``shell``'s completion into the invocation's home; returns what was done, a line each."""
    from rigctl.errors import InvalidInputError  # noqa: PLC0415 - only when installing
    from rigctl.invocation import current  # noqa: PLC0415
    from rigctl.util.safefs import SafeDir  # noqa: PLC0415

    me = current()
    try:
        where = placement(shell, me.home, me.config_home)
    except ValueError as exc:
        raise CompletionError(str(exc), f"`rigctl --show-completion {shell}` and place it yourself") from None
    done: list[str] = []
    *dirs, name = where.script
    try:
        with SafeDir.open(me.home) as home:
            with SafeDir.open(me.home, dirs, create=True) as d:  # no link followed below the home
                _refuse_link(d, name, me.home / Path(*where.script), shell)
                d.write_atomic(name, script_for(shell).encode(), mode=0o644)
            done.append(f"{shell} completion installed in {me.home / Path(*where.script)}")
            if where.rc is not None and where.line is not None:
                done.append(_add_line(home, where.rc[0], where.line, me.home / where.rc[0]))
    except InvalidInputError as err:
        raise CompletionError(err.message, f"`rigctl --show-completion {shell}` and place it yourself") from None
    return done


def _refuse_link(d: SafeDir, name: str, path: Path, shell: str) -> None:
    st = d.lstat(name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise CompletionError(f"{path} is a link; rigctl does not write through links (it could lead anywhere)",
                              f"`rigctl --show-completion {shell} > FILE` where you want it")


def _add_line(home: SafeDir, name: str, line: str, path: Path) -> str:
    """Append ``line`` to the start-up file ``name`` unless it has it; the file is rewritten atomically,
    keeping its mode and owner, and refused when it is a link or not a regular file."""
    st = home.lstat(name)
    if st is not None and stat.S_ISLNK(st.st_mode):
        raise CompletionError(f"{path} is a link; rigctl does not write through links",
                              f"add this line to your {name} yourself: {line}")
    text = home.read_text(name, limit=_RC_LIMIT) or ""
    if line in text.split("\n"):
        return f"{path} already loads it"
    body = text + ("" if not text or text.endswith("\n") else "\n") + line + "\n"
    home.write_atomic(name, body.encode(), mode=stat.S_IMODE(st.st_mode) if st else 0o644,
                      owner=(st.st_uid, st.st_gid) if st else None)
    return f"added to {path}: {line}"


def answer(argv: Sequence[str]) -> int | None:
    """``rigctl --install-completion [SHELL]`` or ``--show-completion [SHELL]``: the exit code; None for any
    other command line. Answered before typer, whose own options take no shell and write through links."""
    if not argv or argv[0] not in OPTIONS:
        return None
    if len(argv) > 2:
        sys.stderr.write(f"rigctl {argv[0]}: error: takes at most one word, the shell ({', '.join(SHELLS)})\n")
        return 2
    from rigctl.invocation import current  # noqa: PLC0415 - only for these two options

    notice = current().notice()
    if notice:
        sys.stderr.write(notice + "\n")
    shell = argv[1] if len(argv) == 2 else detect_shell()
    if shell not in SHELLS:
        said = f"shell {shell!r} is not one rigctl completes" if shell else "cannot tell which shell this is"
        sys.stderr.write(f"rigctl {argv[0]}: error: {said}\n  fix: name it: `rigctl {argv[0]} "
                         f"{'|'.join(SHELLS)}`\n")
        return 2
    if argv[0] == "--show-completion":
        sys.stdout.write(script_for(shell) + "\n")
        return 0
    try:
        for line in install(shell):
            sys.stdout.write(line + "\n")
    except CompletionError as err:
        sys.stderr.write(f"rigctl --install-completion: error: {err}\n  fix: {err.fix}\n")
        return 1
    sys.stdout.write("it takes effect in a new shell\n")
    return 0
