"""The record of licenses an operator has accepted on this host.

A checkpoint whose recipe says ``license.acceptance_required: true`` is refused by preflight until its
license id is recorded here: ``rigctl preflight RECIPE --accept-license ID`` (or ``rigctl license accept
ID``) appends ``{"id", "accepted_at", "by", "recipe"}`` to ``$XDG_STATE_HOME/rigctl/licenses.json``
(default ``~/.local/state``). The file is plain JSON so that provisioning tools can write it too.
A record that cannot be read counts as no record: the gate fails closed.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from rigctl.errors import InvalidInputError
from rigctl.host.facts import LicenseAcceptance
from rigctl.recipe.catalog import clip
from rigctl.util.jsonfile import JsonFileError, load_json
from rigctl.util.safefs import RECORD_LIMIT, write_own


@functools.cache
def _records() -> TypeAdapter[list[LicenseAcceptance]]:
    """Built when a record is first read, not at import: most runs have no record file at all."""
    return TypeAdapter(list[LicenseAcceptance])


def store_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rigctl" / "licenses.json"


def read_acceptances(path: Path | None = None) -> tuple[list[LicenseAcceptance], str | None]:
    """(records, problem). A missing file is no records; an unreadable or damaged one (a FIFO, huge,
    not UTF-8, not JSON, too deeply nested, the wrong shape) is no records plus why."""
    path = path or store_path()
    try:
        data = load_json(path, limit=RECORD_LIMIT, missing_ok=True)
    except JsonFileError as exc:
        return [], f"{path}: not a license record ({exc.why})"
    if data is None:
        return [], None
    try:
        return _records().validate_python(data.get("accepted", []) if isinstance(data, dict) else data), None
    except ValidationError as exc:
        return [], f"{path}: not a license record ({str(exc).splitlines()[0]})"


def accept(license_id: str, *, recipe: str | None = None, path: Path | None = None,
           now: dt.datetime | None = None) -> LicenseAcceptance:
    """Record acceptance of ``license_id`` (idempotent: an existing record is kept)."""
    path = path or store_path()
    records, problem = read_acceptances(path)
    if problem is not None:
        raise InvalidInputError([problem], fix=f"repair or remove {path}, then accept again")
    for rec in records:
        if rec.id == license_id:
            return rec
    who = os.environ.get("SUDO_USER") or os.environ.get("USER") or str(os.geteuid())
    stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    try:
        rec = LicenseAcceptance(id=license_id, accepted_at=stamp, by=who, recipe=recipe)
    except ValidationError as exc:
        why = exc.errors(include_url=False)[0]["msg"]
        raise InvalidInputError([f"--accept-license {clip(license_id)}: {why}"]) from None
    records.append(rec)
    body = json.dumps({"accepted": [r.model_dump(mode="json") for r in records]}, indent=2) + "\n"
    # write-then-rename: a crash mid-write must not leave a half record (which would read as none)
    write_own(path, body, mode=0o644)
    return rec
