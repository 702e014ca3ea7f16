"""What doctor says about a unit: a finding. What it reads, a unit file with its drop-ins, is
``rigctl.host.unit.Unit``, the type ``rigctl status`` loads too."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from rigctl.findings import Finding
from rigctl.severity import Severity

# what doctor says of a unit (and what a remote doctor's finding may say: fleet.doctor_answer)
SPOKEN: tuple[Severity, ...] = (Severity.FAIL, Severity.WARN, Severity.INFO)


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
