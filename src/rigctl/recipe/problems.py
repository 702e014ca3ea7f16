"""The one formatter of validation errors: a pydantic ``ValidationError`` becomes ``file: dotted.path:
problem (line N)`` lines an operator can act on.

pydantic words its errors for Python programmers (``Input should be a valid dictionary or instance of
Service``, ``Extra inputs are not permitted``, a tagged union's tag inside the path). A recipe or hosts
file is written by an operator in YAML, so each problem is said in YAML's terms (a mapping, a list, a
whole number), says what was given instead, offers the nearest known key or value for a typo
(``did you mean `warmup_budget_s`?``), and names the line of the file it comes from. The lines come from
the YAML node tree, composed again only when there is something to report: a file that validates
costs nothing extra.
"""

from __future__ import annotations

import difflib
import types
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

from rigctl.errors import InvalidInputError
from rigctl.recipe.catalog import YamlLoader
from rigctl.util.safefs import RECIPE_LIMIT, read_text
from rigctl.util.text import clip

__all__ = ["Origin", "format_validation_error", "plain_message"]

MAX_LISTED = 12  # the keys of a level named when a typo has no close match (more would bury the problem)


@dataclass(frozen=True)
class Origin:
    """One layer a document was built from, last one winning: a file (its ``text``, or its ``path`` to read
    it again when a problem needs a line) or a ``--set`` (``keys``). ``label`` names it in a problem line;
    the empty label is the file the line already names."""

    label: str = ""
    path: Path | None = None
    keys: tuple[str, ...] | None = None
    text: str | None = None


def format_validation_error(source: str, exc: ValidationError, *, model: type[BaseModel] | None = None,
                            origins: Sequence[Origin] = (), most: int | None = None) -> list[str]:
    """One ``source: dotted.path: problem`` line per error, with ``(line N)`` where ``origins`` can tell.
    ``model`` (the validated class) lets an unknown key be matched against the keys of its level; ``most``
    caps the lines for a document that may hold thousands of bad entries (the rest are counted)."""
    lines = _Lines(origins)
    errors = exc.errors(include_url=False)
    out = []
    for err in errors[:most]:
        path, names = _walk(model, err["loc"])
        where = lines.where(path)
        suffix = f" ({where})" if where else ""
        shown = ".".join(clip(part) if len(part) > 60 else part for part in path)  # keys come from the file
        out.append(f"{source}: {shown or '(top level)'}: {plain_message(err, names)}{suffix}")
    if most is not None and len(errors) > most:
        out.append(f"{source}: ... and {len(errors) - most:,} more problems")
    return out


# --- the words -----------------------------------------------------------------------------------------

_MAPPING = {"model_type", "model_attributes_type", "dict_type", "mapping_type"}
_LIST = {"list_type", "tuple_type", "set_type", "frozen_set_type", "iterable_type"}
_BOUNDS = {"greater_than": "greater than", "greater_than_equal": "greater than or equal to",
           "less_than": "less than", "less_than_equal": "less than or equal to", "multiple_of": "a multiple of"}
_BOUND_KEYS = {"greater_than": "gt", "greater_than_equal": "ge", "less_than": "lt", "less_than_equal": "le",
               "multiple_of": "multiple_of"}
_KIND = {"float_type": "a number", "float_parsing": "a number", "int_from_float": "a whole number",
         "bool_type": "true or false", "bool_parsing": "true or false", "none_required": "null"}


