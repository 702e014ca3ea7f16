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
