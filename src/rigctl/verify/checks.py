"""Every verify check, and ``REGISTRY``, the one list of them that the runner and the CLI read.

A check takes the session and returns a CheckResult; the engine misbehaving is a finding (``fail``),
never an exception. Help text for each check is its docstring. A new check is one function here (or in its
own module, like the soak) plus one ``REGISTRY`` entry: its id is then accepted by ``--checks``, run in
the registry's order, and reported like the others.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from rigctl.recipe.defaults import MAX_CONTEXT
from rigctl.severity import Severity
from rigctl.verify.client import EngineRequestError, Request, listed_context, listed_entry
from rigctl.verify.enginejson import figure_text
from rigctl.verify.prompts import ESTIMATE_MARGIN, make_needles, needle_builder, score_needles
from rigctl.verify.repetition import detect_repetition
from rigctl.verify.report import CheckResult
from rigctl.verify.session import Session
from rigctl.verify.soak import check_soak

REPETITION_PROBES: tuple[Request, ...] = (
    Request(max_tokens=128, prompt="Write a short paragraph about the history of the printing press.\n\n"),
    Request(max_tokens=128, prompt="Explain in a few sentences how a refrigerator keeps food cold.\n\n"),
    Request(max_tokens=128, messages=(("user", "Describe a sunrise over the sea in three sentences."),)),
)
DETERMINISM_PROBE = Request(max_tokens=48, prompt="Here is one sentence about the ocean:")
MAX_TEXT = 200  # characters of model output quoted in figures


def clip(text: str, limit: int = MAX_TEXT) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


async def check_health(s: Session) -> CheckResult:
    """`/health` answers 200; 503 means a dead or unready engine."""
    path = s.engine.endpoint.health_path
    try:
        answer = await s.engine.get(path, timeout=s.expect.health_timeout_s)
    except EngineRequestError as err:
        s.blocker = f"health: {err.message}"
        return CheckResult("health", Severity.FAIL, f"{path}: {err.message}", {"error": err.kind})
    figures = {"status_code": answer.status, "latency_ms": round(answer.latency_s * 1000, 1)}
    if answer.status == 200:
        return CheckResult("health", Severity.OK, f"{path} answered 200", figures)
    if answer.status == 503:
        return CheckResult("health", Severity.FAIL, f"{path} answered 503: the engine is dead or not ready yet",
                           figures)
    return CheckResult("health", Severity.FAIL, f"{path} answered {answer.status}", figures)


async def check_models(s: Session) -> CheckResult:
    """`/v1/models` lists the served name; the engine's context for one request (its dialect says where it
    reports it: vLLM's `max_model_len`, llama.cpp's `n_ctx` per slot, TabbyAPI's `max_seq_len`) equals the
    expected context; an engine other than the recipe's is a finding."""
    model = s.engine.endpoint.model
    try:
        entries = await s.engine.models(timeout=s.expect.health_timeout_s)
    except EngineRequestError as err:
        if err.kind in ("timeout", "connect"):
            s.blocker = f"models: {err.message}"
        if err.kind == "not-openai":
            s.foreign = err.message
        return CheckResult("models", Severity.FAIL, err.message, {"error": err.kind})
    ids = [clip(str(e.get("id")), 100) for e in entries[:50]]
    figures: dict[str, object] = {"served": ids, "listed": len(entries), "detection": s.detection}
    entry = listed_entry(entries, model)
    if entry is None:
        return CheckResult("models", Severity.FAIL, f"{model!r} is not served; the server lists {ids}", figures)
    label = s.dialect.context_label
    served = s.server_context
    figures["max_model_len"] = listed_context(entry)
    figures["served_context"] = served
    if s.limit is not None and s.limit.slots is not None:
        figures.update({"slots": s.limit.slots, "total_context": s.limit.total})
    figures["expected_context"] = s.expect.context
    if s.mismatch is not None:
        return CheckResult("models", Severity.FAIL,
                           f"expected a {s.mismatch} engine (the recipe's engine.kind or --engine), "
                           f"but the server answers as {s.dialect.name}", figures)
    if s.unbelieved is not None:
        return CheckResult("models", Severity.FAIL, f"{model!r} is listed with {label} {figure_text(s.unbelieved)}, "
                           f"more than any engine serves ({MAX_CONTEXT:,}); not believed", figures)
    if s.context_problem is not None:
        return CheckResult("models", Severity.FAIL, f"{model!r} is served, but its {label} cannot be read: "
                           f"{s.context_problem}", figures)
    if served is None:
        return CheckResult("models", Severity.OK, f"{model!r} is served (the server does not report {label})", figures)
    assert s.limit is not None
    expected = s.expect.context
    if expected is not None and served < expected:
        split = (f" ({s.limit.total:,} split over {s.limit.slots} slots)" if s.limit.total and s.limit.slots
                 else "")
        return CheckResult(
            "models", Severity.FAIL,
            f"{model!r} serves {served:,} tokens per request{split}, less than the expected context of "
            f"{expected:,}: the engine is configured for less than expected ({s.limit.source}); needle and soak "
            f"are sized to {served:,}", figures)
    if expected is not None and served != expected:
        return CheckResult("models", Severity.FAIL,
                           f"{model!r} is served with {label} {served:,}, expected {expected:,}", figures)
    return CheckResult("models", Severity.OK, f"{model!r} is served, {label} {served:,}", figures)


