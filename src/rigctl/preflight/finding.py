"""Checks: what preflight is made of. Their results are ``rigctl.findings`` Findings (re-exported here).

A check is a small value: a stable kebab-case id, a one-line summary, and ``run(ctx) -> Finding``.
Expected problems are findings (``fail`` with a fix), never exceptions; an exception out of a check is a
bug in rigctl and the runner reports it as ``error`` while the other checks still run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rigctl.findings import Finding
from rigctl.severity import Severity

if TYPE_CHECKING:
    from rigctl.host.facts import HostFacts
    from rigctl.places import Scope
    from rigctl.preflight.layout import Choice
    from rigctl.recipe.model import Recipe

__all__ = ["Check", "Context", "Finding", "Severity", "Verdict", "fail", "ok", "skip", "warn"]


@dataclass(frozen=True)
class Verdict:
    """What a check function decides; the runner stamps the check's id on it."""

    severity: Severity
    message: str
    fix: str | None = None
    figures: dict[str, Any] | None = None


def ok(message: str) -> Verdict:
    return Verdict(Severity.OK, message)


def warn(message: str, fix: str | None = None) -> Verdict:
    return Verdict(Severity.WARN, message, fix)


def fail(message: str, fix: str | None = None) -> Verdict:
    return Verdict(Severity.FAIL, message, fix)


def skip(message: str) -> Verdict:
    return Verdict(Severity.SKIP, message)


@dataclass(frozen=True)
class Context:
    """Everything a check may look at. Checks never read the host: it is all in ``facts``."""

    recipe: Recipe
    facts: HostFacts
    choice: Choice
    checksums: dict[str, str] | None = None  # shard name -> sha256, when --checksums ran
    checksum_problem: str | None = None  # why checksums could not be computed here
    deep: dict[str, Verdict] = field(default_factory=dict)  # results of opt-in deep checks, by id
    scope: Scope | None = None  # where the unit would go; None: root -> system, else user


@dataclass(frozen=True)
class Check:
    id: str
    summary: str
    fn: Callable[[Context], Verdict]
    forceable: bool = True  # --force ID downgrades its fail to warn; the license gate never yields

    def run(self, ctx: Context) -> Finding:
        v = self.fn(ctx)
        return Finding(id=self.id, severity=v.severity, message=v.message, fix=v.fix, figures=v.figures)
