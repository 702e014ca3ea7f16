"""The typer app, its root callback (the options before the command), and the wrapper that turns a core
call into output and an exit code. Command modules register on ``app``; none of them prints directly.
Every option is declared in ``cli.options``."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, NoReturn, TextIO

import typer

from rigctl.cli import options as opt
from rigctl.cli.commands import ROOT_OPTIONS, ROOT_SUMMARY
from rigctl.cli.output import Outcome, emit, emit_error, recipe_override, set_verbosity
from rigctl.errors import RigctlError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.invocation import confine_children, current
from rigctl.places import Scope, resolve_scope
from rigctl.util.text import VERSION, printable, version_facts

app = typer.Typer(
    name="rigctl",
    help=ROOT_SUMMARY,
    no_args_is_help=True,
    # --install-completion / --show-completion are listed by typer but answered by cli.complete (app.main);
    # recipe names complete through cli.complete too
    add_completion=True,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from rigctl.recipe.load import LoadedRecipe


def scope_choice(user: bool, system: bool) -> Scope | None:
    """The scope --user/--system chose; None for neither, which each command reads by one rule
    (``rigctl.deploy.state.search_scopes``, or the default scope for a new deployment)."""
    if not (user or system):
        return None
    return resolve_scope(user, system)


def load_recipe(recipe: str, overlays: Sequence[str] | None = None, sets: Sequence[str] | None = None) -> LoadedRecipe:
    """The recipe a command names, with its overlays and --set: every command that deploys, plans or shows
    one loads it here, so a user recipe that replaces a bundled one is named by each (``output.recipe_override``)."""
    from rigctl.recipe.load import load  # noqa: PLC0415 - the recipe library (PyYAML, pydantic), for its commands only

    loaded = load(recipe, overlays=overlays or (), sets=sets or ())
    if loaded.source.origin == "user" and loaded.source.overrides is not None:
        recipe_override(loaded.recipe.name, str(loaded.source.path), str(loaded.source.overrides))
    return loaded


class RootOptions:
    """What the root's options said, for the one run (``root`` sets it every time)."""

    hosts: str | None = None  # --hosts FILE before the command
    allow_ssh_options: bool = False  # --allow-ssh-options before the command (with --host)


ROOT = RootOptions()


def hosts_path(own: str | None) -> str | None:
    """The one rule for the host inventory: the command's own --hosts, else the root's
    (`rigctl --hosts FILE fleet status`), else None (fleet.inventory's default path)."""
    return own if own is not None else ROOT.hosts


def scope_hint(other_scope: str | None, inventory: str | None, again: str) -> str | None:
    """What to type instead when the system scope cannot run a quadlet here and the user scope can
    (``other_scope``: why, as preflight found it in the facts). ``again``: the command as typed, to which
    --user is added. None for a captured --inventory (its facts were gathered for the scope asked, on that
    box), or when there is nothing to say."""
    if inventory is not None or other_scope is None:
        return None
    return f"{other_scope}: `{again} --user`"


