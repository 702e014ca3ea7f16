"""How bad a result is, in the one order that preflight, verify and doctor share.

A leaf without pydantic, so that the views and every command that only prints can rank and colour
results without paying for the models; ``rigctl.findings`` builds the ``Finding`` model on it.
"""

from __future__ import annotations

from enum import StrEnum


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
