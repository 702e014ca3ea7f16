"""The record of licenses an operator has accepted on this host.

A checkpoint whose recipe says ``license.acceptance_required: true`` is refused by preflight until its
license id is recorded here: ``rigctl preflight RECIPE --accept-license ID`` appends ``{"id",
"accepted_at", "by", "recipe"}`` to ``$XDG_STATE_HOME/rigctl/licenses.json`` (default ``~/.local/state``).
The file is plain JSON so that provisioning tools can write it too. A record that cannot be read counts
as no record: the gate fails closed.

Only the recipe's own license ids are accepted (``accept_for``): an id of some other license would be
recorded as if it meant something and leave the gate shut, with nothing said. ``by`` names a person
(user name and uid; under sudo, the user behind it), since "uid 0" accepts nothing on anyone's behalf.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import os
import pwd
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import TypeAdapter, ValidationError

from rigctl.errors import InvalidInputError, UsageError
from rigctl.host.facts import LicenseAcceptance
from rigctl.host.stored import read_entries
from rigctl.invocation import current
from rigctl.recipe.problems import plain_message
from rigctl.util.safefs import write_own
from rigctl.util.text import clip, printable

if TYPE_CHECKING:
    from rigctl.recipe.model import Recipe


@functools.cache
def _records() -> TypeAdapter[list[LicenseAcceptance]]:
    """Built when a record is first read, not at import: most runs have no record file at all."""
    return TypeAdapter(list[LicenseAcceptance])


def store_path() -> Path:
    return current().state_home / "rigctl" / "licenses.json"


def read_acceptances(path: Path | None = None) -> tuple[list[LicenseAcceptance], str | None]:
    """(records, problem). A missing file is no records; an unreadable or damaged one (a FIFO, huge,
    not UTF-8, not JSON, too deeply nested, the wrong shape) is no records plus why."""
    return read_entries(path or store_path(), _records(), "accepted", "a license record")


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
    who = operator()
    stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
    try:
        rec = LicenseAcceptance(id=license_id, accepted_at=stamp, by=who, recipe=recipe)
    except ValidationError as exc:
        why = plain_message(exc.errors(include_url=False)[0])
        raise InvalidInputError([f"--accept-license {clip(license_id)}: {why}"]) from None
    records.append(rec)
    body = json.dumps({"accepted": [r.model_dump(mode="json") for r in records]}, indent=2, allow_nan=False) + "\n"
    # write-then-rename: a crash mid-write must not leave a half record (which would read as none)
    write_own(path, body, mode=0o644)
    return rec


def accept_for(recipe: Recipe, license_ids: Sequence[str], *, path: Path | None = None,
               now: dt.datetime | None = None) -> list[LicenseAcceptance]:
    """Record the acceptance of ``license_ids`` for ``recipe``, each of which must be one of the recipe's
    own licenses (its checkpoint's, its draft model's); all are checked before any is recorded."""
    own = recipe.licenses()
    ids = {lic.id for _, lic in own}
    for license_id in license_ids:
        if license_id not in ids:
            raise UsageError(f"--accept-license {clip(license_id)}: {_own_licenses(recipe)}",
                             fix=_acceptance_hint(recipe))
    return [accept(license_id, recipe=recipe.name, path=path, now=now) for license_id in license_ids]


def _own_licenses(recipe: Recipe) -> str:
    own = recipe.licenses()
    if len(own) == 1:
        return f"this recipe's license is {own[0][1].id}"
    return "this recipe's licenses are " + " and ".join(f"{lic.id} ({what})" for what, lic in own)


def _acceptance_hint(recipe: Recipe) -> str:
    needed = [lic for _, lic in recipe.licenses() if lic.acceptance_required]
    if not needed:
        return f"{recipe.name} needs no license acceptance; leave --accept-license out"
    ids = ",".join(lic.id for lic in needed)
    shown = "; ".join(f"{lic.id} ({lic.url})" if lic.url else lic.id for lic in needed)
    return f"review {shown}, then `rigctl preflight {recipe.name} --accept-license {ids}`"


def operator() -> str:
    """Who accepts: ``alice (uid 1000)``; under sudo, ``alice (uid 1000) via sudo as root (uid 0)``."""
    uid = current().euid
    me = f"{_user_name(uid)} (uid {uid})"
    sudo_user, sudo_uid = os.environ.get("SUDO_USER", ""), os.environ.get("SUDO_UID", "")
    if uid == 0 and sudo_user and sudo_uid.isdigit():
        return f"{printable(sudo_user, 64)} (uid {sudo_uid}) via sudo as {me}"
    return me


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # no passwd entry (a container's arbitrary uid)
        return printable(os.environ.get("USER") or "user without a name", 64)
