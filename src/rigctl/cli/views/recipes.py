"""What `recipes`, `show` and `validate` print. Recipe files live in a user's directory: their names,
paths and problems are free text, shown as one terminal-safe line each."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from rigctl.cli.views.draw import View, last_column, prose
from rigctl.util.text import LINE_LIMIT, printable

if TYPE_CHECKING:
    from rigctl.recipe.load import LoadedRecipe


def _origin(row: dict[str, Any]) -> str:
    return f"{row['origin']}, overrides bundled" if row["overrides"] else row["origin"]


def recipes(rows: Sequence[dict[str, Any]], searched: Sequence[Path]) -> View:
    """``rows``: recipe.load.list_recipes's, one per recipe file found."""

    def view(out: TextIO) -> None:
        width = max([len(printable(r["name"])) for r in rows] + [4])
        o_width = max([len(_origin(r)) for r in rows] + [6])
        last_column(out, f"{'NAME':<{width}}  {'ORIGIN':<{o_width}}  {'GPUS':>4}  {'CONTEXT':>9}  ", "DESCRIPTION")
        for r in rows:
            gpus = "-" if r["gpus"] is None else str(r["gpus"])
            ctx = "-" if r["context_length"] is None else f"{r['context_length']:,}"
            about = printable(r["description"], LINE_LIMIT) if r["valid"] else "INVALID, see below"
            last_column(out, f"{printable(r['name']):<{width}}  {_origin(r):<{o_width}}  {gpus:>4}  {ctx:>9}  ", about)
        for r in rows:
            if not r["valid"]:
                out.write(f"\ninvalid  {printable(r['path'])}\n")
                out.writelines(f"  {printable(problem, LINE_LIMIT)}\n" for problem in r["problems"])
        out.write("\n")
        prose(out, ", ".join(str(d) for d in searched), first="searched: ", rest="  ")

    return view


def show(loaded: LoadedRecipe, data: dict[str, Any]) -> View:
    """The recipe as YAML (``data``: its JSON form), under where it came from and the overlays applied."""

    def view(out: TextIO) -> None:
        import yaml

        overrides = loaded.source.overrides
        over = "" if overrides is None else f", overrides the bundled {overrides}"
        out.write(f"# {loaded.source.path} ({loaded.source.origin}{over})\n")
        for applied in loaded.source.overlays:
            out.write(f"# + {applied}\n")
        out.write(yaml.safe_dump(data, sort_keys=False, width=110))

    return view


def validate(results: Sequence[dict[str, Any]]) -> View:
    """``results``: one per file, {file, ok, name (when ok), problems, warnings}."""

    def view(out: TextIO) -> None:
        for r in results:
            if r["ok"]:
                out.write(f"ok       {printable(r['file'])} ({printable(r['name'])})\n")
                out.writelines(f"  warning: {printable(warning, LINE_LIMIT)}\n" for warning in r["warnings"])
            else:
                out.write(f"invalid  {printable(r['file'])}\n")
                out.writelines(f"  {printable(problem, LINE_LIMIT)}\n" for problem in r["problems"])

    return view
