"""rigctl recipes | show | validate."""

from __future__ import annotations

from typing import Any

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.base import app, finish, load_recipe
from rigctl.cli.output import Outcome


@app.command("recipes")
def recipes_cmd(as_json: opt.JsonOpt = False) -> None:
    """List the recipes rigctl can find: $XDG_CONFIG_HOME/rigctl/recipes (which override bundled ones
    of the same name), then the bundled ones. Each is validated; an invalid one is listed with why."""

    def produce() -> Outcome:
        from rigctl.exitcodes import ExitCode
        from rigctl.recipe.catalog import search_dirs
        from rigctl.recipe.load import list_recipes

        rows = list_recipes()
        ok = all(r["valid"] for r in rows)
        return Outcome(
            "recipes", ok, {"recipes": rows, "searched": [str(d) for d in search_dirs()]},
            view=views.recipes(rows, search_dirs()),
            exit_code=None if ok else ExitCode.INVALID_INPUT,
        )

    finish("recipes", as_json, produce)


@app.command("show")
def show_cmd(
    recipe: opt.RecipeArg, sets: opt.SetOpt = None, overlays: opt.OverlayOpt = None, as_json: opt.JsonOpt = False,
) -> None:
    """Show a recipe after overlays and --set, with every default filled in."""

    def produce() -> Outcome:

        loaded = load_recipe(recipe, overlays, sets)
        data = loaded.recipe.model_dump(mode="json")
        data["container"]["publish"] = loaded.recipe.publish.model_dump(mode="json")
        overrides = loaded.source.overrides
        payload: dict[str, Any] = {
            "source": {"path": str(loaded.source.path), "origin": loaded.source.origin,
                       "overrides": None if overrides is None else str(overrides),
                       "overlays": list(loaded.source.overlays)},
            "recipe": data,
        }

        return Outcome("show", True, payload, view=views.show(loaded, data))

    finish("show", as_json, produce)


@app.command("validate")
def validate_cmd(files: opt.RecipeFilesArg, as_json: opt.JsonOpt = False) -> None:
    """Check recipes strictly, by name or file; every problem is listed as `file: dotted.path: problem`,
    and a file whose `name:` is not its file name is warned about (it is served under its `name:`)."""

    def produce() -> Outcome:
        from rigctl.errors import InvalidInputError
        from rigctl.exitcodes import ExitCode
        from rigctl.recipe.catalog import name_mismatch, recipe_file
        from rigctl.recipe.load import validate_file

        results: list[dict[str, Any]] = []
        for given in files:
            try:
                recipe = validate_file(given)
                mismatch = name_mismatch(recipe_file(given), recipe.name)
                results.append({"file": given, "ok": True, "name": recipe.name, "problems": [],
                                "warnings": [mismatch] if mismatch else []})
            except InvalidInputError as err:
                results.append({"file": given, "ok": False, "problems": err.problems, "warnings": []})
        ok = all(r["ok"] for r in results)

        return Outcome("validate", ok, {"files": results}, view=views.validate(results),
                       exit_code=None if ok else ExitCode.INVALID_INPUT)

    finish("validate", as_json, produce)
