"""rigctl recipes | show | validate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from rigctl.cli.base import JsonOpt, OverlayOpt, RecipeArg, SetOpt, app, finish
from rigctl.cli.output import Outcome


def _shown(text: str) -> str:
    """A name, path or problem as one terminal-safe line: file names in a user's directory are free text."""
    return text if text.isprintable() else ascii(text)[1:-1]


@app.command("recipes")
def recipes_cmd(as_json: JsonOpt = False) -> None:
    """List the recipes rigctl can find: $XDG_CONFIG_HOME/rigctl/recipes (which override bundled ones
    of the same name), then the bundled ones. Each is validated; an invalid one is listed with why."""

    def produce() -> Outcome:
        from rigctl.exitcodes import ExitCode
        from rigctl.recipe.catalog import search_dirs
        from rigctl.recipe.load import list_recipes

        rows = list_recipes()
        ok = all(r["valid"] for r in rows)

        def origin(r: dict[str, Any]) -> str:
            return f"{r['origin']}, overrides bundled" if r["overrides"] else r["origin"]

        def view(out: TextIO) -> None:
            width = max([len(_shown(r["name"])) for r in rows] + [4])
            o_width = max([len(origin(r)) for r in rows] + [6])
            out.write(f"{'NAME':<{width}}  {'ORIGIN':<{o_width}}  {'GPUS':>4}  {'CONTEXT':>9}  DESCRIPTION\n")
            for r in rows:
                gpus = "-" if r["gpus"] is None else str(r["gpus"])
                ctx = "-" if r["context_length"] is None else f"{r['context_length']:,}"
                about = r["description"] if r["valid"] else "INVALID, see below"
                out.write(f"{_shown(r['name']):<{width}}  {origin(r):<{o_width}}  {gpus:>4}  {ctx:>9}  {about}\n")
            for r in rows:
                if not r["valid"]:
                    out.write(f"\ninvalid  {_shown(r['path'])}\n")
                    out.writelines(f"  {_shown(problem)}\n" for problem in r["problems"])
            out.write(f"\nsearched: {', '.join(str(d) for d in search_dirs())}\n")

        return Outcome(
            "recipes", ok, {"recipes": rows, "searched": [str(d) for d in search_dirs()]}, view=view,
            exit_code=None if ok else ExitCode.INVALID_INPUT,
        )

    finish("recipes", as_json, produce)


@app.command("show")
def show_cmd(recipe: RecipeArg, sets: SetOpt = None, overlays: OverlayOpt = None, as_json: JsonOpt = False) -> None:
    """Show a recipe after overlays and --set, with every default filled in."""

    def produce() -> Outcome:
        import yaml

        from rigctl.recipe.load import load

        loaded = load(recipe, overlays=overlays or (), sets=sets or ())
        data = loaded.recipe.model_dump(mode="json")
        data["container"]["publish"] = loaded.recipe.publish.model_dump(mode="json")
        overrides = loaded.source.overrides
        payload: dict[str, Any] = {
            "source": {"path": str(loaded.source.path), "origin": loaded.source.origin,
                       "overrides": None if overrides is None else str(overrides),
                       "overlays": list(loaded.source.overlays)},
            "recipe": data,
        }

        def view(out: TextIO) -> None:
            over = "" if overrides is None else f", overrides the bundled {overrides}"
            out.write(f"# {loaded.source.path} ({loaded.source.origin}{over})\n")
            for applied in loaded.source.overlays:
                out.write(f"# + {applied}\n")
            out.write(yaml.safe_dump(data, sort_keys=False, width=110))

        return Outcome("show", True, payload, view=view)

    finish("show", as_json, produce)


@app.command("validate")
def validate_cmd(
    files: Annotated[list[Path], typer.Argument(metavar="FILE...", help="Recipe YAML files to check.")],
    as_json: JsonOpt = False,
) -> None:
    """Check recipe files strictly; every problem is listed as `file: dotted.path: problem`."""

    def produce() -> Outcome:
        from rigctl.errors import InvalidInputError
        from rigctl.exitcodes import ExitCode
        from rigctl.recipe.load import validate_file

        results: list[dict[str, Any]] = []
        for path in files:
            try:
                recipe = validate_file(path)
                results.append({"file": str(path), "ok": True, "name": recipe.name, "problems": []})
            except InvalidInputError as err:
                results.append({"file": str(path), "ok": False, "problems": err.problems})
        ok = all(r["ok"] for r in results)

        def view(out: TextIO) -> None:
            for r in results:
                if r["ok"]:
                    out.write(f"ok       {r['file']} ({r['name']})\n")
                else:
                    out.write(f"invalid  {_shown(r['file'])}\n")
                    out.writelines(f"  {_shown(problem)}\n" for problem in r["problems"])

        return Outcome("validate", ok, {"files": results}, view=view,
                       exit_code=None if ok else ExitCode.INVALID_INPUT)

    finish("validate", as_json, produce)
