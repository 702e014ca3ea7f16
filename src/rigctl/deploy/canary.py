"""`rigctl canary`: keep proving a deployment right after `up` did once.

``install`` writes a systemd timer and a oneshot service beside the deployment (``render.canary_units``), in the
scope's systemd unit directory (system: /etc/systemd/system; user: $XDG_CONFIG_HOME/systemd/user), through
the same atomic writer as the quadlet files, and starts the timer. Each firing runs ``run_once``:

- the chosen verify checks against the recorded endpoint with the recipe's expectations, then (with
  ``--baseline FILE``, a `verify --export` file) the exported requests again, each answer compared with the
  exported one (check "baseline"), then one streamed request for TTFT and ITL, all inside one time bound
  (``timeout_s``): a request gets at most half of it, and a run that has no verdict when the bound is up is
  a failure ("hung"), never a hung canary;
- the result appended to the deployment's canary record (``deploy.history``: bounded, rotated);
- after ``after`` consecutive failures and with ``on_failure == "restart"``, the engine's service is
  restarted once, said in the journal (the run's output) and in the record. It never loops: a streak of
  failures costs at most one restart, and only a passing run starts a new streak. The restart is skipped
  when the engine's service is stopped (someone meant it) or another rigctl command holds its lock.

``remove`` (``--off``, and every `down`) stops and deletes both units and the canary's record. ``pause``
and ``resume`` hold it while `up` replaces the engine or `swap` stops it on purpose; ``move`` hands it to
the deployment a swap brought in: it follows the deployment that serves.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Protocol

from rigctl.deploy import history
from rigctl.deploy.install import install_files, remove_files
from rigctl.deploy.state import deployment_lock
from rigctl.errors import CommandError, LockHeldError, UsageError
from rigctl.invocation import current, program_refusal
from rigctl.places import SYSTEM_SYSTEMD_DIR, USER_SYSTEMD_SUBDIR, Scope
from rigctl.render.canary_units import CanaryUnits, render, service_name, timer_deployment, timer_name, unit_names
from rigctl.util.text import LINE_LIMIT, clip, printable

DEFAULT_CHECKS = ("health", "smoke", "repetition")
ALLOWED_CHECKS = ("health", "models", "smoke", "repetition", "determinism", "needle")  # the soak is too heavy
MIN_EVERY_S = 60
TEST_MIN_EVERY_S = 1  # below a minute only on the test bed (RIGCTL_TESTBED=1): see ``min_interval``
MAX_EVERY_S = history.EVERY_MAX_S
MAX_TIMEOUT_S = history.TIMEOUT_MAX_S  # a run's bound: far below systemd's TimeoutStartSec= and a thread's join
MAX_AFTER = history.AFTER_MAX
DEFAULT_TIMEOUT_S = 120
TTFT_PROBE = "The capital of France is"
TTFT_TOKENS = 16


def systemd_dir(scope: Scope) -> Path:
    """Where the scope's manager reads plain unit files an administrator wrote."""
    if scope is Scope.SYSTEM:
        return SYSTEM_SYSTEMD_DIR
    return current().config_home / USER_SYSTEMD_SUBDIR


def min_interval(env: dict[str, str]) -> int:
    """The shortest --every allowed: a minute, or 1 s on the test bed (``RIGCTL_TESTBED=1``, which the chain
    tests set), where a canary has to fail within a test's patience."""
    return TEST_MIN_EVERY_S if env.get("RIGCTL_TESTBED") == "1" else MIN_EVERY_S


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
# ASCII digits only (str.isdigit takes "²" and int() "٣"), few enough that no span is huge before it is checked
_SPAN = re.compile(r"([0-9]{1,9})([smhd]?)", re.ASCII)


def parse_span(value: str, *, option: str) -> int:
    """"10m", "90s", "2h", "1d" or plain seconds -> whole seconds; anything else is a usage error naming it."""
    found = _SPAN.fullmatch(value.strip().lower()) if value.isascii() else None
    if found is None:
        raise UsageError(f"{option} {clip(value)}: give a span such as 30s, 10m, 2h or 1d (ASCII digits, then s, m, "
                         "h or d)")
    return int(found.group(1)) * _UNITS.get(found.group(2), 1)


