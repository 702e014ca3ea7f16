"""What doctor reads and what it says: a unit file with its drop-ins, and a finding."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from rigctl.findings import Finding
from rigctl.host.unitfile import MergedUnit, parse

UnitKind = Literal["container", "service"]


@dataclass(frozen=True)
class UnitFile:
    """A unit file as found on a host, with the drop-ins that apply to it (in the order systemd
    applies them)."""

    path: str
    text: str
    dropins: tuple[DropIn, ...] = ()
    scope: Literal["system", "user", "path"] = "path"

    @property
    def kind(self) -> UnitKind:
        return "container" if self.path.endswith(".container") else "service"

    def texts(self) -> dict[str, str]:
        return {self.path: self.text, **{d.path: d.text for d in self.dropins}}

    def with_texts(self, texts: Mapping[str, str]) -> UnitFile:
        return UnitFile(
            self.path,
            texts.get(self.path, self.text),
            tuple(DropIn(d.path, texts.get(d.path, d.text)) for d in self.dropins),
            self.scope,
        )

    def merged(self) -> MergedUnit:
        return MergedUnit.of(parse(self.path, self.text), [parse(d.path, d.text) for d in self.dropins])


@dataclass(frozen=True)
class DropIn:
    """Kept apart from its unit's text: a finding names the file that holds its line, and a fix rewrites
    that file."""

    path: str
    text: str


class UnitFinding(Finding):
    """A finding about one unit file (or, for a host-level rule, the file it is about). Doctor speaks
    fail, warn and info; its JSON has no ``figures`` (doctor measures nothing)."""

    unit: str  # the unit file, or for a host-level rule the file it is about (a CDI spec)
    fix: str
    figures: dict[str, Any] | None = Field(default=None, exclude=True)
    where: str | None = None  # the file holding the offending line (the unit or one of its drop-ins)
    line: int | None = None  # 1-based
    managed: bool = False
    autofix: bool = False  # `doctor --fix` can rewrite this
