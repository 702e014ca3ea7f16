"""The one result vocabulary: what preflight, verify and doctor say about something they checked.

A finding is a stable kebab-case id, a severity, a one-line message, a fix when there is one, and figures
(measured and expected numbers) for scripts. Every producer uses this type, so every consumer (the
CLI's views and JSON, swap, fleet) reads attributes, never string keys, and judges "does this fail"
and "which is worst" by the one order of ``rigctl.severity``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict

from rigctl.severity import Severity


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
