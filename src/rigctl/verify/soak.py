"""The soak: the agent fan-out that killed the story's engine. Many concurrent streaming requests share one
long system prefix and differ only in a short suffix. It fails when a request errors or is cut off, when
``/health`` drops during or after it, or when outputs run away (stop by length where the solo baseline
stopped by itself, or run far beyond that baseline). It reports vLLM bench's figures."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from rigctl.severity import Severity
from rigctl.verify.client import Completion, EngineAPI, EngineRequestError, Request, percentile
from rigctl.verify.prompts import ESTIMATE_MARGIN, prefix_builder
from rigctl.verify.report import CheckResult
from rigctl.verify.session import Output, Session
from rigctl.verify.signatures import match_signatures

PREFIX_HEADER = (
    "You are one agent in a team of agents working from the same shared notes. The notes follow; answer only "
    "the task given to you after them.\n\nShared notes: "
)
TASKS = (
    "name one fruit that is yellow", "name a planet larger than Earth", "name a river in Africa",
    "name an animal that lives in the sea", "name a colour of the rainbow", "name a metal used in wires",
    "name a season of the year", "name a musical instrument with strings", "name a country in South America",
    "name a tool used to cut wood", "name a bird that cannot fly", "name a vegetable that grows underground",
)
BASELINE_SAMPLES = 2
RUNAWAY_SLACK_TOKENS = 16  # small answers vary by a few tokens; a runaway is an order of magnitude
HEALTH_POLL_S = 1.0
SUFFIX_ROOM = 64  # tokens kept free for each request's own task line after the shared prefix


def suffix(i: int) -> str:
    return f"\n\nTask for agent {i}: {TASKS[i % len(TASKS)]}. Reply in one short sentence.\nAgent {i}:"


@dataclass
class StreamOutcome:
    index: int
    done: Completion | None = None
    error: str | None = None
    kind: str | None = None


@dataclass
class HealthWatch:
    drops: list[dict[str, Any]] = field(default_factory=list)
    polls: int = 0


async def _watch_health(engine: EngineAPI, watch: HealthWatch, start: float, stop: asyncio.Event) -> None:
    path = engine.endpoint.health_path
    while not stop.is_set():
        status: str
        try:
            answer = await engine.get(path, timeout=5.0)
            status = str(answer.status)
        except EngineRequestError as err:
            status = err.kind
        watch.polls += 1
        if status != "200":
            watch.drops.append({"at_s": round(time.perf_counter() - start, 2), "health": status})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), HEALTH_POLL_S)


def _ms(values: list[float]) -> dict[str, float]:
    return {"mean": round(sum(values) / len(values) * 1000, 2) if values else 0.0,
            "median": round(percentile(values, 50) * 1000, 2), "p99": round(percentile(values, 99) * 1000, 2)}


def bench_figures(outcomes: list[StreamOutcome], duration_s: float) -> dict[str, Any]:
    """vLLM bench's vocabulary: completed, failed, request_throughput, output_throughput, and
    {mean,median,p99}_{ttft,itl,e2el}_ms."""
    done = [o.done for o in outcomes if o.done is not None and o.error is None]
    ttft = [d.ttft_s for d in done if d.ttft_s is not None]
    itl = [gap for d in done for gap in d.itl_s()]
    e2el = [d.latency_s for d in done]
    out_tokens = sum(d.output_tokens for d in done)
    figures: dict[str, Any] = {
        "completed": len(done),
        "failed": len(outcomes) - len(done),
        "duration_s": round(duration_s, 3),
        "total_output_tokens": out_tokens,
        "request_throughput": round(len(done) / duration_s, 3) if duration_s > 0 else 0.0,
        "output_throughput": round(out_tokens / duration_s, 2) if duration_s > 0 else 0.0,
    }
    for name, values in (("ttft", ttft), ("itl", itl), ("e2el", e2el)):
        stats = _ms(values)
        for stat, value in stats.items():
            figures[f"{stat}_{name}_ms"] = value
    return figures


async def drive(
    engine: EngineAPI,
    prompts: list[str],
    *,
    concurrency: int,
    max_tokens: int,
    timeout_s: float,
    idle_timeout_s: float,
    on_done: Any = None,
) -> tuple[list[StreamOutcome], float]:
    """Send every prompt as a streaming completion, ``concurrency`` at a time, within ``timeout_s`` in all.
    Used by the soak and by the client benchmark."""
    gate = asyncio.Semaphore(concurrency)
    outcomes = [StreamOutcome(i) for i in range(len(prompts))]

    async def one(i: int) -> None:
        async with gate:
            try:
                outcomes[i].done = await engine.complete(
                    Request(max_tokens, prompt=prompts[i], stream=True), timeout=timeout_s,
                    idle_timeout=idle_timeout_s)
            except EngineRequestError as err:
                outcomes[i].error, outcomes[i].kind = err.message, err.kind
        if on_done is not None:
            on_done()

    start = time.perf_counter()
    tasks = [asyncio.create_task(one(i)) for i in range(len(prompts))]
    _, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    for i, task in enumerate(tasks):
        if task in pending:
            outcomes[i].error, outcomes[i].kind = f"not finished within the soak's {timeout_s:g}s", "timeout"
    if pending:
        await asyncio.gather(*pending, return_exceptions=True)
    return outcomes, time.perf_counter() - start


async def check_soak(s: Session) -> CheckResult:
    """At least 16 concurrent streams sharing a 2,000-token system prefix; fails on errors, cut-offs, health
    drops or runaways; reports TTFT, ITL, E2E latency (p50, p99) and output tokens/s."""
    cfg = s.expect.soak
    engine = s.engine
    context = s.context
    prefix_target, max_tokens = cfg.prefix_tokens, cfg.max_tokens
    notes: list[str] = []
    if context is not None and max_tokens > context // 4:
        # The output must leave room for a prefix worth sharing: a quarter of the context at most.
        max_tokens = max(context // 4, 1)
        notes.append(f"output capped at {max_tokens:,} tokens to fit the {context:,}-token context")
    if context is not None and prefix_target + max_tokens + SUFFIX_ROOM > context:
        prefix_target = max(context - max_tokens - SUFFIX_ROOM, 64)
        notes.append(f"prefix shortened to {prefix_target:,} tokens to fit the {context:,}-token context")
    s.progress.phase("soak", f"sizing a {prefix_target:,}-token shared prefix")
    try:
        # Where the length is only estimated, aim 3% long: the soak needs at least its prefix, not at most;
        # but where the context bounds it, 3% short: a refused request tests nothing.
        sized = await s.size(prefix_builder(PREFIX_HEADER), prefix_target,
                             margin=ESTIMATE_MARGIN if notes else 1.03)
    except EngineRequestError as err:
        s.progress.finish("soak")
        return CheckResult("soak", Severity.FAIL, f"while sizing the prefix: {err.message}", {"error": err.kind})
    except ValueError as exc:
        s.progress.finish("soak")
        return CheckResult("soak", Severity.SKIP, f"no prefix fits: {exc}")
    prompts = [sized.text + suffix(i) for i in range(cfg.requests)]
    idle = s.expect.request_timeout_s

    # Solo baselines: the same prompts, one at a time, before any batching.
    baselines: dict[int, Completion] = {}
    s.progress.phase("soak", "solo baseline", total=min(BASELINE_SAMPLES, len(prompts)))
    for i in range(min(BASELINE_SAMPLES, len(prompts))):
        try:
            baselines[i] = await engine.complete(Request(max_tokens, prompt=prompts[i], stream=True),
                                                 timeout=cfg.timeout_s, idle_timeout=idle)
        except EngineRequestError as err:
            s.progress.finish("soak")
            return CheckResult("soak", Severity.FAIL, f"solo baseline request failed: {err.message}",
                               {"error": err.kind})
        s.outputs.append(Output(f"soak-baseline[{i}]", baselines[i].text))
        s.progress.advance("soak")

    s.progress.phase("soak", f"{cfg.requests} streams, {cfg.concurrency} at a time", total=cfg.requests)
    stop = asyncio.Event()
    watch = HealthWatch()
    start = time.perf_counter()
    watcher = asyncio.create_task(_watch_health(engine, watch, start, stop))
    try:
        outcomes, duration = await drive(engine, prompts, concurrency=cfg.concurrency, max_tokens=max_tokens,
                                         timeout_s=cfg.timeout_s, idle_timeout_s=idle,
                                         on_done=lambda: s.progress.advance("soak"))
    finally:
        stop.set()
        await watcher
    s.progress.phase("soak", "health after the soak")
    after: list[str] = []
    for _ in range(2):  # the story's engine died moments after the burst, not during it
        await asyncio.sleep(HEALTH_POLL_S)
        try:
            answer = await engine.get(engine.endpoint.health_path, timeout=5.0)
            after.append(str(answer.status))
        except EngineRequestError as err:
            after.append(err.kind)
    s.progress.finish("soak")

    for o in outcomes:
        if o.done is not None:
            s.outputs.append(Output(f"soak[{o.index}]", o.done.text))
    result = _judge(s, factor=cfg.runaway_factor, concurrency=cfg.concurrency, prefix_tokens=sized.tokens,
                    sizing=sized.method, notes=notes, outcomes=outcomes, duration=duration, baselines=baselines,
                    watch=watch, after=after)
    sizing = s.sizing_figures(sized)
    result.figures.update({"context": context, "max_tokens": max_tokens, "tokenizer": sizing["tokenizer"]})
    if "sizing_note" in sizing:
        result.figures["sizing_note"] = sizing["sizing_note"]
    return result


def _judge(
    s: Session, *, factor: float, concurrency: int, prefix_tokens: int, sizing: str, notes: list[str],
    outcomes: list[StreamOutcome], duration: float, baselines: dict[int, Completion], watch: HealthWatch,
    after: list[str],
) -> CheckResult:
    # A stream that ends without a finish reason was cut off: it counts as a failed request, so mark it
    # before the errors are collected.
    cut = [o for o in outcomes if o.done is not None and o.done.finish_reason is None]
    for o in cut:
        o.error, o.kind = "stream ended without a finish_reason (cut off)", "cut-off"
    errors = [o for o in outcomes if o.error is not None]
    base_tokens = [b.output_tokens for b in baselines.values()]
    base_stopped = all(b.finish_reason == "stop" for b in baselines.values())
    runaways: list[dict[str, Any]] = []
    for o in outcomes:
        if o.done is None or o.error is not None:
            continue
        ref = baselines[o.index].output_tokens if o.index in baselines else max(base_tokens, default=0)
        # Stopping by length is a runaway only where the solo run of the same prompt stopped by itself.
        own_stopped = baselines[o.index].finish_reason == "stop" if o.index in baselines else base_stopped
        by_length = o.done.finish_reason == "length" and own_stopped
        if by_length or o.done.output_tokens > factor * ref + RUNAWAY_SLACK_TOKENS:
            runaways.append({"request": o.index, "output_tokens": o.done.output_tokens, "baseline_tokens": ref,
                             "finish_reason": o.done.finish_reason})
    figures = bench_figures(outcomes, duration)
    measured = [b.prompt_tokens for b in baselines.values() if b.prompt_tokens is not None]
    figures.update({
        "requests": len(outcomes), "concurrency": concurrency, "prefix_tokens": prefix_tokens,
        "prompt_tokens": measured[0] if measured else None,
        "prefix_sizing": sizing, "baseline_output_tokens": base_tokens, "runaway_factor": factor,
        "runaways": len(runaways), "cut_off": len(cut), "health_polls": watch.polls,
        "health_drops": watch.drops[:10], "health_after": after,
    })
    if notes:
        figures["notes"] = notes
    if errors:
        figures["errors"] = [{"request": o.index, "kind": o.kind, "message": o.error} for o in errors[:5]]
    if runaways:
        figures["runaway_samples"] = runaways[:5]
    messages = [o.error or "" for o in errors]
    hits = match_signatures(s.expect.signatures, "\n".join(messages)) if s.expect.signatures else []
    if hits:
        figures["signatures"] = [asdict(h) for h in hits]

    problems: list[str] = []
    dead_after = [a for a in after if a != "200"]
    if dead_after:
        state = {"connect": "unreachable (connection refused)", "timeout": "not answering"}.get(
            dead_after[-1], f"answering {dead_after[-1]}")
        problems.append(f"after the soak /health is {state}: the engine died under shared-prefix concurrency "
                        "(look for a crash signature in its log; an engine that exits 0 needs Restart=always)")
    elif watch.drops:
        problems.append(f"health dropped {len(watch.drops)} time(s) during the soak "
                        f"(first: {watch.drops[0]['health']} at {watch.drops[0]['at_s']}s)")
    if errors:
        kinds = sorted({str(o.kind) for o in errors})
        problems.append(f"{len(errors)}/{len(outcomes)} requests failed ({', '.join(kinds)}): {errors[0].error}")
    if runaways:
        r = runaways[0]
        problems.append(f"{len(runaways)}/{len(outcomes)} outputs ran away under batching (request {r['request']}: "
                        f"{r['output_tokens']} tokens, finish {r['finish_reason']}, solo baseline "
                        f"{r['baseline_tokens']})")
    if not figures["completed"] and not problems:  # defensive: a soak with nothing finished proves nothing
        problems.append(f"none of the {len(outcomes)} requests completed")
    if problems:
        return CheckResult("soak", Severity.FAIL, "; ".join(problems), figures)
    message = (f"{figures['completed']}/{len(outcomes)} streams at concurrency {concurrency} on a "
               f"{prefix_tokens:,}-token shared prefix; TTFT p50 {figures['median_ttft_ms']:.0f} ms, "
               f"p99 {figures['p99_ttft_ms']:.0f} ms; {figures['output_throughput']:.0f} output tok/s")
    reached = measured[0] if measured else prefix_tokens
    if reached < 2000:
        why = "; ".join(notes) or "the estimate fell short"
        return CheckResult("soak", Severity.WARN, message + f"; prompt only {reached:,} tokens, below 2,000 ({why})",
                           figures)
    return CheckResult("soak", Severity.OK, message, figures)
