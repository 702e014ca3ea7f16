"""Shell completion callbacks (``rigctl --install-completion``). A callback runs on every Tab press, so it
reads as little as it can: recipe names come from file names in the recipe directories, without
opening or validating a recipe (``rigctl recipes`` does that)."""

from __future__ import annotations


def recipe_names(incomplete: str) -> list[tuple[str, str]]:
    """The recipes whose name starts with what was typed, each with where it comes from. A file whose
    name cannot name a recipe (a space, a control character) is left out: the shell would split it."""
    from rigctl.recipe.catalog import list_recipe_files  # noqa: PLC0415 - only when completing
    from rigctl.recipe.names import recipe_name_problem  # noqa: PLC0415

    return [(name, origin) for name, _, origin in list_recipe_files()
            if name.startswith(incomplete) and recipe_name_problem(name) is None]
