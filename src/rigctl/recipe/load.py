"""Loading recipes: overlaying and validating them.

An overlay file is deep-merged over it, then ``--set a.b=value``
pairs (value parsed as YAML) in order. Every defect comes back as one ``InvalidInputError`` listing
``file: dotted.path: problem`` lines; nothing here raises a raw pydantic or YAML error.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from rigctl.errors import InvalidInputError, UsageError
from rigctl.recipe.catalog import RecipeSource, YamlLoader, read_yaml_mapping, resolve
from rigctl.recipe.model import Recipe


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
        raise UsageError(f"--set {assignment!r}: expected KEY.PATH=VALUE, e.g. checkpoint.path=/models/glm")
    try:
        value = yaml.load(raw, Loader=YamlLoader) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return parts, value


def apply_set(data: dict[str, Any], parts: Sequence[str], value: Any) -> dict[str, Any]:
    """Set ``value`` at ``parts``; a numeric part indexes into an existing list
    (``container.volumes.0.host=/data/glm``)."""
    merged: dict[str, Any] = _set_in(data, list(parts), value, [])
    return merged


def _set_in(node: Any, parts: list[str], value: Any, trail: list[str]) -> Any:
    if not parts:
        return value
    head, rest = parts[0], parts[1:]
    if isinstance(node, list):
        if not head.isdigit() or int(head) >= len(node):
            where = ".".join(trail) or "(top level)"
            raise UsageError(f"--set: {where} is a list of {len(node)}; {head!r} is not an index into it")
        copy = list(node)
        copy[int(head)] = _set_in(node[int(head)], rest, value, [*trail, head])
        return copy
    merged = dict(node) if isinstance(node, Mapping) else {}
    merged[head] = _set_in(merged.get(head), rest, value, [*trail, head])
    return merged


def format_validation_error(source: str, exc: ValidationError) -> list[str]:
    lines = []
    for err in exc.errors(include_url=False):
        loc = ".".join(_drop_union_tags(err["loc"])) or "(top level)"
        msg = err["msg"]
        if msg.startswith("Value error, "):
            msg = msg[len("Value error, ") :]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        lines.append(f"{source}: {loc}: {msg}")
    return lines


_TAGGED_UNIONS = {"speculative": {"none", "mtp", "draft"}}


def _drop_union_tags(loc: Sequence[int | str]) -> list[str]:
    """pydantic puts the discriminator value into the location of a tagged union
    (``speculative.draft.draft.path``); the operator's file has no such level."""
    parts: list[str] = []
    for i, part in enumerate(loc):
        if i > 0 and str(part) in _TAGGED_UNIONS.get(str(loc[i - 1]), set()) and i == 1:
            continue
        parts.append(str(part))
    return parts


def validate_data(data: Mapping[str, Any], source: str) -> Recipe:
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise InvalidInputError(format_validation_error(source, exc)) from None


def load(
    name_or_path: str,
    *,
    overlays: Iterable[str | Path] = (),
    sets: Iterable[str] = (),
) -> LoadedRecipe:
    source = resolve(name_or_path)
    data = read_yaml_mapping(source.path)
    applied: list[str] = []
    for overlay in overlays:
        data = deep_merge(data, read_yaml_mapping(Path(overlay)))
        applied.append(str(overlay))
    for assignment in sets:
        parts, value = parse_set(assignment)
        data = apply_set(data, parts, value)
        applied.append(f"--set {assignment}")
    label = str(source.path) if not applied else f"{source.path} (+ {', '.join(applied)})"
    recipe = validate_data(data, label)
    return LoadedRecipe(recipe, RecipeSource(source.name, source.path, source.origin, tuple(applied)))


def validate_file(path: Path) -> Recipe:
    return validate_data(read_yaml_mapping(path), str(path))
