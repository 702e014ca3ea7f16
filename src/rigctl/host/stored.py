"""A list of validated entries kept in one small JSON file of this user's (``{"KEY": [...]}``, or the bare
list): the licence acceptances and the memory receipts. A missing file is no entries; one that cannot be
read, or does not validate, is no entries plus why (the caller decides whether that fails closed)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from pydantic import TypeAdapter, ValidationError

from rigctl.recipe.problems import format_validation_error
from rigctl.util.jsonfile import JsonFileError, load_json
from rigctl.util.safefs import RECORD_LIMIT

T = TypeVar("T")


def read_entries(path: Path, adapter: TypeAdapter[list[T]], key: str, what: str) -> tuple[list[T], str | None]:
    try:
        data = load_json(path, limit=RECORD_LIMIT, missing_ok=True, own=True)
    except JsonFileError as exc:
        return [], f"{path}: not {what} ({exc.why})"
    if data is None:
        return [], None
    try:
        return adapter.validate_python(data.get(key, []) if isinstance(data, dict) else data), None
    except ValidationError as exc:
        return [], f"{path}: not {what} ({'; '.join(format_validation_error(key, exc, most=1))})"
