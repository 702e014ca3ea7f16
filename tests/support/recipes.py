"""Bundled recipes with a few values changed, validated like any recipe."""

from __future__ import annotations

from typing import Any

from rigctl.recipe.load import load, validate_data
from rigctl.recipe.model import Recipe


def recipe_with(name: str = "glm53-flash", **changes: Any) -> Recipe:
    """``recipe_with(container__ipc="private")``: double underscores separate the dotted path."""
    data = load(name).recipe.model_dump(mode="json")
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for part in parents:
            node = node[part]
        node[last] = value
    return validate_data(data, "test")
