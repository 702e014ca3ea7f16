"""Where recipes live and how their files are read: no pydantic here, so listing recipes stays fast.

A recipe is named by a path to a YAML file or by its name: the bundled recipes first, then
``$XDG_CONFIG_HOME/rigctl/recipes/``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rigctl.errors import InvalidInputError, RecipeNotFoundError

__all__ = [
    "RecipeSource",
    "YamlLoader",
    "bundled_recipes_dir",
    "list_recipe_files",
    "list_recipes",
    "read_yaml_mapping",
    "resolve",
    "search_dirs",
    "templates_dir",
    "user_recipes_dir",
]

try:  # the C loader is several times faster; fall back where libyaml is absent
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - depends on the platform's PyYAML build
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]


class YamlLoader(_BaseLoader):
    """A safe loader that refuses a key given twice in one mapping: YAML itself keeps the last one
    silently, so `context_length` written twice would serve whichever came second."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base`: explicit keys may override it
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let the base class report it
                continue
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None,
                    f"duplicate key {key!r} (first given on line {first.start_mark.line + 1})",
                    key_node.start_mark,
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep=deep)


def _data_dir(name: str) -> Path:
    """Bundled data: inside the wheel at rigctl/_data/NAME, or at the top of a source checkout."""
    packaged = Path(__file__).resolve().parent.parent / "_data" / name
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[3] / name


def bundled_recipes_dir() -> Path:
    return _data_dir("recipes")


def templates_dir() -> Path:
    return _data_dir("templates")


def user_recipes_dir() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "rigctl" / "recipes"


def search_dirs() -> list[Path]:
    return [bundled_recipes_dir(), user_recipes_dir()]


@dataclass(frozen=True)
class RecipeSource:
    """Where a recipe came from, kept beside it for messages and labels."""

    name: str
    path: Path
    origin: str  # "bundled", "user" or "file"
    overlays: tuple[str, ...] = field(default_factory=tuple)


def list_recipe_files() -> list[tuple[str, Path, str]]:
    """(name, path, origin) for every recipe file; a user recipe shadows a bundled one of the same name."""
    found: dict[str, tuple[str, Path, str]] = {}
    for origin, directory in (("bundled", bundled_recipes_dir()), ("user", user_recipes_dir())):
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.y*ml")):
            if path.suffix in {".yaml", ".yml"}:
                found.setdefault(path.stem, (path.stem, path, origin))
    return sorted(found.values())


def resolve(name_or_path: str) -> RecipeSource:
    looks_like_path = os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml"))
    if looks_like_path:
        path = Path(name_or_path)
        if not path.is_file():
            raise InvalidInputError([f"{name_or_path}: no such file"])
        return RecipeSource(name=path.stem, path=path, origin="file")
    for origin, directory in (("bundled", bundled_recipes_dir()), ("user", user_recipes_dir())):
        for suffix in (".yaml", ".yml"):
            path = directory / f"{name_or_path}{suffix}"
            if path.is_file():
                return RecipeSource(name=name_or_path, path=path, origin=origin)
    raise RecipeNotFoundError(name_or_path, [str(d) for d in search_dirs()])


def read_yaml_mapping(path: Path) -> dict[str, Any]:
    """A YAML file whose top level is a mapping, or an InvalidInputError naming the line."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InvalidInputError([f"{path}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise InvalidInputError([f"{path}: not UTF-8 text: {exc.reason}"]) from None
    try:
        data = yaml.load(text, Loader=YamlLoader)
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f"line {mark.line + 1}, column {mark.column + 1}: "
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidInputError([f"{path}: {where}malformed YAML: {problem}"]) from None
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InvalidInputError([f"{path}: the top level must be a mapping, not {kind}"])
    return data




def list_recipes() -> list[dict[str, Any]]:
    """A summary row per recipe file, read without full validation (that is `rigctl validate`'s job)."""
    rows: list[dict[str, Any]] = []
    for name, path, origin in list_recipe_files():
        row: dict[str, Any] = {"name": name, "origin": origin, "path": str(path), "description": "",
                               "gpus": None, "context_length": None}
        try:
            data = read_yaml_mapping(path)
        except InvalidInputError as err:
            row["description"] = f"(unreadable: {err.problems[0]})"
            rows.append(row)
            continue
        row["description"] = str(data.get("description", ""))
        gpus = data.get("gpus")
        row["gpus"] = gpus.get("count") if isinstance(gpus, dict) else None
        row["context_length"] = data.get("context_length")
        rows.append(row)
    return rows
