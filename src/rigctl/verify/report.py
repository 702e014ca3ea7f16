"""Values verify produces and takes: expectations in, one finding per check out."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, Field, model_serializer

from rigctl.errors import UsageError
from rigctl.findings import Finding, any_failing, check_status
from rigctl.recipe.defaults import REQUEST_TIMEOUT_S
from rigctl.recipe.model import CrashSignature, NeedleSettings, Recipe, SmokePrompt, SoakSettings, Verification
from rigctl.severity import Severity
from rigctl.util.jsonable import jsonable
from rigctl.verify.client import Endpoint
from rigctl.verify.dialects import DIALECT_NAMES


class CheckResult(Finding):
    """One check's finding, and how long it took. A check writes ``CheckResult("smoke", Severity.OK,
    message, figures)``. Its JSON is verify's own, kept since v1: ``status`` (``findings.check_status``:
    "pass" for ok) in place of ``severity``, no ``fix``, figures always an object."""

    figures: dict[str, Any] = Field(default_factory=dict)
    duration_s: float = 0.0

    def __init__(self, id: str, severity: Severity, message: str, figures: dict[str, Any] | None = None,
                 duration_s: float = 0.0) -> None:
        # positional, as every check writes it; pydantic validates the fields as for keywords
        BaseModel.__init__(self, id=id, severity=severity, message=message, figures=figures or {},
                           duration_s=duration_s)

    @property
    def status(self) -> str:
        return check_status(self.severity)

    @model_serializer(mode="plain")
    def _verify_json(self) -> dict[str, Any]:  # reshapes on purpose: verify's keys and words (see above)
        return {"id": self.id, "status": self.status, "message": self.message, "figures": self.figures,
                "duration_s": round(self.duration_s, 3)}


@dataclass(frozen=True)
class VerifyReport:
    endpoint: Endpoint
    checks: list[CheckResult]
    engine: dict[str, Any] = field(default_factory=dict)  # the dialect spoken and the context it serves
    # the fixed temperature-0 requests of the run and their answers (``verify.export.answers_of``): what
    # `verify --export` keeps for a canary to compare with; not in ``to_dict``
    answers: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any_failing(self.checks)

    def get(self, check_id: str) -> CheckResult | None:
        return next((c for c in self.checks if c.id == check_id), None)

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: the endpoint as {url, model}
        return {
            "endpoint": {"url": self.endpoint.base_url, "model": self.endpoint.model},
            "engine": self.engine,
            "checks": jsonable(self.checks),
        }


HEALTH_TIMEOUT_S = 10.0  # the most a health or models request may take


def health_timeout(request_timeout_s: float) -> float:
    """How long /health and /v1/models may take: a request's bound, at most ``HEALTH_TIMEOUT_S``."""
    return min(HEALTH_TIMEOUT_S, float(request_timeout_s))


@dataclass(frozen=True)
class Expectations:
    """What the served model must do. ``context`` is the expected max_model_len (None: take the server's);
    ``engine`` the dialect expected (vllm, sglang, llamacpp, tabbyapi, openai; None: detect it)."""

    context: int | None = None
    engine: str | None = None
    smoke: tuple[SmokePrompt, ...] = field(default_factory=lambda: tuple(Verification().smoke))
    needle: NeedleSettings = field(default_factory=NeedleSettings)
    soak: SoakSettings = field(default_factory=SoakSettings)
    request_timeout_s: float = REQUEST_TIMEOUT_S
    health_timeout_s: float = HEALTH_TIMEOUT_S  # /health and /v1/models (``health_timeout``)
    signatures: tuple[CrashSignature, ...] = ()

    def __post_init__(self) -> None:
        if self.engine is not None and self.engine not in DIALECT_NAMES:
            raise UsageError(f"engine {self.engine!r} is not one verify speaks",
                             fix=f"choose from {', '.join(DIALECT_NAMES)}")

    @classmethod
    def from_verification(
        cls, verification: Verification, *, context: int | None, signatures: tuple[CrashSignature, ...] = (),
        engine: str | None = None,
    ) -> Expectations:
        return cls(
            context=context,
            engine=engine,
            smoke=tuple(verification.smoke),
            needle=verification.needle,
            soak=verification.soak,
            request_timeout_s=float(verification.request_timeout_s),
            health_timeout_s=health_timeout(verification.request_timeout_s),
            signatures=signatures,
        )

    @classmethod
    def from_recipe(cls, recipe: Recipe) -> Expectations:
        return cls.from_verification(
            recipe.verify, context=recipe.context_length, signatures=tuple(recipe.known_issues.signatures),
            engine=recipe.engine.kind.value,
        )


def endpoint_for(recipe: Recipe, *, api_key: str | None = None) -> Endpoint:
    """The recipe's published endpoint (``Recipe.base_url``: a wildcard bind address over loopback)."""
    return Endpoint(recipe.base_url, recipe.served_name, api_key=api_key, health_path=recipe.engine.health_path)


class RunProgress(Protocol):
    """Live progress for the long checks; the CLI draws it, core code only reports."""

    def phase(self, check: str, description: str, total: int | None = None) -> None: ...

    def advance(self, check: str, amount: int = 1) -> None: ...

    def finish(self, check: str) -> None: ...


class NullProgress:
    """No display (``--json``, a pipe, `up`'s own checks)."""

    def phase(self, check: str, description: str, total: int | None = None) -> None:
        pass

    def advance(self, check: str, amount: int = 1) -> None:
        pass

    def finish(self, check: str) -> None:
        pass
