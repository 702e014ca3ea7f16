"""The runner: an explicit registry of checks, run in order, each isolated (a bug in one is reported as
``error`` and the others still run). ``run_checks`` is what the CLI and deploy call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable

from rigctl.errors import UsageError
from rigctl.verify.checks import (
    check_determinism,
    check_health,
    check_models,
    check_needle,
    check_smoke,
    judge_repetition,
    probe_repetition,
)
from rigctl.verify.client import Endpoint, EngineAPI, HttpEngine
from rigctl.verify.report import CHECK_IDS, CheckResult, Expectations, NullProgress, Progress, VerifyReport
from rigctl.verify.session import Session
from rigctl.verify.soak import check_soak

CheckFn = Callable[[Session], Awaitable[CheckResult]]

# Checks that send completions: skipped once the engine is unreachable or hung.
_NEEDS_ENGINE = frozenset({"models", "smoke", "repetition", "determinism", "needle", "soak"})

DESCRIPTIONS = {
    "health": "/health answers 200 (503: dead or unready engine)",
    "models": "/v1/models lists the served name; the engine serves the expected context per request",
    "smoke": "known answers at temperature 0",
    "repetition": "loop detector over every output the run saw",
    "determinism": "the same request twice at temperature 0 gives identical text",
    "needle": "needles at several depths of a context-filling prompt are recalled",
    "soak": "concurrent streams on a shared long prefix: no errors, no health drop, no runaway",
}


def parse_checks(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"smoke,needle"`` -> the ids in canonical order; unknown ids are a usage error."""
    if spec is None:
        return CHECK_IDS
    items = [p.strip() for p in spec.split(",")] if isinstance(spec, str) else [p.strip() for p in spec]
    wanted = {p for p in items if p}
    unknown = sorted(wanted - set(CHECK_IDS))
    if unknown:
        raise UsageError(f"unknown check(s): {', '.join(unknown)}", fix=f"choose from {', '.join(CHECK_IDS)}")
    if not wanted:
        raise UsageError("no check selected", fix=f"choose from {', '.join(CHECK_IDS)}")
    return tuple(c for c in CHECK_IDS if c in wanted)


async def _isolated(check_id: str, fn: CheckFn, s: Session) -> CheckResult:
    start = time.perf_counter()
    try:
        result = await fn(s)
    except Exception as exc:  # the runner owns isolation: a bug in one check must not hide the others
        s.progress.finish(check_id)
        return CheckResult(check_id, "error", f"{type(exc).__name__}: {exc}", {},
                           time.perf_counter() - start)
    return CheckResult(result.id, result.status, result.message, result.figures, time.perf_counter() - start)


async def run_session(s: Session, checks: tuple[str, ...]) -> list[CheckResult]:
    results: dict[str, CheckResult] = {}
    probe_errors: list[str] = []
    registry: dict[str, CheckFn] = {
        "health": check_health, "models": check_models, "smoke": check_smoke,
        "determinism": check_determinism, "needle": check_needle, "soak": check_soak,
    }
    rep_start = 0.0
    for check_id in checks:
        if check_id in _NEEDS_ENGINE and s.blocker is not None:
            results[check_id] = CheckResult(check_id, "skip", f"not run: the engine stopped answering ({s.blocker})")
            continue
        if check_id in _NEEDS_ENGINE and not s.learnt:
            # Once, before the first check that talks to the model: which engine this is, how long one of its
            # requests may be. After health, so that a dead engine is reported as such first.
            s.progress.phase(check_id, "learning the engine's dialect")
            try:
                await s.learn()
            except Exception as exc:  # same isolation as _isolated: a bug here must not hide every check
                s.detection = f"not detected ({type(exc).__name__}: {exc})"
            s.progress.finish(check_id)
        if check_id == "repetition":
            # Its probes run now; its verdict waits until every other check's outputs are in.
            rep_start = time.perf_counter()
            try:
                probe_errors = await probe_repetition(s)
            except Exception as exc:  # same isolation as _isolated
                probe_errors = [f"{type(exc).__name__}: {exc}"]
            rep_start = time.perf_counter() - rep_start
            continue
        results[check_id] = await _isolated(check_id, registry[check_id], s)
    if "repetition" in checks and "repetition" not in results:
        judged = judge_repetition(s, probe_errors)
        results["repetition"] = CheckResult(judged.id, judged.status, judged.message, judged.figures, rep_start)
    # Every check says which dialect it spoke and which context it knew (the needle and the soak say which
    # context they sized for themselves).
    stamp = s.figures()
    return [CheckResult(r.id, r.status, r.message, {**stamp, **r.figures}, r.duration_s)
            for r in (results[c] for c in checks)]


async def run_checks_async(
    endpoint: Endpoint,
    expectations: Expectations,
    checks: Iterable[str] = CHECK_IDS,
    *,
    progress: Progress | None = None,
    engine: EngineAPI | None = None,
) -> VerifyReport:
    selected = parse_checks(list(checks))
    own: HttpEngine | None = None
    if engine is None:
        # The pool must hold every soak stream at once, plus the health watcher.
        own = HttpEngine(endpoint, max_connections=max(expectations.soak.concurrency + 8, 16))
        engine = own
    try:
        session = Session(engine, expectations, progress or NullProgress())
        results = await run_session(session, selected)
    finally:
        if own is not None:
            await own.aclose()
    return VerifyReport(endpoint, results, session.engine_info())


def run_checks(
    endpoint: Endpoint,
    expectations: Expectations,
    checks: Iterable[str] = CHECK_IDS,
    *,
    progress: Progress | None = None,
) -> VerifyReport:
    """Run the selected checks (canonical order) against ``endpoint``. Blocking; deploy calls this with
    ``checks=("health", "models", "smoke", "repetition")`` after warmup."""
    return asyncio.run(run_checks_async(endpoint, expectations, checks, progress=progress))
