"""Where recipes live and how their files are read: no pydantic here, so listing recipes stays fast.

A recipe is named by a path to a YAML file or by its name: ``$XDG_CONFIG_HOME/rigctl/recipes/`` first,
then the bundled recipes, so a user's copy of a bundled recipe overrides it (and says so).

Every recipe or overlay file is read through ``rigctl.util.safefs`` (a FIFO, device, directory or
oversized file is refused without blocking) and parsed by ``YamlLoader``, which bounds what the
document's aliases expand to.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rigctl.errors import InvalidInputError, RecipeNotFoundError
from rigctl.invocation import current
from rigctl.places import container_service
from rigctl.recipe.names import default_container, recipe_name_problem
from rigctl.util.safefs import RECIPE_LIMIT, MiB, format_size, read_own, read_text
from rigctl.util.text import clip

__all__ = [
    "RecipeSource",
    "YamlLoader",
    "YamlTooBig",
    "bundled_recipes_dir",
    "declared_as",
    "declared_name",
    "list_recipe_files",
    "load_yaml",
    "name_mismatch",
    "read_yaml_mapping",
    "recipe_file",
    "recipe_files",
    "resolve",
    "search_dirs",
    "templates_dir",
    "user_recipes_dir",
]

try:  # the C loader is several times faster; fall back where libyaml is absent
    from yaml import CSafeLoader as _BaseLoader
except ImportError:  # pragma: no cover - depends on the platform's PyYAML build
    from yaml import SafeLoader as _BaseLoader  # type: ignore[assignment]

# What one YAML document may expand to once every alias is followed. The file itself is small
# (RECIPE_LIMIT), but an alias repeats a whole subtree, so a few lines can stand for gigabytes (the
# "billion laughs"). The parsed objects share memory; what consumes them (validation, JSON, rendered
# units) does not. A real recipe is a few hundred values, a few KiB of text, six levels deep.
MAX_NODES = 100_000
MAX_SCALAR_CHARS = 8 * MiB
MAX_DEPTH = 64
MAX_INT_CHARS = 64  # no real value is longer; Python refuses to convert more than 4300 digits

class YamlTooBig(yaml.YAMLError):
    """A document whose aliases expand it beyond the bounds above."""


def _measure(root: yaml.Node) -> None:
    """Refuse a document that, with every alias expanded, has more than MAX_NODES values, more than
    MAX_SCALAR_CHARS of text or more than MAX_DEPTH levels, or that contains itself.

    An alias is the very node its anchor names, so the composed graph is as small as the file: each
    node is measured once (post-order, an explicit stack, no recursion) and its size counted again
    every time it is used. Linear in the file, however large the expansion."""
    size: dict[int, tuple[int, int, int]] = {}  # id(node) -> (values, characters, depth), expanded
    open_nodes: set[int] = set()  # entered, not finished: the path from the root to here
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if not finished:  # O(1) for a node already measured, however often it is used
            if key in size:
                continue
            if key in open_nodes:
                raise YamlTooBig(f"line {node.start_mark.line + 1}: an alias refers to a node that contains it; "
                                 "rigctl refuses recursive documents")
            open_nodes.add(key)
            stack.append((node, True))
            stack.extend((kid, False) for kid in _children(node) if id(kid) not in size)
            continue
        open_nodes.discard(key)
        parts = [size[id(kid)] for kid in _children(node)]
        values = 1 + sum(p[0] for p in parts)
        chars = sum(p[1] for p in parts) + (len(node.value) if isinstance(node, yaml.ScalarNode) else 0)
        depth = 1 + max((p[2] for p in parts), default=0)
        size[key] = (values, chars, depth)
        where = f"line {node.start_mark.line + 1}: "
        if values > MAX_NODES:
            raise YamlTooBig(f"{where}its aliases expand it to more than {MAX_NODES:,} values; "
                             "rigctl refuses a document that large (an alias bomb?)")
        if chars > MAX_SCALAR_CHARS:
            raise YamlTooBig(f"{where}its aliases expand it to more than {format_size(MAX_SCALAR_CHARS)} "
                             "of text; rigctl refuses a document that large (an alias bomb?)")
        if depth > MAX_DEPTH:
            raise YamlTooBig(f"{where}nested more than {MAX_DEPTH} levels deep; rigctl refuses deeper documents")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


class YamlLoader(_BaseLoader):
    """A safe loader that bounds the expanded document (``_measure``) and refuses a key given twice
    in one mapping: YAML itself keeps the last one silently, so `context_length` written twice would
    serve whichever came second. Every ``yaml.load(..., Loader=YamlLoader)`` gets both."""

    def get_single_data(self) -> Any:
        node = self.get_single_node()
        if node is None:
            return None
        _measure(node)  # before constructing: merge keys (`<<: *base`) copy while being constructed
        return self.construct_document(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        if len(node.value) > MAX_INT_CHARS:
            raise yaml.constructor.ConstructorError(
                None, None, f"an integer of {len(node.value)} characters; rigctl reads at most {MAX_INT_CHARS}",
                node.start_mark,
            )
        value: int = super().construct_yaml_int(node)
        return value

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


# the constructor table holds functions, not method names: register the bounded one
YamlLoader.add_constructor("tag:yaml.org,2002:int", YamlLoader.construct_yaml_int)


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
    return current().config_home / "rigctl" / "recipes"


def search_dirs() -> list[Path]:
    """Where recipes are looked for (a user's recipe overrides a bundled one of the same name)."""
    return [bundled_recipes_dir(), user_recipes_dir()]


@dataclass(frozen=True)
class RecipeSource:
    """Where a recipe came from, kept beside it for messages and labels."""

    name: str
    path: Path
    origin: str  # "bundled", "user" or "file"
    overlays: tuple[str, ...] = field(default_factory=tuple)
    overrides: Path | None = None  # a user recipe's bundled namesake, which it replaces


def recipe_files(directory: Path) -> list[tuple[str, Path]]:
    """(name, path) for every ``*.yaml``/``*.yml`` in ``directory`` (``.yaml`` first when both exist).
    Whatever sits there is listed, FIFOs and directories included: reading it refuses them."""
    if not directory.is_dir():
        return []
    found: dict[str, Path] = {}
    for path in sorted(directory.iterdir(), key=lambda p: (p.stem, p.suffix != ".yaml")):
        if path.suffix in {".yaml", ".yml"}:
            found.setdefault(path.stem, path)
    return sorted(found.items())


def list_recipe_files() -> list[tuple[str, Path, str]]:
    """(name, path, origin) for every recipe; a user recipe overrides a bundled one of the same name."""
    found = {name: (name, path, "bundled") for name, path in recipe_files(bundled_recipes_dir())}
    found.update({name: (name, path, "user") for name, path in recipe_files(user_recipes_dir())})
    return sorted(found.values())


def _named(directory: Path, name: str) -> Path | None:
    """``directory/NAME.yaml`` (or ``.yml``) when anything is there: a FIFO or dangling link is then
    refused by the read, not silently skipped in favour of the next directory."""
    for suffix in (".yaml", ".yml"):
        path = directory / f"{name}{suffix}"
        if os.path.lexists(path):
            return path
    return None


def resolve(name_or_path: str) -> RecipeSource:
    """A recipe by path, or by name: the file of that name (a user's first), else the one file whose
    ``name:`` says it (a recipe is deployed, and its units named, by its ``name:``, whatever the file is
    called). Two files that both say it, and none named after it: an error naming both."""
    looks_like_path = os.sep in name_or_path or name_or_path.endswith((".yaml", ".yml"))
    if looks_like_path:  # read_yaml_mapping refuses a missing, special or oversized file
        path = Path(name_or_path)
        return RecipeSource(name=path.stem, path=path, origin="file")
    problem = recipe_name_problem(name_or_path)
    if problem is not None:
        raise InvalidInputError([f"recipe {clip(name_or_path)}: {problem}"],
                                fix="run `rigctl recipes` to list them, or pass a path to a YAML file")
    bundled = _named(bundled_recipes_dir(), name_or_path)
    user = _named(user_recipes_dir(), name_or_path)
    if user is not None:
        return RecipeSource(name=name_or_path, path=user, origin="user", overrides=bundled)
    if bundled is not None:
        return RecipeSource(name=name_or_path, path=bundled, origin="bundled")
    declaring = declared_as(name_or_path)
    if len(declaring) == 1:
        path, origin = declaring[0]
        return RecipeSource(name=name_or_path, path=path, origin=origin)
    if declaring:
        raise InvalidInputError(
            [f"recipe {name_or_path}: no file is named {name_or_path}.yaml, and {len(declaring)} files say "
             f"`name: {name_or_path}`: {', '.join(str(path) for path, _ in declaring)}"],
            fix=f"rename the one you mean to {name_or_path}.yaml (or pass its path), and give the others their "
                "own names")
    known = [name for name, _, _ in list_recipe_files()]
    raise RecipeNotFoundError(name_or_path, [str(d) for d in search_dirs()],
                              difflib.get_close_matches(name_or_path, known, n=3, cutoff=0.6))


def recipe_file(name_or_path: str) -> Path:
    """The file `rigctl validate ARG` reads: ARG when something is there, else the recipe of that name."""
    return Path(name_or_path) if os.path.lexists(name_or_path) else resolve(name_or_path).path


def declared_name(path: Path) -> str | None:
    """The ``name:`` a recipe file gives itself, or None when it gives none or cannot be read (reading
    it for real says why)."""
    try:
        data = read_yaml_mapping(path)
    except InvalidInputError:
        return None
    name = data.get("name")
    return name if isinstance(name, str) else None


def declared_as(name: str) -> list[tuple[Path, str]]:
    """(path, origin) of each recipe file not named ``name`` whose ``name:`` is ``name`` (user ones first)."""
    found: list[tuple[Path, str]] = []
    for directory, origin in ((user_recipes_dir(), "user"), (bundled_recipes_dir(), "bundled")):
        found += [(path, origin) for stem, path in recipe_files(directory)
                  if stem != name and declared_name(path) == name]
    return found


def name_mismatch(path: Path, name: str) -> str | None:
    """What goes wrong when the recipe file ``path`` says ``name: NAME`` under another file name: it is
    served as NAME, so `rigctl show NAME` should find it, and does only when nothing else answers to NAME
    and it sits in a recipe directory. None when the two names agree."""
    if path.stem == name:
        return None
    said = (f"{path}: name: {name!r} differs from the file name {path.stem!r}: rigctl serves it as {name} "
            f"(unit {container_service(default_container(name))} unless its container.name says otherwise)")
    try:
        found = resolve(name).path
    except RecipeNotFoundError:
        return (f"{said}, and `rigctl show {name}` cannot find it outside the recipe directories: pass its path, "
                f"or save it as {user_recipes_dir() / (name + '.yaml')}")
    except InvalidInputError as err:  # several files answer to that name
        return f"{said}, and `rigctl show {name}` cannot tell which: {err.problems[0]}"
    try:
        same = os.path.samefile(found, path)
    except OSError:
        same = False
    if same:
        return f"{said}; `rigctl show {name}` finds it by that name, but rename it to {name}.yaml to keep them together"
    return f"{said}, while `rigctl show {name}` finds another file, {found}: rename one of them"


def load_yaml(text: str, source: str | os.PathLike[str]) -> Any:
    """Parse one YAML document with ``YamlLoader``; any defect is an InvalidInputError naming the line."""
    try:
        return yaml.load(text, Loader=YamlLoader)
    except YamlTooBig as exc:
        raise InvalidInputError([f"{source}: {exc}"]) from None
    except yaml.YAMLError as exc:
        where = ""
        mark = getattr(exc, "problem_mark", None)
        if mark is not None:
            where = f"line {mark.line + 1}, column {mark.column + 1}: "
        problem = getattr(exc, "problem", None) or str(exc)
        raise InvalidInputError([f"{source}: {where}malformed YAML: {problem}"]) from None


def is_user_recipe(path: Path) -> bool:
    """Whether ``path`` sits in the user recipe directory: rigctl's own configuration, read only when it
    passes the trust rule (a recipe becomes a unit; as root, a root unit)."""
    return path.parent == user_recipes_dir()


def read_yaml_mapping(path: Path, *, limit: int = RECIPE_LIMIT) -> dict[str, Any]:
    """A YAML file whose top level is a mapping, or an InvalidInputError naming the line. The file is
    read bounded (``limit``) and only if it is a regular file; it must be UTF-8. A user recipe must also
    pass the trust rule (``safefs.read_own``): one that fails is refused, never replaced by the bundled one."""
    if is_user_recipe(path):
        got = read_own(path, limit=limit)
        assert got is not None
        text = got.text(path)
    else:
        text = read_text(path, limit=limit)
    data = load_yaml(text, path)
    if not isinstance(data, dict):
        kind = "empty" if data is None else f"a {type(data).__name__}"
        raise InvalidInputError([f"{path}: the top level must be a mapping, not {kind}"])
    return data
