"""The typer app, the options every command shares, and the wrapper that turns a core call into
output and an exit code. Command modules register on ``app``; none of them prints directly."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, NoReturn

import typer

from rigctl.cli.output import Outcome, emit, emit_error
from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode

app = typer.Typer(
    name="rigctl",
    help="Make self-hosted LLM serving boring: recipes, preflight, quadlet units, verification.",
    no_args_is_help=True,
    add_completion=False,
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
    str, typer.Argument(metavar="RECIPE", help="A recipe name (see `rigctl recipes`) or a YAML path.")
]
InventoryOpt = Annotated[
    str | None,
    typer.Option("--inventory", metavar="FILE", help="Use a captured `rigctl inventory --json` instead of this host."),
]


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
    """argv without the root's --host/--hosts options (in either `--opt V` or `--opt=V` form)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        if word in {"--host", "--hosts"}:
            skip = True
            continue
        if word.startswith(("--host=", "--hosts=")):
            continue
        out.append(word)
    return out


@app.callback()
def root(
    host: Annotated[
        str | None,
        typer.Option("--host", metavar="NAME", help="Run the command on this inventory host over ssh."),
    ] = None,
    hosts_file: Annotated[
        str | None,
        typer.Option("--hosts", metavar="FILE", help="Host inventory (default $XDG_CONFIG_HOME/rigctl/hosts.yaml)."),
    ] = None,
) -> None:
    """Make self-hosted LLM serving boring: recipes, preflight, quadlet units, verification."""
    if host is None:
        return
    import os
    import sys

    argv = _strip_host_options(sys.argv[1:])
    as_json = "--json" in argv
    command = next((w for w in argv if not w.startswith("-")), "?")

    def produce_remote() -> Outcome:
        from rigctl.fleet.inventory import load_inventory
        from rigctl.fleet.remote import remote_argv, run_remote_rigctl

        target = load_inventory(hosts_file).get(host)
        if not as_json:  # let the remote text and exit status straight through
            sys.stdout.flush()
            ssh_argv = remote_argv(target, argv)
            os.execvp(ssh_argv[0], ssh_argv)
        remote = run_remote_rigctl(target, argv)
        document = remote.document or {}
        payload = {k: v for k, v in document.items() if k not in {"rigctl", "command", "ok"}}
        payload["host"] = host
        return Outcome(command, bool(document.get("ok")), payload, exit_code=ExitCode(remote.rc)
                       if remote.rc in {int(c) for c in ExitCode} else ExitCode.INTERNAL)

    finish(command, as_json, produce_remote)
