"""Malformed recipes nobody wrote by hand: whatever the mutation, loading gives a Recipe or an
InvalidInputError with `file: path: problem` lines, never another exception."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rigctl.errors import InvalidInputError
from rigctl.recipe.catalog import bundled_recipes_dir, read_yaml_mapping
from rigctl.recipe.load import validate_data
from rigctl.recipe.model import Recipe

BASES = [read_yaml_mapping(p) for p in sorted(bundled_recipes_dir().glob("*.yaml"))]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(allow_nan=True),
    st.text(max_size=40), st.just("../etc"), st.just("a\nb"), st.just("%h$HOME\\"),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=6)


def paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, child in node.items():
            found += paths(child, (*prefix, key))
    elif isinstance(node, list):
        for i, child in enumerate(node):
            found += paths(child, (*prefix, i))
    return found


def mutate(data: dict[str, Any], path: tuple[Any, ...], action: str, value: Any) -> dict[str, Any]:
    data = copy.deepcopy(data)
    parent: Any = data
    for part in path[:-1]:
        parent = parent[part]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "replace":
        parent[last] = value
    elif isinstance(parent, dict):
        parent[f"{last}_extra"] = value
    return data


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_any_mutation_is_a_recipe_or_a_clean_refusal(data: st.DataObject) -> None:
    base = data.draw(st.sampled_from(BASES))
    path = data.draw(st.sampled_from(paths(base)))
    action = data.draw(st.sampled_from(["delete", "replace", "add"]))
    mutated = mutate(base, path, action, data.draw(values))
    try:
        recipe = validate_data(mutated, "fuzz.yaml")
    except InvalidInputError as err:
        assert err.problems and all(p.startswith("fuzz.yaml: ") for p in err.problems)
    else:
        assert isinstance(recipe, Recipe) and recipe.service.restart == "always"
