"""The record of licenses an operator has accepted on this host.

A checkpoint whose recipe says ``license.acceptance_required: true`` is refused by preflight until its
license id is recorded here: ``rigctl preflight RECIPE --accept-license ID`` (or ``rigctl license accept
ID``) appends ``{"id", "accepted_at", "by", "recipe"}`` to ``$XDG_STATE_HOME/rigctl/licenses.json``
(default ``~/.local/state``). The file is plain JSON so that provisioning tools can write it too.
A record that cannot be read counts as no record: the gate fails closed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import tempfile
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from rigctl.errors import InvalidInputError
from rigctl.host.facts import LicenseAcceptance

_RECORDS = TypeAdapter(list[LicenseAcceptance])


def store_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "rigctl" / "licenses.json"


def read_acceptances(path: Path | None = None) -> tuple[list[LicenseAcceptance], str | None]:
    """(records, problem). A missing file is no records; an unreadable one is no records plus why."""
    path = path or store_path()
    try:
        raw = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return [], None
    except OSError as exc:
        return [], f"{path}: cannot read: {exc.strerror}"
    try:
        data = json.loads(raw)
        return _RECORDS.validate_python(data.get("accepted", []) if isinstance(data, dict) else data), None
    except (ValueError, ValidationError) as exc:
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
    rec = LicenseAcceptance(id=license_id, accepted_at=stamp, by=who, recipe=recipe)
    records.append(rec)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"accepted": [r.model_dump(mode="json") for r in records]}, indent=2) + "\n"
    # write-then-rename: a crash mid-write must not leave a half record (which would read as none)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".licenses.", suffix=".json")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(body)
    os.replace(tmp, path)
    return rec