def plain_message(err: ErrorDetails, names: Sequence[str] = ()) -> str:
    """What is wrong, in an operator's words; ``names``: the keys this level takes (for a typo)."""
    kind, ctx, given = err["type"], err.get("ctx") or {}, _given(err.get("input"))
    if kind == "extra_forbidden":
        return "unknown key" + _suggest(_last_key(err["loc"]), names, listed=True)
    if kind == "missing":
        return "Field required"  # tests and scripts match pydantic's two words; plain enough to keep
    if kind in _MAPPING:
        return f"expected a mapping ({_settings(err['loc'])}), not {given}"
    if kind in _LIST:
        return f"expected a list, not {given}"
    if kind in ("int_type", "int_parsing"):
        return f"Input should be a valid integer, not {given}"  # kept: matched as it is by tests and scripts
    if kind == "string_type":
        return f"Input should be a valid string, not {given}"  # likewise
    if kind in _KIND:
        return f"expected {_KIND[kind]}, not {given}"
    if kind in ("literal_error", "enum"):
        expected = str(ctx.get("expected", ""))
        return f"expected {expected}, not {given}" + _suggest(err.get("input"), _quoted(expected))
    if kind in _BOUNDS:
        return f"must be {_BOUNDS[kind]} {ctx.get(_BOUND_KEYS[kind])}, not {given}"
    if kind == "string_too_short":
        least = ctx.get("min_length")
        return "must not be empty" if least == 1 else f"must be at least {least} characters long"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if kind == "too_short":
        return f"needs at least {ctx.get('min_length')} item(s), has {ctx.get('actual_length')}"
    if kind == "too_long":
        return f"takes at most {ctx.get('max_length')} item(s), has {ctx.get('actual_length')}"
    if kind == "string_pattern_mismatch":  # kept as pydantic says it, like the two above
        return f"String should match pattern {ctx.get('pattern')!r}, not {given}"
    if kind == "union_tag_invalid":
        tag, expected = str(ctx.get("tag", "")), str(ctx.get("expected_tags", ""))
        return (f"{_unquote(str(ctx.get('discriminator', '')))}: expected one of {expected}, not {tag!r}"
                + _suggest(tag, _quoted(expected)))
    if kind == "union_tag_not_found":
        return f"needs `{_unquote(str(ctx.get('discriminator', '')))}` to say which kind it is"
    message = str(err["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):  # a validator's own message: said for operators
        message = message.removeprefix(prefix)
    return message.replace("Input should be", "expected")


def _given(value: Any) -> str:
    """What the file holds at that place, said in YAML's terms."""
    if value is None:
        return "null (nothing)"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}" if len(value) <= 60 else f"a text of {len(value):,} characters"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def _settings(loc: Sequence[int | str]) -> str:
    """What the mapping at ``loc`` holds: ``service settings``, ``an entry of volumes``."""
    keys = [str(part) for part in loc if isinstance(part, str) and part != "[key]"]
    if not keys:
        return "the whole document"
    return f"an entry of {keys[-1]}" if isinstance(loc[-1], int) else f"{keys[-1]} settings"


def _last_key(loc: Sequence[int | str]) -> str:
    return str(loc[-1]) if loc else ""


def _suggest(wrong: Any, names: Sequence[str], *, listed: bool = False) -> str:
    """``; did you mean `x`?`` for a near miss; else (``listed``) the names this level takes, when few."""
    if isinstance(wrong, str) and names:
        close = difflib.get_close_matches(wrong, names, n=1, cutoff=0.6)
        if not close:
            close = [n for n in names if n.lower() == wrong.lower().replace("-", "_")]
        if close:
            return f"; did you mean `{close[0]}`?"
    if listed and 0 < len(names) <= MAX_LISTED:
        return f" (this level takes: {', '.join(names)})"
    return ""


def _quoted(expected: str) -> list[str]:
    """``'a', 'b' or 'c'`` (pydantic's list of allowed values) -> [a, b, c]."""
    return [part.strip().strip("'") for part in expected.replace(" or ", ", ").split(",") if part.strip()]


def _unquote(text: str) -> str:
    return text.strip("'")


# --- the model: which keys a level takes, and which parts of a location are the file's -----------------


def _walk(model: type[BaseModel] | None, loc: Sequence[int | str]) -> tuple[list[str], list[str]]:
    """The path as the file has it, and the keys the level of its last part takes.

    pydantic puts a tagged union's tag into the location (``speculative.draft.draft.path``: the second
    ``draft`` is the method); the file has no such level, so a part that picks a union member is dropped.
    ``[key]`` (an error in a mapping's key rather than its value) is dropped too."""
    if model is None:
        return [str(part) for part in loc if part != "[key]"], []
    kinds: list[Any] = [model]
    path: list[str] = []
    parent: list[Any] = kinds
    for part in loc:
        if part == "[key]":
            continue
        members = [m for m in _flatten(kinds) if _is_model(m)]
        tagged = [m for m in members if len(members) > 1 and isinstance(part, str) and _tag_of(m) == part]
        if tagged:  # a tag: stays on that member, no level of its own
            kinds = tagged
            continue
        parent = kinds
        kinds = [k for kind in _flatten(kinds) for k in _step(kind, part)]
        path.append(str(part))
    return path, _names(parent)


def _flatten(kinds: Sequence[Any]) -> Iterator[Any]:
    """Each type, with Annotated unwrapped and unions split into their members (None left out)."""
    for kind in kinds:
        origin = get_origin(kind)
        if origin is Annotated:
            yield from _flatten([get_args(kind)[0]])
        elif origin in (Union, types.UnionType):
            yield from _flatten([arg for arg in get_args(kind) if arg is not type(None)])
        else:
            yield kind


def _is_model(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, BaseModel)


def _tag_of(model: type[BaseModel]) -> str | None:
    """The value of the one-value Literal field that tells a tagged union's members apart."""
    for field in model.model_fields.values():
        if get_origin(field.annotation) is Literal and len(get_args(field.annotation)) == 1:
            return str(get_args(field.annotation)[0])
    return None


def _step(kind: Any, part: int | str) -> list[Any]:
    """The types one level down from ``kind`` at ``part``."""
    if _is_model(kind):
        field = kind.model_fields.get(str(part))
        return [field.annotation] if field is not None else []
    origin, args = get_origin(kind), get_args(kind)
    if origin in (list, tuple, set, frozenset) and args and isinstance(part, int):
        return [args[0]]
    if origin is dict and len(args) == 2:
        return [args[1]]
    return []


def _names(kinds: Sequence[Any]) -> list[str]:
    names: list[str] = []
    for kind in _flatten(kinds):
        if _is_model(kind):
            names += [field.alias or name for name, field in kind.model_fields.items() if name not in names]
    return names


# --- the lines -----------------------------------------------------------------------------------------


class _Lines:
    """Where a dotted path is written, over the layers a document was built from (the last one that
    has the path gave it its value). Each file is read and composed once, and only when asked."""

    def __init__(self, origins: Sequence[Origin]) -> None:
        self.origins = list(origins)
        self.nodes: dict[int, yaml.Node | None] = {}

    def where(self, path: Sequence[str]) -> str | None:
        """``line 12``, ``line 3 of over.yaml`` or ``from --set a.b=1``; for a key that is missing, the
        line of the mapping that lacks it."""
        for depth in range(len(path), -1, -1):
            for i in range(len(self.origins) - 1, -1, -1):
                found = self._in(i, list(path[:depth]))
                if found is not None:
                    return found if depth == len(path) or found.startswith("from ") else f"the mapping at {found}"
        return None

    def _in(self, i: int, path: list[str]) -> str | None:
        origin = self.origins[i]
        if origin.keys is not None:
            keys = list(origin.keys)
            return f"from {origin.label}" if path and (keys[: len(path)] == path or path[: len(keys)] == keys) \
                else None
        line = _line_of(self._node(i), path)
        if line is None:
            return None
        return f"line {line}" if not origin.label else f"line {line} of {origin.label}"

    def _node(self, i: int) -> yaml.Node | None:
        if i not in self.nodes:
            self.nodes[i] = _compose(self.origins[i])
        return self.nodes[i]


def _compose(origin: Origin) -> yaml.Node | None:
    """The file's node tree, or None when it cannot be read again (then its problems go without lines).
    Composing follows no alias, so the tree is as small as the file."""
    try:
        if origin.text is not None:
            return yaml.compose(origin.text, Loader=YamlLoader)
        if origin.path is not None:
            return yaml.compose(read_text(origin.path, limit=RECIPE_LIMIT), Loader=YamlLoader)
    except (InvalidInputError, yaml.YAMLError, RecursionError):
        pass
    return None


def _line_of(node: yaml.Node | None, path: Sequence[str]) -> int | None:
    """The 1-based line of the key (or list item) at ``path``; the document's first line for ``[]``."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for part in path:
        if isinstance(node, yaml.MappingNode):
            hit = next(((k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == part), None)
            if hit is None:
                return None
            line, node = hit[0].start_mark.line + 1, hit[1]
        elif isinstance(node, yaml.SequenceNode) and part.isdigit() and int(part) < len(node.value):
            node = node.value[int(part)]
            line = node.start_mark.line + 1
        else:
            return None
    return line