async def check_smoke(s: Session) -> CheckResult:
    """Known answers at temperature 0: each smoke prompt's answer must contain its expected text."""
    results: list[dict[str, object]] = []
    failed: list[str] = []
    for i, smoke in enumerate(s.expect.smoke):
        request = (Request(smoke.max_tokens, messages=(("user", smoke.prompt),)) if smoke.chat
                   else Request(smoke.max_tokens, prompt=smoke.prompt))
        try:
            done = await s.complete(f"smoke[{i}]", request)
        except EngineRequestError as err:
            results.append({"prompt": smoke.prompt, "error": err.message})
            failed.append(f"{smoke.prompt!r}: {err.message}")
            if s.blocker:
                break
            continue
        ok = smoke.expect_contains.lower() in done.text.lower()
        results.append({"prompt": smoke.prompt, "expect": smoke.expect_contains, "answer": clip(done.text),
                        "finish_reason": done.finish_reason, "pass": ok,
                        "latency_ms": round(done.latency_s * 1000, 1)})
        if not ok:
            failed.append(f"{smoke.prompt!r} -> {clip(done.text, 80)!r} lacks {smoke.expect_contains!r}")
    figures: dict[str, object] = {"prompts": results}
    if failed:
        return CheckResult("smoke", Severity.FAIL, "; ".join(failed), figures)
    return CheckResult("smoke", Severity.OK, f"{len(results)} known answer(s) correct", figures)


async def probe_repetition(s: Session) -> CheckResult:
    """The repetition check's own open-ended prompts; their outputs join everything else the run sees, and
    the verdict (``judge_repetition``) waits until every other check's outputs are in."""
    errors: list[str] = []
    for i, probe in enumerate(REPETITION_PROBES):
        try:
            await s.complete(f"repetition[{i}]", probe)
        except EngineRequestError as err:
            errors.append(err.message)
            if s.blocker:
                break
    return CheckResult("repetition", Severity.SKIP, "probed; judged after the other checks", {"probe_errors": errors})


def judge_repetition(s: Session, probed: CheckResult) -> CheckResult:
    """A loop detector over every output the run saw: word n-gram dominance, repeated subwords and
    characters (the story's `the capital France capital France ...`)."""
    # probing that raised (a bug, isolated by the runner) counts as a failed probe
    probe_errors: list[str] = [probed.message] if probed.severity is Severity.ERROR else probed.figures["probe_errors"]
    findings = []
    for out in s.outputs:
        finding = detect_repetition(out.text)
        if finding is not None:
            findings.append({"source": out.source, "kind": finding.kind, "unit": finding.unit,
                             "count": finding.count, "coverage": round(finding.coverage, 3),
                             "excerpt": finding.excerpt, "why": finding.describe()})
    figures: dict[str, object] = {"outputs_checked": len(s.outputs), "looping": len(findings),
                                  "findings": findings[:5]}
    if probe_errors:
        figures["probe_errors"] = probe_errors[:3]
    if findings:
        first = findings[0]
        return CheckResult("repetition", Severity.FAIL,
                           f"{len(findings)} of {len(s.outputs)} outputs loop; {first['source']}: {first['why']}",
                           figures)
    if not s.outputs:
        return CheckResult("repetition", Severity.SKIP, "no output to examine: every request failed", figures)
    if probe_errors:
        return CheckResult("repetition", Severity.FAIL, f"probe request failed: {probe_errors[0]}", figures)
    return CheckResult("repetition", Severity.OK, f"no loop in {len(s.outputs)} outputs", figures)


async def check_determinism(s: Session) -> CheckResult:
    """The same request twice at temperature 0 gives identical text."""
    try:
        first = await s.complete("determinism[0]", DETERMINISM_PROBE)
        second = await s.complete("determinism[1]", DETERMINISM_PROBE)
    except EngineRequestError as err:
        return CheckResult("determinism", Severity.FAIL, err.message, {"error": err.kind})
    figures: dict[str, object] = {"first": clip(first.text), "second": clip(second.text)}
    if first.text == second.text and not first.text.strip():
        return CheckResult("determinism", Severity.WARN, "both answers were empty: identical, but that proves little",
                           figures)
    if first.text == second.text:
        return CheckResult("determinism", Severity.OK, f"identical answers ({len(first.text)} characters)", figures)
    at = next((i for i, (a, b) in enumerate(zip(first.text, second.text, strict=False)) if a != b),
              min(len(first.text), len(second.text)))
    figures["first_difference_at"] = at
    return CheckResult("determinism", Severity.FAIL,
                       f"two identical requests at temperature 0 differ from character {at}", figures)