def check_settings(every_s: int, checks: Sequence[str], after: int, timeout_s: int, *, minimum: int,
                   said: Mapping[str, str] | None = None) -> None:
    """Refuse settings outside their bounds; ``said``: how the command line spelled --every and --timeout."""
    every_said = (said or {}).get("every", f"{every_s}s")
    timeout_said = (said or {}).get("timeout", f"{timeout_s}s")
    if not minimum <= every_s <= MAX_EVERY_S:
        raise UsageError(f"--every {every_said}: the interval is {minimum}s to {MAX_EVERY_S // 86400}d",
                         fix="e.g. --every 10m")
    unknown = [c for c in checks if c not in ALLOWED_CHECKS]
    if unknown or not checks:
        fix = ("the baseline comes with --baseline FILE (a `rigctl verify NAME --export FILE`)" if "baseline" in unknown
               else "the soak is a load test: run it with `rigctl verify --checks soak`, not every interval")
        raise UsageError(f"--checks: {', '.join(clip(c) for c in unknown) or 'none given'}: a canary runs "
                         f"{', '.join(ALLOWED_CHECKS)}", fix=fix)
    if not 1 <= after <= MAX_AFTER:
        raise UsageError(f"--after {after}: 1 to {MAX_AFTER} consecutive failures")
    if not 1 <= timeout_s <= MAX_TIMEOUT_S:
        raise UsageError(f"--timeout {timeout_said}: a run's bound is 1s to {MAX_TIMEOUT_S // 60}m")


class Units(Protocol):
    """What the canary asks of systemd (``adapters.systemd.SystemctlCli`` answers all of it)."""

    def daemon_reload(self) -> None: ...
    def enable_now(self, unit: str) -> None: ...
    def disable_now(self, unit: str) -> None: ...
    def restart(self, unit: str) -> None: ...
    def stop(self, unit: str, *, wait: bool, timeout: float) -> None: ...
    def reset_failed(self, unit: str) -> None: ...
    def is_active(self, unit: str) -> str: ...


@dataclass
class CanaryChange:
    deployment: str
    action: str  # installed | updated | unchanged | removed | absent
    timer: str
    service: str
    unit_dir: str
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    settings: dict[str, Any] | None = None
    message: str = ""


def install(
    deployment: str, *, engine_unit: str, every_s: int, checks: Sequence[str], on_failure: str, after: int,
    timeout_s: int, command: Sequence[str], unit_dir: Path, state_dir: Path, systemd: Units, now: float,
    baseline: dict[str, Any] | None = None, lock_dir: Path | None = None,
) -> CanaryChange:
    """Write (or rewrite) the canary's timer and service and its settings, and start the timer, holding the
    deployment's lock (``state.deployment_lock``; inside `swap`, the swap's)."""
    with deployment_lock(deployment, f"canary {deployment}", lock_dir):
        shown = [*checks, "baseline"] if baseline is not None else list(checks)
        files = render(CanaryUnits(deployment, engine_unit, every_s, timeout_s, tuple(shown), tuple(command)))
        state = history.canary_state(state_dir, deployment)
        config = history.CanaryConfig(every_s, list(checks), on_failure, after, timeout_s, now, baseline)
        before = state.config
        history.check_canary_fits(state_dir, deployment, dataclasses.replace(state, config=config))
        installed = install_files(unit_dir, files)
        same = before is not None and dataclasses.replace(before, installed_at=now) == config
        if same and before is not None:
            config.installed_at = before.installed_at  # the same canary again: it was installed then, not now
        state.config = config
        history.save_canary(state_dir, deployment, state)
        if installed.changed:
            systemd.daemon_reload()
        systemd.enable_now(timer_name(deployment))
        if installed.changed and before is not None:
            systemd.restart(timer_name(deployment))  # the new interval counts from now
        fresh = before is None and installed.changed
        action = "installed" if fresh else ("updated" if installed.changed or not same else "unchanged")
        return CanaryChange(deployment, action, timer_name(deployment), service_name(deployment), str(unit_dir),
                            written=[str(p) for p in installed.written], settings=config.shown(),
                            message=f"canary of {deployment}: every {every_s}s, {','.join(shown)}, "
                                    f"on failure {on_failure} after {after}")


