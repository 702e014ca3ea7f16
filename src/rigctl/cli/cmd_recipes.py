"""rigctl recipes | show | validate."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, TextIO

import typer

from rigctl.cli.base import JsonOpt, OverlayOpt, RecipeArg, SetOpt, app, finish
from rigctl.cli.output import Outcome


@app.command("recipes")
def recipes_cmd(as_json: JsonOpt = False) -> None:
    """List the recipes rigctl can find: bundled ones, then $XDG_CONFIG_HOME/rigctl/recipes."""

    def produce() -> Outcome:
        from rigctl.recipe.catalog import list_recipes, search_dirs

        rows = list_recipes()

        def view(out: TextIO) -> None:
            width = max([len(r["name"]) for r in rows] + [4])
            out.write(f"{'NAME':<{width}}  {'ORIGIN':<7}  {'GPUS':>4}  {'CONTEXT':>9}  DESCRIPTION\n")
            for r in rows:
                gpus = "-" if r["gpus"] is None else str(r["gpus"])
                ctx = "-" if r["context_length"] is None else f"{r['context_length']:,}"
                out.write(f"{r['name']:<{width}}  {r['origin']:<7}  {gpus:>4}  {ctx:>9}  {r['description']}\n")
            out.write(f"\nsearched: {', '.join(str(d) for d in search_dirs())}\n")

        return Outcome(
            "recipes", True, {"recipes": rows, "searched": [str(d) for d in search_dirs()]}, view=view
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
        payload: dict[str, Any] = {
            "source": {"path": str(loaded.source.path), "origin": loaded.source.origin,
                       "overlays": list(loaded.source.overlays)},
            "recipe": data,
        }

        def view(out: TextIO) -> None:
            out.write(f"# {loaded.source.path} ({loaded.source.origin})\n")
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
                    out.write(f"invalid  {r['file']}\n")
                    for problem in r["problems"]:
                        out.write(f"  {problem}\n")

        return Outcome("validate", ok, {"files": results}, view=view,
                       exit_code=None if ok else ExitCode.INVALID_INPUT)

    finish("validate", as_json, produce)