async def check_needle(s: Session) -> CheckResult:
    """Needles at several depths of a prompt filling the context up to its maximum minus the answer budget;
    passes when every needle's value appears in the answer. The prompt never exceeds what the engine serves
    per request, whatever is expected."""
    settings = s.expect.needle
    context = settings.context or s.expect.context or s.server_context
    if s.server_context is not None and context is not None:
        context = min(context, s.server_context)  # a longer prompt would only be refused
    if context is None:
        return CheckResult("needle", Severity.SKIP,
                           "no context length known: pass --context, or use a server that reports max_model_len")
    answer_budget = min(settings.answer_budget, context // 4)
    target = context - answer_budget
    needles = make_needles(settings.depths)
    build = needle_builder(needles)
    timeout = s.expect.request_timeout_s
    s.progress.phase("needle", f"sizing a {target:,}-token prompt")
    try:
        sized = await s.size(build, target, margin=ESTIMATE_MARGIN)
    except EngineRequestError as err:
        if err.kind in ("timeout", "connect"):
            s.blocker = f"needle: {err.message}"
        return CheckResult("needle", Severity.FAIL, f"while sizing the prompt: {err.message}", {"error": err.kind})
    except ValueError as exc:
        return CheckResult("needle", Severity.SKIP, str(exc))
    # A long prefill is slow on any engine; allow one second per thousand tokens on top of the timeout.
    answer_timeout = timeout + sized.tokens / 1000
    s.progress.phase("needle", f"waiting for the answer to {sized.tokens:,} tokens")
    figures: dict[str, object] = {"context": context, "target_prompt_tokens": target, **s.sizing_figures(sized),
                                  "needles": len(needles), "depths": [n.depth for n in needles]}
    text, sentences, done, refused = sized.text, sized.sentences, None, 0
    for _attempt in range(3):
        try:
            done = await s.complete("needle", Request(answer_budget, prompt=text), timeout=answer_timeout)
            break
        except EngineRequestError as err:
            too_long = err.status == 400 and sized.method != "tokenize" and "context" in err.message.lower()
            if not too_long:
                s.progress.finish("needle")
                return CheckResult("needle", Severity.FAIL, err.message, {**figures, "error": err.kind})
            sentences = int(sentences * 0.95)  # the estimate overshot: 5% shorter, and again
            text = build(sentences, 0)
            refused += 1
    s.progress.finish("needle")
    if refused:
        figures["refused_lengths"] = refused  # estimated lengths the engine refused before one fitted
    if done is None:
        return CheckResult("needle", Severity.FAIL, "the server refused every prompt length tried", figures)
    found, missing = score_needles(done.text, needles)
    reached = done.prompt_tokens
    figures.update({
        "prompt_tokens": reached, "found": len(found), "missing_depths": [n.depth for n in missing],
        "answer": clip(done.text), "finish_reason": done.finish_reason,
        "latency_s": round(done.latency_s, 2),
    })
    shown = figure_text(reached) if reached is not None else f"~{sized.tokens:,} (estimated)"
    if missing:
        depths = ", ".join(f"{n.depth:.0%}" for n in missing)
        return CheckResult("needle", Severity.FAIL,
                           f"{len(found)}/{len(needles)} needles recalled at {shown} prompt tokens; "
                           f"lost at depth {depths}", figures)
    if reached is not None and reached < 0.9 * target:
        return CheckResult("needle", Severity.WARN, f"{len(found)}/{len(needles)} needles recalled, but the prompt "
                           f"reached only {figure_text(reached)} of {target:,} tokens", figures)
    return CheckResult("needle", Severity.OK, f"{len(found)}/{len(needles)} needles recalled at {shown} prompt tokens "
                       f"(context {context:,})", figures)




CheckFn = Callable[[Session], Awaitable[CheckResult]]


@dataclass(frozen=True)
class VerifyCheck:
    """A registry entry: how the runner treats one check."""

    run: CheckFn
    needs_engine: bool = True  # sends requests to the model: skipped once the engine stopped answering
    # judged after every other check has run, from what ``run`` returned (and the outputs all checks saw)
    judge: Callable[[Session, CheckResult], CheckResult] | None = None


# The checks by id (``--checks``, the report's ``id``), in the order they run and are reported.
REGISTRY: dict[str, VerifyCheck] = {
    "health": VerifyCheck(check_health, needs_engine=False),
    "models": VerifyCheck(check_models),
    "smoke": VerifyCheck(check_smoke),
    "repetition": VerifyCheck(probe_repetition, judge=judge_repetition),
    "determinism": VerifyCheck(check_determinism),
    "needle": VerifyCheck(check_needle),
    "soak": VerifyCheck(check_soak),
}