def remove(deployment: str, *, unit_dir: Path, state_dir: Path, systemd: Units,
           lock_dir: Path | None = None) -> CanaryChange:
    """Stop and delete the timer and its service, and the canary's record, holding the deployment's lock
    (``state.deployment_lock``: inside `down` and `swap`, theirs). Idempotent."""
    with deployment_lock(deployment, f"canary {deployment} --off", lock_dir):
        timer, service = timer_name(deployment), service_name(deployment)
        present = [n for n in unit_names(deployment) if (unit_dir / n).exists() or (unit_dir / n).is_symlink()]
        if present:
            with contextlib.suppress(CommandError):  # a unit the manager never loaded: nothing to disable
                systemd.disable_now(timer)
            systemd.stop(service, wait=True, timeout=60)
        removed = [str(p) for p in remove_files(unit_dir, unit_names(deployment))]
        if removed:
            systemd.daemon_reload()
        if present:
            for unit in (timer, service):
                systemd.reset_failed(unit)
        removed += history.remove(state_dir, deployment, boots_too=False)
        action = "removed" if removed else "absent"
        return CanaryChange(deployment, action, timer, service, str(unit_dir), removed=removed,
                            message=f"canary of {deployment} removed" if removed else f"{deployment} has no canary")


# --- across a swap ----------------------------------------------------------------------------------


@dataclass
class Held:
    """A paused canary: whose it was, and the settings it ran with (None: its record was unreadable)."""

    deployment: str
    config: history.CanaryConfig | None
    timer: str


def pause(deployment: str, *, unit_dir: Path, state_dir: Path, systemd: Units) -> Held | None:
    """Stop ``deployment``'s canary, its units and record kept: the timer, then a run in progress (it must not
    judge, or try to restart, an engine a swap or `up` stops on purpose). None: it has none."""
    timer = timer_name(deployment)
    if not (unit_dir / timer).is_file():
        return None
    config = history.canary_state(state_dir, deployment).config
    systemd.stop(timer, wait=True, timeout=30)
    systemd.stop(service_name(deployment), wait=True, timeout=60)
    return Held(deployment, config, timer)


def resume(held: Held, *, systemd: Units) -> None:
    """Start a paused canary's timer again (a rollback: it watches the deployment it watched before); the
    first run comes one interval from now."""
    systemd.enable_now(held.timer)


def move(
    held: Held, target: str, *, engine_unit: str, command: Sequence[str], unit_dir: Path, state_dir: Path,
    systemd: Units, now: float,
) -> CanaryChange:
    """After a swap: the canary of ``held.deployment`` (removed, with its record) becomes ``target``'s, with
    the same interval, checks, failure policy and bound. Its runs stay behind: they judged another model, and
    so does its baseline (the answers of another model are no baseline for this one)."""
    remove(held.deployment, unit_dir=unit_dir, state_dir=state_dir, systemd=systemd)
    config = held.config
    if config is None:
        return CanaryChange(target, "absent", timer_name(target), service_name(target), str(unit_dir),
                            message=f"{held.deployment}'s canary had no readable settings: {target} has no canary "
                                    f"(`rigctl canary {target} --every 10m` installs one)")
    change = install(target, engine_unit=engine_unit, every_s=config.every_s, checks=config.checks,
                     on_failure=config.on_failure, after=config.after, timeout_s=config.timeout_s, command=command,
                     unit_dir=unit_dir, state_dir=state_dir, systemd=systemd, now=now)
    change.message = f"the canary of {held.deployment} now watches {target}: {change.message}"
    if config.baseline is not None:
        change.message += (f"; without {held.deployment}'s baseline (`rigctl verify {target} --export FILE`, then "
                           f"`--baseline FILE`)")
    return change


# --- one run ----------------------------------------------------------------------------------------