def usage_error(message: str, given: str, known: Iterable[str], then: str) -> UsageError:
    """A usage error (exit 2) naming the closest known words to ``given``, then ``then``."""
    close = difflib.get_close_matches(given, list(known), n=3, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    return UsageError(printable(message), fix=f"{hint}{then}")


def finish(command: str, as_json: bool, produce: Callable[[], Outcome]) -> NoReturn:
    """Run ``produce``, render its outcome, exit with its code. RigctlError is an expected failure:
    its message is printed without a traceback."""
    try:
        code = emit(produce(), as_json=as_json)
    except RigctlError as err:
        code = emit_error(command, err, as_json=as_json)
    except KeyboardInterrupt:
        code = int(ExitCode.INTERRUPTED)
    raise typer.Exit(code)


def _strip_host_options(argv: list[str]) -> list[str]:
    """argv without the root's --host/--hosts options (in either `--opt V` or `--opt=V` form). Only the
    words before the command are the root's: a later `--hosts` belongs to the command (fleet)."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        if word in {"--host", "--hosts"}:
            next(words, None)
        elif word not in ROOT_OPTIONS["--allow-ssh-options"].names and not word.startswith(("--host=", "--hosts=")):
            out.append(word)
            if not word.startswith("-"):  # the command: the rest is its own
                out += words
    return out


@app.callback()
def root(  # noqa: PLR0917 - typer passes the root's options by position
    host: opt.HostOpt = None, hosts_file: opt.RootHostsOpt = None,
    allow_ssh_options: opt.RootAllowSshOptionsOpt = False, quiet: opt.QuietOpt = False,
    verbose: opt.VerboseOpt = False, version: opt.VersionOpt = False,
) -> None:
    """Make self-hosted LLM serving boring: recipes, preflight, quadlet units, verification."""
    if quiet and verbose:
        raise typer.Exit(emit_error("rigctl", UsageError("--quiet and --verbose exclude each other"),
                                    as_json="--json" in sys.argv))
    set_verbosity(quiet=quiet, verbose=verbose)
    notice = current().notice()  # root with a user's HOME or XDG directories: said once, whatever the command
    if notice:
        sys.stderr.write(notice + "\n")
    for line in confine_children():  # root: no program from a directory or a file another user controls
        sys.stderr.write(f"rigctl: as root, {line}\n")
    ROOT.hosts = hosts_file
    ROOT.allow_ssh_options = allow_ssh_options
    if host is None:
        return
    argv = _strip_host_options(sys.argv[1:])
    as_json = "--json" in argv
    command = next((w for w in argv if not w.startswith("-")), "?")
    if command == "version":  # both ends' versions, not only the remote's
        _version_on_host(hosts_file, host, as_json)

    def produce_remote() -> Outcome:
        # the fleet's inventory models and ssh client: only for --host, most of what it costs to start
        from rigctl.fleet.answer import RemoteAnswerError, run_remote_rigctl, stream_remote_rigctl  # noqa: PLC0415
        from rigctl.fleet.loader import load_inventory  # noqa: PLC0415

        target = load_inventory(hosts_file).get(host, allow_ssh_options=allow_ssh_options)
        if not as_json:  # the remote text comes through as it is printed, control sequences made visible
            code = stream_remote_rigctl(target, argv, out=_write_to(sys.stdout), err=_write_to(sys.stderr),
                                        allow_ssh_options=allow_ssh_options)
            return Outcome(command, code == ExitCode.OK, exit_code=code)
        remote = run_remote_rigctl(target, argv, allow_ssh_options=allow_ssh_options)
        if remote.problem is not None:
            raise RemoteAnswerError(remote.failure(target, " ".join(argv)),
                                    fix=f"run it on {host} by hand to see what it prints; check `rigctl:` "
                                        "for the host in the inventory")
        payload = {k: v for k, v in (remote.document or {}).items() if k not in {"rigctl", "command", "ok"}}
        payload["host"] = host
        return Outcome(command, remote.ok, payload, exit_code=remote.exit_code)

    finish(command, as_json, produce_remote)


def _version_on_host(hosts_file: str | None, host: str, as_json: bool) -> None:
    """`rigctl --host NAME version`: this rigctl's version and the host's, side by side."""

    def produce() -> Outcome:
        # the fleet's inventory and ssh client: only for --host (about a quarter of a second on a busy box)
        from rigctl.cli.views.meta import version  # noqa: PLC0415
        from rigctl.fleet.answer import RemoteAnswerError, remote_version, run_remote_rigctl  # noqa: PLC0415
        from rigctl.fleet.loader import load_inventory  # noqa: PLC0415

        allow = ROOT.allow_ssh_options  # --allow-ssh-options before the command
        target = load_inventory(hosts_file).get(host, allow_ssh_options=allow)
        answer = run_remote_rigctl(target, ["version"], allow_ssh_options=allow)
        if answer.problem is not None or answer.document is None:
            raise RemoteAnswerError(answer.failure(target, "version"))
        said = remote_version(answer.document)
        python = answer.document.get("python")
        remote = {"version": said, "python": python if isinstance(python, str) else "unknown"}
        payload = {**version_facts(), "host": host, "remote": remote, "skew": said != VERSION}
        return Outcome("version", True, payload, view=version(payload))

    finish("version", as_json, produce)


def _write_to(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write
