"""A remote ``rigctl doctor [--fix] --json`` answer checked part by part against strict models of what a
local rigctl writes: a part with the wrong shape becomes a failing finding of its own (``malformed_finding``), never
a value the views trust."""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, field_validator

from rigctl.doctor.checkup import AppliedFix
from rigctl.doctor.unit_findings import SPOKEN
from rigctl.fleet.inventory import Host
from rigctl.recipe.problems import format_validation_error


class RemoteFinding(BaseModel):
    """One finding of a remote ``rigctl doctor --json`` (doctor.unit_findings.UnitFinding.to_dict), checked
    strictly: a remote host's answer is never trusted to have the shape the views rely on."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    unit: str
    id: str
    severity: str
    message: str
    fix: str = ""
    where: str | None = None
    line: int | None = Field(default=None, ge=1)
    managed: bool = False
    autofix: bool = False

    @field_validator("severity")
    @classmethod
    def _spoken(cls, value: str) -> str:
        if value not in {s.value for s in SPOKEN}:
            raise ValueError(f"must be one of {', '.join(s.value for s in SPOKEN)}, not {value[:40]!r}")
        return value


class _RemoteError(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    message: str


def _strict_model(shape: type) -> type[BaseModel]:
    """The strict pydantic model of the dataclass ``shape`` (what a local rigctl writes): its fields, types and
    defaults, read from a remote host's JSON as every remote part is: strictly (no value coerced into another
    type), unknown keys ignored (a newer rigctl may say more). One shape serves both ends."""
    hints = typing.get_type_hints(shape)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(shape):
        if f.default is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], f.default)
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            fields[f.name] = (hints[f.name], ...)
    model: type[BaseModel] = create_model(f"Remote{shape.__name__}", __module__=__name__,
                                          __config__=ConfigDict(strict=True, extra="ignore", frozen=True), **fields)
    return model


# One unit a remote ``doctor --fix`` rewrote: doctor.checkup.AppliedFix itself (an older rigctl says nothing of
# what the manager holds after the fix: those fields have their defaults)
RemoteApplied = _strict_model(AppliedFix)


class RemotePatch(BaseModel):
    """One unit a remote ``doctor --fix`` left alone, with the patch it proposes and why."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    unit: str
    fixed: list[str]
    patch: str
    why: str | None = None


class RemoteFix(BaseModel):
    """The ``fix`` part of a remote ``doctor --fix`` document; its lists are checked one by one."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    applied: list[Any]
    patches: list[Any]
    error: str | None = None
    restart: bool = False  # whether --restart was asked (an older rigctl does not say: it had none)
    remaining: list[Any] | None = None  # missing: malformed (what is left after --fix is not known)


class RemoteDoctor(BaseModel):
    """The rest of a remote doctor document; findings are checked one by one (``checked_findings``)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    findings: list[Any] = Field(default_factory=list)
    units: list[str] = Field(default_factory=list)
    driver_version: str | None = None
    counts: dict[str, int] | None = None
    error: _RemoteError | None = None
    fix: RemoteFix | None = None


def malformed_finding(host: Host, what: str, problems: Sequence[str]) -> dict[str, Any]:
    """A failing finding standing for something the remote host answered that has the wrong shape."""
    return {
        "unit": f"(answer of {host.name})", "id": "remote-malformed-answer", "severity": "fail",
        "message": f"remote answered a malformed {what}: {'; '.join(problems)[:500]}",
        "fix": f"check the rigctl installed on {host.name} (`rigctl:` in the hosts file): it must be a "
               "rigctl whose `doctor --json` matches this one's",
        "where": None, "line": None, "managed": False, "autofix": False,
    }


def _each(host: Host, model: type[BaseModel], what: str, path: str,
          raw: list[Any]) -> list[tuple[bool, dict[str, Any]]]:
    """Each item of a remote list checked against ``model``, in order: (True, the item) when it is sound,
    (False, a failing finding that says what is wrong with it) when not."""
    out: list[tuple[bool, dict[str, Any]]] = []
    for i, item in enumerate(raw):
        try:
            out.append((True, model.model_validate(item).model_dump()))
        except ValidationError as exc:
            problems = format_validation_error(f"{path}.{i}", exc)
            out.append((False, malformed_finding(host, f"{what} (#{i + 1})", problems)))
    return out


def checked_findings(host: Host, raw: list[Any]) -> list[dict[str, Any]]:
    """Each remote finding checked; a malformed one becomes a failing finding of its own, in its place."""
    return [item for _, item in _each(host, RemoteFinding, "finding", "findings", raw)]


def checked(host: Host, model: type[BaseModel], what: str, raw: list[Any]) -> tuple[list[dict[str, Any]],
                                                                                      list[dict[str, Any]]]:
    """Each item of a remote ``fix`` list checked: (the good ones, a failing finding for each malformed one)."""
    checked = _each(host, model, what, f"fix.{what}", raw)
    return [item for ok, item in checked if ok], [item for ok, item in checked if not ok]


def checked_fix(host: Host, fix: RemoteFix | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The checked ``fix`` part of a remote ``doctor --fix`` answer, and a failing finding for each part
    that has the wrong shape (a missing ``fix`` is one: the host did not say what it changed)."""
    if fix is None:
        return None, [malformed_finding(host, "doctor --fix report",
                                        ["fix: missing: the host did not say what it changed"])]
    applied, bad_applied = checked(host, RemoteApplied, "applied", fix.applied)
    patches, bad_patches = checked(host, RemotePatch, "patches", fix.patches)
    if fix.remaining is None:
        missing = malformed_finding(host, "doctor --fix report", ["fix.remaining: missing: the host did not say what "
                                                           "failing findings remain"])
        return ({"applied": applied, "patches": patches, "error": fix.error, "restart": fix.restart,
                 "remaining": [missing]},
                [*bad_applied, *bad_patches, missing])
    remaining, bad_remaining = checked(host, RemoteFinding, "remaining", fix.remaining)
    # a malformed remaining finding fails among the remaining ones too: what is left is not known
    return ({"applied": applied, "patches": patches, "error": fix.error, "restart": fix.restart,
             "remaining": remaining + bad_remaining},
            bad_applied + bad_patches + bad_remaining)
