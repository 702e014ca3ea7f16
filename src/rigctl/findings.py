"""The one result vocabulary: what preflight, verify and doctor say about something they checked.

A finding is a stable kebab-case id, a severity, a one-line message, a fix when there is one, and figures
(measured and expected numbers) for scripts. Every producer uses this type, so every consumer (the
CLI's views and JSON, swap, fleet) reads attributes, never string keys, and judges "does this fail"
and "which is worst" by the one order below.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict


class Severity(StrEnum):
    """Declared from best to worst: that order is ``rank``. Preflight says ok/skip/warn/fail/error,
    verify the same (its JSON spells ok "pass", see ``check_status``), doctor fail/warn/info."""

    OK = "ok"
    INFO = "info"  # worth knowing, nothing to fix (doctor)
    SKIP = "skip"  # not judged here (no GPU, not asked for)
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"  # the check itself crashed: a bug in rigctl, counted as failing

    @property
    def rank(self) -> int:
        """Position from best (0) to worst: the one order for "worst of" and for sorting."""
        return _ORDER.index(self)

    @property
    def failing(self) -> bool:
        """Whether a result of this severity makes the command fail (exit 1)."""
        return self in FAILING

    # Compared by rank, not as words: max() is the worst and sorted() goes from best to worst.
    def __lt__(self, other: object) -> bool:
        return self.rank < other.rank if isinstance(other, Severity) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self.rank <= other.rank if isinstance(other, Severity) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self.rank > other.rank if isinstance(other, Severity) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self.rank >= other.rank if isinstance(other, Severity) else NotImplemented


_ORDER: tuple[Severity, ...] = tuple(Severity)
FAILING: frozenset[Severity] = frozenset({Severity.FAIL, Severity.ERROR})


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    severity: Severity
    message: str
    fix: str | None = None
    figures: dict[str, Any] | None = None  # measured and expected numbers, for scripts (gpu-allreduce, soak)

    @property
    def fails(self) -> bool:
        return self.severity.failing


def worst(items: Iterable[Severity | Finding]) -> Severity:
    """The worst severity among findings (or severities); OK for none."""
    return max((i.severity if isinstance(i, Finding) else Severity(i) for i in items), default=Severity.OK)


def any_failing(findings: Iterable[Finding]) -> bool:
    return worst(findings).failing


# verify's JSON (and ``CheckResult.status``) has said "pass" for a passed check since its first version; scripts
# branch on it, so the word stays at that edge. Every other severity is spelled as itself.
CHECK_STATUS_WORDS: dict[Severity, str] = {Severity.OK: "pass"}


def check_status(severity: Severity) -> str:
    """The word verify prints for ``severity``: "pass" for ok, the severity's own word otherwise."""
    return CHECK_STATUS_WORDS.get(severity, severity.value)