@dataclass
class CanaryVerdict:
    """What the checks said: passed, each check's status, the first that failed and why, the latencies."""

    ok: bool
    checks: list[dict[str, str]]
    failed_check: str | None = None
    reason: str | None = None
    ttft_ms: float | None = None
    itl_ms: float | None = None


@dataclass(kw_only=True)
class RunResult(CanaryVerdict):
    """One run: its verdict, when and how long, the streak it is part of, what the canary did about it."""

    deployment: str
    at: float
    duration_s: float
    consecutive_failures: int = 0
    action: str | None = None  # restarted | restart-skipped (why in ``action_detail``)
    action_detail: str | None = None
    journal: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, verdict: CanaryVerdict, *, deployment: str, at: float, duration_s: float) -> RunResult:
        return cls(**{f.name: getattr(verdict, f.name) for f in fields(CanaryVerdict)}, deployment=deployment,
                   at=at, duration_s=duration_s)

    def entry(self) -> dict[str, Any]:
        return {"at": round(self.at, 3), "ok": self.ok, "duration_s": round(self.duration_s, 3),
                "checks": self.checks, "failed_check": self.failed_check, "reason": self.reason,
                "ttft_ms": self.ttft_ms, "itl_ms": self.itl_ms, "action": self.action}


Prober = Callable[[float], CanaryVerdict]  # the checks, given the seconds a request may take


