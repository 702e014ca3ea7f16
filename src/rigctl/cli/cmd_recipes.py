"""rigctl recipes | show | validate | new | schema: the recipes rigctl can find, one of them whole, checks
of recipe files, a new user recipe to start from, and the recipe JSON Schema.

Each command imports the recipe library inside it (YAML, pydantic and the recipe models: most of what it
costs to start, ``benchmarks/cli_imports.py``), so that its --help and shell completion do without."""

from __future__ import annotations

from typing import Any

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.output import Outcome, note, printable
from rigctl.cli.root import app, finish, load_recipe, usage_error
from rigctl.cli.views.meta import new as new_view
from rigctl.cli.views.meta import schema as schema_view
from rigctl.errors import InvalidInputError
from rigctl.exitcodes import ExitCode
from rigctl.util.safefs import SafeDir


@app.command("recipes")
def recipes_cmd(as_json: opt.JsonOpt = False) -> None:
    """List the recipes rigctl can find: $XDG_CONFIG_HOME/rigctl/recipes (which override bundled ones
    of the same name), then the bundled ones. Each is validated; an invalid one is listed with why."""

    def produce() -> Outcome:
        from rigctl.recipe.catalog import search_dirs  # noqa: PLC0415 - the recipe library (see above)
        from rigctl.recipe.load import list_recipes  # noqa: PLC0415

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
        from rigctl.recipe.catalog import name_mismatch, recipe_file  # noqa: PLC0415 - the recipe library
        from rigctl.recipe.load import validate_file  # noqa: PLC0415

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


@app.command("schema")
def schema_cmd(name: opt.SchemaNameArg, out: opt.SchemaOutOpt = None, as_json: opt.JsonOpt = False) -> None:
    """Print the JSON Schema of a recipe, for editors: yaml-language-server checks a recipe as you type
    when its first line is `# yaml-language-server: $schema=PATH`."""

    def produce() -> Outcome:
        from rigctl.recipe.schema import SCHEMA_NAMES, recipe_schema, schema_text  # noqa: PLC0415 - the recipe model

        if name not in SCHEMA_NAMES:
            raise usage_error(f"no schema {name!r}", name, SCHEMA_NAMES, "`rigctl schema recipe` is the one there is")
        document = recipe_schema()
        path = None
        if out is not None:
            with SafeDir.open(out.parent) as directory:  # the directory is the user's, trusted as given
                directory.write_atomic(out.name, schema_text(document).encode())
            path = str(out)
        return Outcome("schema", True, {"name": name, "path": path, "schema": document},
                       view=schema_view(document, path))

    finish("schema", as_json, produce)


@app.command("new")
def new_cmd(
    name: opt.NewNameArg, source: opt.NewFromOpt, out: opt.NewOutOpt = None, as_json: opt.JsonOpt = False,
) -> None:
    """Write a new user recipe to start from: a copy of RECIPE named NAME, with the schema comment on top,
    into $XDG_CONFIG_HOME/rigctl/recipes (never over an existing file). The recipe schema goes beside it,
    unless a file of that name that is not rigctl's schema is there: that is left alone, and said."""

    def produce() -> Outcome:
        from rigctl.recipe.scaffold import new_recipe  # noqa: PLC0415 - the recipe library

        made = new_recipe(name, source, out=out)
        if not made.schema_written:
            note(f"rigctl new: left {printable(made.schema)} alone: {printable(made.schema_problem or '')}; "
                 "`rigctl schema recipe --out FILE` writes the schema where you choose")
        return Outcome("new", True, made.to_dict(), view=new_view(made))

    finish("new", as_json, produce)
