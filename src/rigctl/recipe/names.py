"""What may name a recipe. A leaf (no YAML, no pydantic): deployment records and shell completion check
names without loading either."""

from __future__ import annotations

import re

# A recipe name becomes file names (rigctl-NAME.container, its record and lock) and a container name.
RECIPE_NAME_MAX = 63
_RECIPE_NAME = re.compile(rf"[a-z0-9][a-z0-9._-]{{0,{RECIPE_NAME_MAX - 1}}}")


def default_container(name: str) -> str:
    """The container (and so the quadlet file and unit) of recipe ``name`` when it names none: rigctl-NAME."""
    return f"rigctl-{name}"


def recipe_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a recipe or its container, or None when it can."""
    if len(name) > RECIPE_NAME_MAX:
        return (f"a name of {len(name)} characters; a recipe or container name is at most {RECIPE_NAME_MAX} "
                "(it becomes unit, record and container names)")
    if not _RECIPE_NAME.fullmatch(name):
        return (f"{name!r} is not a recipe or container name: use lowercase letters, digits, '.', '_' "
                "and '-', starting with a letter or digit")
    return None
