"""The runner: the checks of ``rigctl.verify.checks.REGISTRY``, run in its order, each isolated (a bug in one
is reported as ``error`` and the others still run). ``run_checks`` is what the CLI and deploy call."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

from rigctl.errors import UsageError
from rigctl.severity import Severity
from rigctl.util.lists import split_list
from rigctl.verify.checks import REGISTRY, CheckFn
from rigctl.verify.client import Endpoint, EngineAPI, HttpEngine
from rigctl.verify.export import answers_of
from rigctl.verify.report import CheckResult, Expectations, NullProgress, RunProgress, VerifyReport
from rigctl.verify.session import Session


def check_ids() -> tuple[str, ...]:
    """Every check's id, in the order they run (the registry's, read when asked)."""
    return tuple(REGISTRY)


def parse_checks(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """``"smoke,needle"`` -> the ids in canonical order; unknown ids are a usage error."""
    known = check_ids()
    if spec is None:
        return known
    wanted = set(split_list(spec, option="--checks"))
    unknown = sorted(wanted - set(known))
    if unknown:
        raise UsageError(f"unknown check(s): {', '.join(unknown)}", fix=f"choose from {', '.join(known)}")
    if not wanted:
        raise UsageError("no check selected", fix=f"choose from {', '.join(known)}")
    return tuple(c for c in known if c in wanted)


async def _isolated(check_id: str, fn: CheckFn, s: Session) -> CheckResult:
    start = time.perf_counter()
    try:
        result = await fn(s)
    except Exception as exc:  # the runner owns isolation: a bug in one check must not hide the others
        s.progress.finish(check_id)
        return CheckResult(check_id, Severity.ERROR, f"{type(exc).__name__}: {exc}", {},
                           time.perf_counter() - start)
    return CheckResult(result.id, result.severity, result.message, result.figures, time.perf_counter() - start)


async def run_session(s: Session, checks: tuple[str, ...]) -> list[CheckResult]:
    results: dict[str, CheckResult] = {}
    to_judge: list[str] = []
    for check_id in checks:
        check = REGISTRY[check_id]
        if check.needs_engine and s.foreign is not None:
            results[check_id] = CheckResult(check_id, Severity.SKIP,
                                            f"not run: no OpenAI-compatible server at {s.engine.endpoint.base_url}")
            continue
        if check.needs_engine and s.blocker is not None:
            results[check_id] = CheckResult(check_id, Severity.SKIP,
                                            f"not run: the engine stopped answering ({s.blocker})")
            continue
        if check.needs_engine and not s.learnt:
            # Once, before the first check that talks to the model: which engine this is, how long one of its
            # requests may be. After health, so that a dead engine is reported as such first.
            s.progress.phase(check_id, "learning the engine's dialect")
            try:
                await s.learn()
            except Exception as exc:  # same isolation as _isolated: a bug here must not hide every check
                s.detection = f"not detected ({type(exc).__name__}: {exc})"
            s.progress.finish(check_id)
            if s.foreign is not None:  # the first look at the API found none: this check says so, no other runs
                results[check_id] = CheckResult(check_id, Severity.FAIL, s.foreign, {"error": "not-openai"})
                continue
        results[check_id] = await _isolated(check_id, check.run, s)
        if check.judge is not None:
            to_judge.append(check_id)  # e.g. repetition: its probes ran now, its verdict needs every output
    for check_id in to_judge:
        judge = REGISTRY[check_id].judge
        assert judge is not None
        ran = results[check_id]
        judged = judge(s, ran)
        results[check_id] = CheckResult(judged.id, judged.severity, judged.message, judged.figures, ran.duration_s)
    # Every check says which dialect it spoke and which context it knew (the needle and the soak say which
    # context they sized for themselves).
    stamp = s.figures()
    return [CheckResult(r.id, r.severity, r.message, {**stamp, **r.figures}, r.duration_s)
            for r in (results[c] for c in checks)]


async def run_checks_async(
    endpoint: Endpoint,
    expectations: Expectations,
    checks: Iterable[str] | None = None,
    *,
    progress: RunProgress | None = None,
    engine: EngineAPI | None = None,
) -> VerifyReport:
    selected = parse_checks(None if checks is None else list(checks))
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
    return VerifyReport(endpoint, results, session.engine_info(), answers_of(session.outputs))


def run_checks(
    endpoint: Endpoint,
    expectations: Expectations,
    checks: Iterable[str] | None = None,
    *,
    progress: RunProgress | None = None,
) -> VerifyReport:
    """Run the selected checks (canonical order; None: all) against ``endpoint``. Blocking; deploy calls this with
    ``checks=("health", "models", "smoke", "repetition")`` after warmup."""
    return asyncio.run(run_checks_async(endpoint, expectations, checks, progress=progress))
