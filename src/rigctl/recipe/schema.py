"""The recipe's JSON Schema, made from the model itself, so that an editor checks a recipe as it is typed
by the same rules ``rigctl validate`` applies (the checks that span fields, such as the GPU layout's
arithmetic, are the model's alone: a schema cannot say them).

yaml-language-server (VS Code's YAML extension, neovim's yamlls, Helix) picks a schema up from a comment
on a recipe's first line, a path relative to the recipe (``MODELINE``); ``rigctl new`` writes both.
"""

from __future__ import annotations

import json
from typing import Any

from rigctl.recipe.model import Recipe

SCHEMA_NAMES = ("recipe",)  # what `rigctl schema NAME` can print
SCHEMA_FILE = "recipe.schema.json"  # the name `rigctl new` gives it beside the recipes it writes
DIALECT = "https://json-schema.org/draft/2020-12/schema"  # the dialect pydantic writes
MODELINE = "# yaml-language-server: $schema={ref}"


def recipe_schema() -> dict[str, Any]:
    """The JSON Schema of a recipe file, with its dialect and a title an editor can show."""
    schema = Recipe.model_json_schema()
    schema.pop("title", None)
    return {
        "$schema": DIALECT,
        "title": "rigctl recipe",
        "description": "One served model: checkpoint, pinned image, engine, GPU layout, container, service, "
                       "verification, known issues. Checked in full by `rigctl validate`.",
        **schema,
    }


def schema_text(document: dict[str, Any] | None = None) -> str:
    """The schema (``recipe_schema()``'s, unless given) as a file holds it: stable key order, so a
    regenerated file differs only when it changed."""
    return json.dumps(recipe_schema() if document is None else document, indent=2, allow_nan=False) + "\n"


def modeline(ref: str = SCHEMA_FILE) -> str:
    """The comment that points yaml-language-server at the schema (``ref``: a path relative to the recipe,
    an absolute path or a URL)."""
    return MODELINE.format(ref=ref)
