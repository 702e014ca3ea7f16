"""What a rule sees and what it returns. A unit rule is a function ``(RuleContext) -> list[Hit]``; a host
rule is a function ``(units, facts) -> list[HostHit]``. Neither carries its id or default severity:
the registry entry (``rules.REGISTRY``) does, and the runner (``doctor.audit``) stamps them on."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rigctl.doctor.edits import Edit
from rigctl.doctor.host_state import DoctorFacts
from rigctl.host.serving import ServingSpec
from rigctl.host.unit import Unit
from rigctl.host.unitfile import Entry, MergedUnit
from rigctl.severity import Severity


@dataclass(frozen=True)
class RuleContext:
    """One serving unit, read (its files, parsed once, and what is derived from them: ``rigctl.host.unit``;
    a rule reads its keys, drop-ins applied, as ``ctx.unit.merged``), what it serves, the host facts."""

    unit: Unit
    spec: ServingSpec
    facts: DoctorFacts

    @property
    def run_keys(self) -> tuple[str, str]:
        """Where container options live: quadlet PodmanArgs=, or the service's ExecStart=."""
        return ("Container", "PodmanArgs") if self.unit.kind == "container" else ("Service", "ExecStart")


@dataclass(frozen=True)
class Hit:
    """One problem a unit rule found. ``edits`` non-empty: ``--fix`` can rewrite it (autofix)."""

    message: str
    fix: str
    entry: Entry | None = None  # the offending assignment (its file and line are reported)
    severity: Severity | None = None  # None: the rule's own
    edits: tuple[Edit, ...] = ()


@dataclass(frozen=True)
class HostHit:
    """One problem a host rule found, about ``subject`` (a CDI spec, or a unit it hits)."""

    subject: str
    message: str
    fix: str
    severity: Severity | None = None


@dataclass(frozen=True)
class UnitRule:
    id: str
    severity: Severity
    summary: str
    check: Callable[[RuleContext], list[Hit]]
    # why the rule exists, for `rigctl explain`: the failure it saves an operator from, in plain words
    why: str = ""


@dataclass(frozen=True)
class HostRule:
    id: str
    severity: Severity
    summary: str
    check: Callable[[Sequence[RuleContext], DoctorFacts], list[HostHit]]
    # why the rule exists, for `rigctl explain`: the failure it saves an operator from, in plain words
    why: str = ""


def last_raw(merged: MergedUnit, section: str, key: str) -> Entry | None:
    """The last assignment of a key, empty ones included (an empty one is where a fix must go)."""
    found = [e for e in merged.entries if e.section == section and e.key == key]
    return found[-1] if found else None


def entry_with(merged: MergedUnit, section: str, key: str, needle: str) -> Entry | None:
    """The last assignment of a list key whose value holds ``needle``."""
    for entry in reversed(merged.all(section, key)):
        if needle in entry.value:
            return entry
    return None