def bounded(probe: Prober, timeout_s: float) -> CanaryVerdict:
    """``probe`` in a daemon thread, waited for at most ``timeout_s``: a hung engine (health answering,
    completions never) gives a failing verdict in time instead of a canary that hangs too."""
    box: list[CanaryVerdict] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            box.append(probe(max(1.0, timeout_s / 2)))
        except Exception as exc:  # a bug in a check must still end as a verdict
            errors.append(exc)

    thread = threading.Thread(target=work, name="canary-run", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if box:
        return box[0]
    if errors:
        err = errors[0]
        return CanaryVerdict(False, [], "canary", f"the checks raised {type(err).__name__}: {err}")
    return CanaryVerdict(False, [], "timeout", f"no verdict within {timeout_s:g} s: the engine does not answer in time "
                                         "(hung? /health may still say 200)")


def verify_prober(recipe: Any, endpoint: Any, checks: Sequence[str], baseline: dict[str, Any] | None = None) -> Prober:
    """The real checks: verify's runner with the recipe's expectations, the baseline's requests (when there is
    one), then one streamed TTFT probe."""
    from rigctl.verify.export import Baseline  # noqa: PLC0415

    against = Baseline.from_dict(baseline) if baseline is not None else None

    def probe(request_timeout_s: float) -> CanaryVerdict:
        return asyncio.run(_probe(recipe, endpoint, tuple(checks), request_timeout_s, against))

    return probe


async def _probe(recipe: Any, endpoint: Any, checks: tuple[str, ...], request_timeout_s: float,
                 baseline: Any = None) -> CanaryVerdict:
    from rigctl.verify import subject as verify_target  # noqa: PLC0415 - the HTTP client loads for a run only
    from rigctl.verify.client import EngineRequestError, HttpEngine, Request  # noqa: PLC0415
    from rigctl.verify.runner import run_checks_async  # noqa: PLC0415

    endpoint, expect = verify_target.for_recipe(recipe, endpoint, verify_target.Overrides(timeout=request_timeout_s))
    async with HttpEngine(endpoint, max_connections=8) as engine:
        report = await run_checks_async(endpoint, expect, checks, engine=engine)
        results = [{"id": c.id, "status": c.status} for c in report.checks]
        failing = next((c for c in report.checks if c.severity.failing), None)
        if failing is not None:
            return CanaryVerdict(False, results, failing.id, history.clip_reason(failing.message))
        if baseline is not None:
            changed = await compare_baseline(engine, baseline, request_timeout_s)
            results.append({"id": "baseline", "status": "pass" if changed is None else "fail"})
            if changed is not None:
                return CanaryVerdict(False, results, "baseline", history.clip_reason(changed))
        try:
            done = await engine.complete(Request(TTFT_TOKENS, prompt=TTFT_PROBE, stream=True),
                                         timeout=request_timeout_s, idle_timeout=request_timeout_s)
        except EngineRequestError as err:
            return CanaryVerdict(False, results, "ttft",
                                 history.clip_reason(f"the streamed probe failed: {err.message}"))
        gaps = done.itl_s()
        return CanaryVerdict(True, results, ttft_ms=None if done.ttft_s is None else round(done.ttft_s * 1000, 2),
                             itl_ms=round(sum(gaps) / len(gaps) * 1000, 3) if gaps else None)


async def compare_baseline(engine: Any, baseline: Any, request_timeout_s: float) -> str | None:
    """Each exported request asked again (temperature 0); None when every answer is the exported one, else
    what changed (the first answer that did)."""
    from rigctl.verify.client import EngineRequestError, Request  # noqa: PLC0415
    from rigctl.verify.export import drift  # noqa: PLC0415

    for answer in baseline.answers:
        request = Request(answer.max_tokens, prompt=answer.prompt, messages=answer.messages)
        try:
            done = await engine.complete(request, timeout=request_timeout_s)
        except EngineRequestError as err:
            return f"{answer.source}: the baseline's request failed: {err.message}"
        changed = drift(answer, done.text)
        if changed is not None:
            digest = f", image {baseline.image_digest[:19]}" if baseline.image_digest else ""
            return (f"{changed.source}: the answer changed since `verify --export` ({baseline.date}{digest}) at "
                    f"character {changed.at}: was {changed.was[:60]!r}, now {changed.now[:60]!r}")
    return None


def run_once(
    deployment: str, *, engine_unit: str, scope: Scope, state_dir: Path, probe: Prober, systemd: Units,
    clock: Callable[[], float] = time.time, lock: Callable[[], Any] | None = None,
    fallback: history.CanaryConfig | None = None, cannot_run: tuple[str, str] | None = None,
) -> RunResult:
    """One canary run: the checks (bounded), the record, and at most one restart per failure streak, under
    the deployment's lock (``lock``: how to take it; by default ``service_lock``). ``cannot_run`` (the failed
    check's name, why): the run failed before its checks (its recipe cannot be loaded): recorded as a failed
    run with that reason, no check run and no restart (the engine is not what failed)."""
    state = history.canary_state(state_dir, deployment)
    config = state.config or fallback
    if state.unreadable is not None:
        config = history.CanaryConfig(1, ["canary"], "none", 1, 1)  # nothing is run: the record is the failure
    if config is None:
        raise UsageError(f"{deployment} has no canary", fix=f"`rigctl canary {deployment} --every 10m` installs one")
    start = clock()
    mono = time.monotonic()
    if state.unreadable is not None:
        # a record, or settings, that cannot be read (too large, damaged, a damaged baseline) are a failing
        # canary, never one that runs the defaults and so compares less than it was told to
        verdict = CanaryVerdict(False, [], "canary", history.clip_reason(
            f"the canary's record cannot be read ({state.unreadable}); `rigctl canary {deployment} --every SPAN "
            "...` writes its settings again"))
    elif cannot_run is not None:
        verdict = CanaryVerdict(False, [], cannot_run[0], history.clip_reason(cannot_run[1]))
    else:
        verdict = bounded(probe, config.timeout_s)
    result = RunResult.of(verdict, deployment=deployment, at=start, duration_s=time.monotonic() - mono)
    state.counts["runs"] += 1
    if verdict.ok:
        state.consecutive_failures = 0
        state.restarted_in_streak = False
        result.journal.append(f"canary {deployment}: pass ({','.join(config.checks)}"
                              + (f"; TTFT {verdict.ttft_ms:.0f} ms" if verdict.ttft_ms is not None else "") + ")")
    else:
        state.consecutive_failures += 1
        state.counts["failures"] += 1
        result.journal.append(f"canary {deployment}: FAIL {state.consecutive_failures} in a row: "
                              f"{verdict.failed_check}: {verdict.reason}")
        if config.on_failure == "restart" and state.consecutive_failures >= config.after and cannot_run is None:
            _maybe_restart(result, state, config, engine_unit=engine_unit, systemd=systemd,
                           lock=lock or service_lock(deployment), now=clock())
    result.consecutive_failures = state.consecutive_failures
    state.runs.append(result.entry())
    history.save_canary(state_dir, deployment, state)
    return result


def _maybe_restart(
    result: RunResult, state: history.CanaryState, config: history.CanaryConfig, *, engine_unit: str,
    systemd: Units, lock: Callable[[], Any], now: float,
) -> None:
    if state.restarted_in_streak:
        result.action, result.action_detail = "restart-skipped", "already restarted once in this failure streak"
        result.journal.append(f"canary {result.deployment}: not restarting {engine_unit} again: it was restarted "
                              "once in this streak of failures; a passing run starts a new one")
        return
    active = systemd.is_active(engine_unit)
    if active in ("inactive", "failed"):
        result.action, result.action_detail = "restart-skipped", f"{engine_unit} is {active}"
        result.journal.append(f"canary {result.deployment}: {engine_unit} is {active}: the canary does not start it")
        return
    try:
        with lock():
            systemd.restart(engine_unit)
    except LockHeldError:
        result.action, result.action_detail = "restart-skipped", "another rigctl command holds the service's lock"
        result.journal.append(f"canary {result.deployment}: another rigctl command is working on {engine_unit}; "
                              "not restarting it now")
        return
    state.restarted_in_streak = True
    state.counts["restarts"] += 1
    state.restarts.append({"at": round(now, 3), "unit": engine_unit, "after_failures": state.consecutive_failures,
                           "reason": result.reason})
    result.action = "restarted"
    result.action_detail = f"{engine_unit} restarted after {state.consecutive_failures} consecutive failures"
    result.journal.append(f"canary {result.deployment}: restarting {engine_unit} once after "
                          f"{state.consecutive_failures} consecutive failures (--on-failure restart); "
                          "it is not restarted again until a run passes")


def service_lock(deployment: str, lock_dir: Path | None = None) -> Callable[[], Any]:
    """The lock a canary's restart of the engine holds (``run_once`` takes it unless given another)."""
    return lambda: deployment_lock(deployment, f"canary {deployment} (restart)", lock_dir)


def command_for(deployment: str, scope: Scope, executable: str) -> list[str]:
    """The service's command: this interpreter running rigctl, so the timer runs the rigctl that set it up.

    As root, the unit runs that interpreter as root every interval, with whatever its directories hold (a
    virtual environment's .pth files run at start-up): it must be root's alone (``program_refusal``), or the
    canary is refused. No other interpreter is chosen instead: it might run another rigctl, or none."""
    why = program_refusal(executable)
    if why is not None:
        raise UsageError(
            f"the canary's unit would run {printable(executable, LINE_LIMIT)} as root at every interval, but {why}",
            fix="install rigctl where only root can write (a root-owned virtual environment, e.g. under /opt, or the "
                "system's Python) and run `rigctl canary` with that interpreter")
    return [executable, "-m", "rigctl", "canary", deployment, "--run-once", f"--{scope}"]


def installed(scopes: Sequence[Scope]) -> list[dict[str, Any]]:
    """The canary units on this host (`doctor` lists them): each timer rigctl wrote, its service, and whether
    a deployment record still goes with it (a canary without one checks nothing: `rigctl canary NAME --off`)."""
    from rigctl.deploy.state import record_path  # noqa: PLC0415 - only for this listing
    from rigctl.places import state_dir  # noqa: PLC0415

    out: list[dict[str, Any]] = []
    for scope in scopes:
        directory = systemd_dir(scope)
        try:
            names = sorted(p.name for p in directory.iterdir())
        except OSError:
            continue
        for name in names[:4096]:
            stem = timer_deployment(name)
            if stem is None:
                continue
            service = directory / service_name(stem)
            out.append({"deployment": stem, "scope": str(scope), "timer": str(directory / name),
                        "service": str(service) if service.exists() else None,
                        "deployed": record_path(state_dir(scope), stem).exists()})
    return out
