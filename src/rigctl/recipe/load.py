"""Loading recipes: overlaying and validating them, and listing them all.

An overlay file is deep-merged over it, then ``--set a.b=value`` pairs (value parsed as YAML, by the
same bounded loader as files) in order. Every defect in a file comes back as one ``InvalidInputError``
listing ``file: dotted.path: problem (line N)`` lines (worded by ``recipe.problems``), a bad ``--set`` as
a ``UsageError``; nothing here raises a raw pydantic or YAML error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rigctl.errors import InvalidInputError, UsageError
from rigctl.recipe.catalog import (
    MAX_DEPTH,
    RecipeSource,
    YamlLoader,
    YamlTooBig,
    bundled_recipes_dir,
    list_recipe_files,
    read_yaml_mapping,
    recipe_files,
    resolve,
)
from rigctl.recipe.model import Recipe
from rigctl.recipe.names import recipe_name_problem
from rigctl.recipe.problems import Origin, format_validation_error
from rigctl.util.text import clip

__all__ = [
    "LoadedRecipe", "apply_set", "deep_merge", "list_recipes", "load", "parse_set",
    "validate_data", "validate_file",
]


@dataclass(frozen=True)
class LoadedRecipe:
    recipe: Recipe
    source: RecipeSource


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Mappings merge key by key; anything else (lists included) in ``over`` replaces."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def parse_set(assignment: str) -> tuple[list[str], Any]:
    """``a.b.c=value`` -> (["a", "b", "c"], parsed value). Values are YAML: ``8002`` is an int,
    ``[0, 1]`` a list, ``'8002'`` a string."""
    key, sep, raw = assignment.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(parts):
        raise UsageError(f"--set {clip(assignment)}: expected KEY.PATH=VALUE, e.g. checkpoint.path=/models/glm")
    if len(parts) > MAX_DEPTH:  # no recipe is this deep; building it would only recurse
        raise UsageError(f"--set {clip(key)}: a path of {len(parts)} parts; a recipe is at most {MAX_DEPTH} deep")
    try:
        value = yaml.load(raw, Loader=YamlLoader) if raw.strip() else ""
    except YamlTooBig as exc:
        raise UsageError(f"--set {clip(key)}: {exc}") from None
    except yaml.YAMLError:  # not YAML (`--set served_name=a: b`): the text itself
        value = raw
    return parts, value


def apply_set(data: dict[str, Any], parts: Sequence[str], value: Any) -> dict[str, Any]:
    """Set ``value`` at ``parts``; a numeric part indexes into an existing list
    (``container.volumes.0.host=/data/glm``)."""
    merged: dict[str, Any] = _set_in(data, list(parts), value, [])
    return merged


_INDEX = re.compile(r"[0-9]{1,9}")


def _set_in(node: Any, parts: list[str], value: Any, trail: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(node, list):
        # ASCII digits only ('²'.isdigit() is true), and few of them: int() refuses 4300 and more
        index = int(head) if _INDEX.fullmatch(head) else len(node)
        if index >= len(node):
            where = ".".join(trail) or "(top level)"
            raise UsageError(f"--set: {where} is a list of {len(node)}; {clip(head)} is not an index into it")
        copy = list(node)
        copy[index] = _set_in(node[index], rest, value, [*trail, head])
        return copy
    merged = dict(node) if isinstance(node, Mapping) else {}
    merged[head] = _set_in(merged.get(head), rest, value, [*trail, head])
    return merged


def validate_data(data: Mapping[str, Any], source: str, origins: Sequence[Origin] = ()) -> Recipe:
    """The recipe, or every problem with it (``origins``: the files and --set it was built from, which
    give each problem its line)."""
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(format_validation_error(source, exc, model=Recipe, origins=origins)) from None


def load(
    name_or_path: str,
    *,
    overlays: Iterable[str | Path] = (),
    sets: Iterable[str] = (),
) -> LoadedRecipe:
    source = resolve(name_or_path)
    data = read_yaml_mapping(source.path)
    applied: list[str] = []
    origins = [Origin(path=source.path)]
    for overlay in overlays:
        data = deep_merge(data, read_yaml_mapping(Path(overlay)))
        applied.append(str(overlay))
        origins.append(Origin(str(overlay), path=Path(overlay)))
    for assignment in sets:
        parts, value = parse_set(assignment)
        data = apply_set(data, parts, value)
        # the label starts every problem line: a huge value is cut, not repeated in each
        applied.append(f"--set {assignment}" if len(assignment) <= 200 else f"--set {clip(assignment, 100)}")
        origins.append(Origin(applied[-1], keys=tuple(parts)))
    label = str(source.path) if not applied else f"{source.path} (+ {', '.join(applied)})"
    recipe = validate_data(data, label, origins)
    return LoadedRecipe(recipe, replace(source, overlays=tuple(applied)))


def validate_file(path: Path | str) -> Recipe:
    """``rigctl validate``: a file, or a recipe by name when no file of that name is here."""
    found = Path(path)
    if not os.path.lexists(found):
        found = resolve(str(path)).path
    return validate_data(read_yaml_mapping(found), str(path), [Origin(path=found)])


def list_recipes() -> list[dict[str, Any]]:
    """A row per recipe `rigctl recipes` lists, each validated: an invalid one says why, and its
    values (shown only when valid) cannot upset the listing."""
    bundled = dict(recipe_files(bundled_recipes_dir()))
    rows: list[dict[str, Any]] = []
    for name, path, origin in list_recipe_files():
        row: dict[str, Any] = {
            "name": name, "origin": origin, "path": str(path),
            "overrides": str(bundled[name]) if origin == "user" and name in bundled else None,
            "valid": False, "problems": [], "description": "", "gpus": None, "context_length": None,
        }
        try:
            problem = recipe_name_problem(name)
            if problem is not None:  # `rigctl show NAME` could not find it
                raise InvalidInputError([f"{path}: the file name cannot name a recipe: {problem}"])
            recipe = validate_file(path)
        except InvalidInputError as err:
            row["problems"] = err.problems
        else:
            row.update(valid=True, description=recipe.description, gpus=recipe.gpus.count,
                       context_length=recipe.context_length)
        rows.append(row)
    return rows
