"""The typer app, the options every command shares, and the wrapper that turns a core call into
output and an exit code. Command modules register on ``app``; none of them prints directly."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, NoReturn, TextIO

import typer

from rigctl.cli.complete import recipe_names
from rigctl.cli.output import Outcome, emit, emit_error, set_verbosity
from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode

app = typer.Typer(
    name="rigctl",
    help="Make self-hosted LLM serving boring: recipes, preflight, quadlet units, verification.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion; recipe names complete (cli.complete)
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object on stdout instead of text.")]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", metavar="KEY.PATH=VALUE", help="Override one recipe value (YAML), e.g. engine.port=8002."),
]
OverlayOpt = Annotated[
    list[str] | None,
    typer.Option("--overlay", "-f", metavar="FILE", help="YAML file deep-merged over the recipe (repeatable)."),
]
RecipeArg = Annotated[
    str, typer.Argument(metavar="RECIPE", help="A recipe name (see `rigctl recipes`) or a YAML path.",
                        autocompletion=recipe_names)
]
InventoryOpt = Annotated[
    str | None,
    typer.Option("--inventory", metavar="FILE", help="Use a captured `rigctl inventory --json` instead of this host."),
]
GpusOpt = Annotated[
    str | None,
    typer.Option("--gpus", metavar="ID,...", help="Use these GPUs: UUIDs (preferred) or indices, comma-separated "
                 "(default: the layout preflight chooses)."),
]
ForceOpt = Annotated[
    list[str] | None,
    typer.Option("--force", metavar="ID,...", help="Downgrade these preflight checks' failures to warnings, e.g. "
                 "known-bad (repeatable)."),
]
UserOpt = Annotated[bool, typer.Option("--user", help="User scope: ~/.config/containers/systemd, systemctl --user.")]
SystemOpt = Annotated[bool, typer.Option("--system", help="System scope: /etc/containers/systemd (root).")]

if TYPE_CHECKING:
    from rigctl.places import Scope


def scope_choice(user: bool, system: bool) -> Scope | None:
    """The scope --user/--system chose; None for neither, which each command reads by one rule
    (``rigctl.deploy.state.search_scopes``, or the default scope for a new deployment)."""
    if not (user or system):
        return None
    from rigctl.places import resolve_scope

    return resolve_scope(user, system)


class RootOptions:
    """What the root's options said, for the one run (``root`` sets it every time)."""

    hosts: str | None = None  # --hosts FILE before the command


ROOT = RootOptions()


def hosts_path(own: str | None) -> str | None:
    """The one rule for the host inventory: the command's own --hosts, else the root's
    (`rigctl --hosts FILE fleet status`), else None (fleet.inventory's default path)."""
    return own if own is not None else ROOT.hosts


def scope_hint(scope: Scope, inventory: str | None, again: str) -> str | None:
    """What to type instead when the system scope cannot run a quadlet here and the user scope can: the
    system manager has no quadlet generator, or is not running, while the user's has one and runs (root
    in a container with a `systemd --user` manager). ``again``: the command as typed, to which --user is
    added. None for a captured --inventory (this host's managers say nothing about that box), for the
    user scope (a plain user cannot take the system's), or when there is nothing to say."""
    if inventory is not None or scope != "system":
        return None
    from rigctl.host.probes import generator_elsewhere, probe_systemd

    moved = generator_elsewhere(scope)
    if moved is not None:
        return (f"the system manager has no quadlet generator here, the user manager has one ({moved[1]}): "
                f"`{again} --user`")
    managers = probe_systemd()
    if not managers.system_manager and managers.user_manager:
        return f"no systemd system manager runs here, a user manager does: `{again} --user`"
    return None


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
        elif not word.startswith(("--host=", "--hosts=")):
            out.append(word)
            if not word.startswith("-"):  # the command: the rest is its own
                out += words
    return out


def _print_version(value: bool) -> None:
    if value:
        from rigctl.util.text import version_line

        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def root(
    host: Annotated[
        str | None,
        typer.Option("--host", metavar="NAME", help="Run the command on this inventory host over ssh."),
    ] = None,
    hosts_file: Annotated[
        str | None,
        typer.Option("--hosts", metavar="FILE", help="Host inventory for --host and the fleet commands (default "
                                                     "$XDG_CONFIG_HOME/rigctl/hosts.yaml)."),
    ] = None,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Print only the result and errors: no notes, no progress."),
    ] = False,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Also print each command rigctl runs (podman, systemctl, ssh).")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", is_eager=True, callback=_print_version, help="Print rigctl's version and exit."),
    ] = False,
) -> None:
    """Make self-hosted LLM serving boring: recipes, preflight, quadlet units, verification."""
    if quiet and verbose:
        from rigctl.errors import UsageError

        raise typer.Exit(emit_error("rigctl", UsageError("--quiet and --verbose exclude each other"),
                                    as_json="--json" in sys.argv))
    set_verbosity(quiet=quiet, verbose=verbose)
    ROOT.hosts = hosts_file
    if host is None:
        return
    argv = _strip_host_options(sys.argv[1:])
    as_json = "--json" in argv
    command = next((w for w in argv if not w.startswith("-")), "?")
    if command == "version":  # both ends' versions, not only the remote's
        from rigctl.cli.cmd_meta import version_on_host

        version_on_host(hosts_file, host, as_json)

    def produce_remote() -> Outcome:
        from rigctl.fleet.inventory import load_inventory
        from rigctl.fleet.remote import RemoteAnswerError, run_remote_rigctl, stream_remote_rigctl

        target = load_inventory(hosts_file).get(host)
        if not as_json:  # the remote text comes through as it is printed, control sequences made visible
            code = stream_remote_rigctl(target, argv, out=_write_to(sys.stdout), err=_write_to(sys.stderr))
            return Outcome(command, code == ExitCode.OK, exit_code=code)
        remote = run_remote_rigctl(target, argv)
        if remote.problem is not None:
            raise RemoteAnswerError(remote.failure(target, " ".join(argv)),
                                    fix=f"run it on {host} by hand to see what it prints; check `rigctl:` "
                                        "for the host in the inventory")
        payload = {k: v for k, v in (remote.document or {}).items() if k not in {"rigctl", "command", "ok"}}
        payload["host"] = host
        return Outcome(command, remote.ok, payload, exit_code=remote.exit_code)

    finish(command, as_json, produce_remote)


def _write_to(stream: TextIO) -> Callable[[str], None]:
    def write(text: str) -> None:
        stream.write(text)
        stream.flush()

    return write
