"""The one way a result becomes JSON data. Results stay typed (pydantic models, dataclasses, enums) until
the edge; there ``jsonable`` turns them into dicts, lists, strings and numbers, with the same keys as their
fields. A result whose JSON deliberately differs from its fields says so in a ``to_dict`` method (with a
one-line reason), and that method is used instead."""

from __future__ import annotations

import dataclasses
from enum import Enum
from pathlib import PurePath
from typing import Any


def jsonable(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return jsonable(to_dict())
    dump = getattr(value, "model_dump", None)
    if callable(dump):  # a pydantic model: its own serialisation (excluded fields, verify's words)
        return dump(mode="json")
    if isinstance(value, Enum):
        return value.value
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    return str(value)
