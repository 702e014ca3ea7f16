"""``rigctl new NAME --from RECIPE``: a user recipe to start from, made from an existing one.

The copy is the source file's own text (its comments and layout are the best guide to editing it) with
``name:`` set to NAME and the schema comment on top, so an editor checks it while it is edited. It is
validated before it is written, written only where nothing is (never over a file or through a link),
and the recipe's JSON Schema is written beside it: where no file of that name is, or over rigctl's own
schema (an older one is refreshed); any other file of that name (a link, a FIFO, a file that is not a
rigctl recipe schema) is left alone, and the result says so. It goes into the user recipe directory (where
``rigctl show NAME`` and ``rigctl validate NAME`` find it) unless ``--out`` says where.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rigctl.errors import InvalidInputError, UsageError
from rigctl.recipe.catalog import (
    YamlLoader,
    bundled_recipes_dir,
    load_yaml,
    resolve,
    user_recipes_dir,
)
from rigctl.recipe.load import validate_data
from rigctl.recipe.names import recipe_name_problem
from rigctl.recipe.schema import SCHEMA_FILE, modeline, recipe_schema, schema_text
from rigctl.util.safefs import RECIPE_LIMIT, SafeDir, check_name, open_out, read_text

MODELINE_PREFIX = "# yaml-language-server:"


@dataclass(frozen=True)
class NewRecipe:
    name: str
    path: str  # where the recipe was written
    schema: str  # the JSON Schema beside it
    source: str  # the recipe it was made from
    notes: list[str] = field(default_factory=list)  # what to look at before deploying it
    schema_written: bool = True  # False: a file that is not rigctl's schema sat there and was left alone
    schema_problem: str | None = None  # why it was left alone

    def to_dict(self) -> dict[str, object]:  # reshapes on purpose: the recipe it came from is "from"
        return {"name": self.name, "path": self.path, "schema": self.schema, "from": self.source,
                "notes": self.notes, "schema_written": self.schema_written, "schema_problem": self.schema_problem}


def new_recipe(name: str, source_name: str, *, out: Path | None = None) -> NewRecipe:
    """Write recipe ``name`` made from ``source_name`` (a recipe name or path); see the module's docstring."""
    problem = recipe_name_problem(name)
    if problem is not None:
        raise UsageError(f"NAME: {problem}")
    source = resolve(source_name)
    text = recipe_text(read_text(source.path, limit=RECIPE_LIMIT), name, str(source.path))
    target = out if out is not None else user_recipes_dir() / f"{name}.yaml"
    validate_data(load_yaml(text, target), str(target))  # a start that does not validate is no start
    notes = _notes(name, text, out)
    if out is None:
        taken = [p for p in (target, target.with_suffix(".yml")) if os.path.lexists(p)]
        if taken:
            raise InvalidInputError([f"{taken[0]}: already exists; rigctl new does not overwrite it"],
                                    fix=f"choose another NAME, or edit {taken[0]} itself")
    directory = SafeDir.at(target.parent, create=True) if out is None else open_out(target.parent)
    with directory:
        directory.write_new(check_name(target.name), text.encode())
        problem = _write_schema(directory)
        target = Path(directory.path) / target.name  # where it really went
    return NewRecipe(name, str(target), str(target.parent / SCHEMA_FILE), str(source.path), notes,
                     schema_written=problem is None, schema_problem=problem)


def _write_schema(directory: SafeDir) -> str | None:
    """Put the recipe schema in ``directory`` unless a file that is not rigctl's schema is there; None when
    the schema is there now, else why the file there was left alone."""
    schema = schema_text()
    try:
        current = directory.read_text(SCHEMA_FILE, limit=RECIPE_LIMIT)
    except InvalidInputError as exc:  # a link, a FIFO, a file too big or not text: not ours to replace
        return f"it is not a rigctl recipe schema ({exc.problems[0] if exc.problems else 'unreadable'})"
    if current is None:
        try:
            directory.write_new(SCHEMA_FILE, schema.encode())  # something that appeared meanwhile is kept
        except InvalidInputError as exc:
            return f"something else appeared there ({exc.problems[0] if exc.problems else 'refused'})"
        return None
    if current == schema:
        return None
    if not is_rigctl_schema(current, recipe_schema()):
        return "it is not a rigctl recipe schema"
    directory.write_atomic(SCHEMA_FILE, schema.encode())  # rigctl's own, of another version: refreshed
    return None


def is_rigctl_schema(text: str, ours: dict[str, object]) -> bool:
    """Whether ``text`` is a recipe schema some rigctl wrote, of any version: the dialect and title of
    ``ours`` (this rigctl's)."""
    try:
        document = json.loads(text)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        return False
    return isinstance(document, dict) and all(document.get(k) == ours.get(k) for k in ("$schema", "title"))


def recipe_text(text: str, name: str, source: str) -> str:
    """``text`` (a recipe) with its top-level ``name:`` set to ``name`` and the schema comment first."""
    root = yaml.compose(text, Loader=YamlLoader)
    value = None
    if isinstance(root, yaml.MappingNode):
        value = next((v for k, v in root.value if isinstance(k, yaml.ScalarNode) and k.value == "name"), None)
    if not isinstance(value, yaml.ScalarNode):
        raise InvalidInputError([f"{source}: name: no top-level `name:` to set"],
                                fix="run `rigctl validate` on it; start from a recipe that validates")
    start, end = value.start_mark.index, value.end_mark.index
    body = text[:start] + _scalar(name) + text[end:]
    kept = [line for line in body.splitlines(keepends=True) if not line.startswith(MODELINE_PREFIX)]
    head = [modeline() + "\n", f"# made by `rigctl new {name} --from {source}`; check it with "
                               f"`rigctl validate {name}`\n"]
    return "".join(head + kept)


def _scalar(name: str) -> str:
    """``name`` as a YAML value that reads back as that text (``1.0`` would read as a number)."""
    return name if yaml.safe_load(name) == name else json.dumps(name)


def _notes(name: str, text: str, out: Path | None) -> list[str]:
    notes = []
    data = load_yaml(text, name)
    if isinstance(data, dict) and isinstance(data.get("container"), dict) and data["container"].get("name"):
        notes.append(f"container.name is {data['container']['name']!r}, as in the recipe it came from: two "
                     "deployments cannot share a container name; change or remove it")
    if out is None and any(os.path.lexists(bundled_recipes_dir() / f"{name}{s}") for s in (".yaml", ".yml")):
        notes.append(f"it overrides the bundled recipe {name}: `rigctl show {name}` now shows yours")
    if out is not None and out.stem != name:
        notes.append(f"the file is named {out.name} but the recipe {name}: `rigctl show` finds a user recipe by "
                     "its file name")
    if out is not None:
        notes.append(f"outside the recipe directory: name it by path (`rigctl show {out}`), or move it to "
                     f"{user_recipes_dir()}")
    return notes
