"""Waiting through warmup: the phase parsed from the engine's output, readiness, death and stall.

One loop polls systemd (cheap: one ``systemctl show``) and the endpoint every ``POLL_S`` seconds, so
readiness is noticed within about 0.1-0.2 s and a dead container within the same, far inside the 0.3 s
and 1 s promises. A background thread follows the container's output (``Podman.follow``): quadlet
runs containers with ``--rm``, so once the engine is gone its output is gone too, unless it was opened
while it lived (``adapters.logfile``).
"""

from __future__ import annotations

import os
import re
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from rigctl.adapters.clock import Clock
from rigctl.adapters.podman import ContainerInfo, Podman
from rigctl.adapters.probe import Probe, Readiness
from rigctl.adapters.systemd import Systemd, UnitState
from rigctl.deploy import engine_cache
from rigctl.deploy.history import BootBudget
from rigctl.deploy.receipt import Receipt, ReceiptReader
from rigctl.host.procfs import cpu_ticks, process_tree
from rigctl.recipe.defaults import HEALTH_PATH
from rigctl.util.publish import MODELS_PATH

POLL_S = 0.1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100  # /proc/PID/stat's CPU time unit
# With Notify=healthy (podman >= 5.0) the unit turns active only after one of podman's own health checks
# passes, and its timer runs them 0.5-1.5 s apart (render.units.HEALTH_STARTUP_INTERVAL). Once the engine
# answers, the wait asks podman to run that check now (`podman healthcheck run`): active 0.3 s after the first
# 200 instead of 1.0-1.3 s (podman 5.4.2 testbed). Again after CHECK_AGAIN_S if the unit is still activating.
CHECK_AGAIN_S = 1.0
TAIL_LINES = 40
DRAIN_S = 2.0  # the longest a death report waits for the dead engine's last lines


class Phase(StrEnum):
    STARTING = "starting"
    PULLING = "pulling image"
    LOADING = "loading weights"
    COMPILING = "compiling"
    PROFILING = "profiling memory"
    GRAPHS = "graph capture"
    WARMUP = "warmup"
    SERVING = "starting server"
    READY = "ready"


# Checked in order on each output line; the first match wins. Progress "x/N" is taken from the line.
_PHASE_PATTERNS: list[tuple[Phase, re.Pattern[str]]] = [
    (Phase.PULLING, re.compile(r"Trying to pull|Copying (blob|config)|Pulling (fs layer|image)", re.I)),
    (Phase.LOADING, re.compile(r"Loading (safetensors )?checkpoint shards|Loading (model|weights)|"
                               r"load_model|Model loading took", re.I)),
    # torch.compile, kernel autotuning and a compile cache's hit: the part a warm engine cache shortens
    (Phase.COMPILING, re.compile(r"torch\.compile|Compiling a graph|compiled graph|autotun", re.I)),
    (Phase.PROFILING, re.compile(r"Memory profiling|profil(e|ing) run|KV cache", re.I)),
    (Phase.GRAPHS, re.compile(r"Capturing (CUDA )?graph|graph captur|cudagraph", re.I)),
    (Phase.WARMUP, re.compile(r"warm(ing)?[ -]?up", re.I)),
    (Phase.SERVING, re.compile(r"Starting vLLM API server|Uvicorn running|Application startup complete|"
                               r"Started server process", re.I)),
]


def own_probes(health_path: str) -> re.Pattern[str]:
    """Access-log lines caused by rigctl's own readiness polling (the recipe's health path and /v1/models):
    they are neither progress (they would hide a stall) nor worth showing as the engine's last words."""
    paths = "|".join(re.escape(p) for p in dict.fromkeys((health_path, MODELS_PATH)))
    return re.compile(rf'"(GET|HEAD) ({paths})[ ?"/]|GET ({paths}) HTTP')


_PROGRESS = re.compile(r"(?<![\d.])(\d{1,6})\s*/\s*(\d{1,6})(?![\d.])")


@dataclass(frozen=True)
class PhaseState:
    phase: Phase
    progress: tuple[int, int] | None = None  # (done, total), e.g. shards 3/8

    def label(self) -> str:
        if self.progress is None:
            return str(self.phase)
        return f"{self.phase} {self.progress[0]}/{self.progress[1]}"


def parse_phase(line: str, current: PhaseState) -> PhaseState:
    for phase, pattern in _PHASE_PATTERNS:
        if pattern.search(line):
            match = _PROGRESS.search(line)
            progress = None
            if match and int(match.group(2)) > 0 and int(match.group(1)) <= int(match.group(2)):
                progress = (int(match.group(1)), int(match.group(2)))
            return PhaseState(phase, progress)
    return current


class OutputFollower:
    """Follows the container named ``name`` from a background thread, from the moment it exists (and
    again after each restart), skipping a container id given as ``skip_id`` (the one being replaced)."""

    def __init__(self, podman: Podman, name: str, clock: Clock, *, skip_id: str | None = None,
                 health_path: str = HEALTH_PATH) -> None:
        self._podman = podman
        self._own_probes = own_probes(health_path)
        self._name = name
        self._clock = clock
        self._skip_id = skip_id
        self._lock = threading.Lock()
        self._lines: deque[str] = deque(maxlen=400)
        self._stop = threading.Event()
        self._stream: object | None = None
        self.phase = PhaseState(Phase.STARTING)
        self.last_output_mono = clock.monotonic()
        self.line_count = 0
        self.attached_ids: list[str] = []
        self._streams_ended = 0
        self.log_path = ""  # the followed container's k8s-file log
        # (phase, when it began): each change of phase as the output shows it, for the boot history
        self.phase_log: list[tuple[str, float]] = [(str(Phase.STARTING), self.last_output_mono)]
        # The host PID of the container's first process. systemd learns of a death only once conmon has
        # run `podman container cleanup` (0.3-1 s here); the PID itself is gone at once.
        self.pid: int | None = None
        self.info: ContainerInfo | None = None  # the followed container as podman described it on attach
        self._receipt = ReceiptReader()  # the memory lines of the container followed now
        self._thread = threading.Thread(target=self._run, name=f"follow-{name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            info = self._podman.container(self._name)
            if info is None or info.id == self._skip_id or info.id in self.attached_ids:
                self._stop.wait(0.2)  # each look is a podman process: keep the CPU for the engine
                continue
            self.attached_ids.append(info.id)
            self.info = info
            with self._lock:
                self._receipt = ReceiptReader()  # a restarted engine prints its start-up again
            self.pid = info.pid or None
            if info.log_driver == "k8s-file" and info.log_path:
                self.log_path = info.log_path
            stream = self._podman.follow(info.id, known=info)
            self._stream = stream
            try:
                for line in stream:
                    self._add(line)
                    if self._stop.is_set():
                        break
            finally:
                stream.close()
                with self._lock:
                    self._streams_ended += 1

    def _add(self, line: str) -> None:
        if self._own_probes.search(line):
            return
        with self._lock:
            self._lines.append(line)
            self._receipt.feed(line)
            self.line_count += 1
            self.last_output_mono = self._clock.monotonic()
            before = self.phase.phase
            self.phase = parse_phase(line, self.phase)
            if self.phase.phase is not before:
                self.phase_log.append((str(self.phase.phase), self.last_output_mono))

    def phase_since(self) -> float:
        """When the current phase began (monotonic)."""
        with self._lock:
            return self.phase_log[-1][1]

    def phase_durations(self, start_mono: float, end_mono: float) -> list[tuple[str, float]]:
        """(phase, seconds spent in it) from ``start_mono`` to ``end_mono``, in order; the time before the
        first line counts as starting."""
        with self._lock:
            log = list(self.phase_log)
        out: list[tuple[str, float]] = []
        for i, (phase, began) in enumerate(log):
            begin = max(began, start_mono)
            end = log[i + 1][1] if i + 1 < len(log) else end_mono
            if end > begin or i == len(log) - 1:
                out.append((phase, max(0.0, min(end, end_mono) - begin)))
        return out

    def drained(self) -> bool:
        """Whether every container followed so far has had its output read to the end."""
        with self._lock:
            return bool(self.attached_ids) and self._streams_ended >= len(self.attached_ids)

    def receipt(self) -> Receipt:
        with self._lock:
            return self._receipt.receipt()

    def tail(self, n: int = TAIL_LINES) -> list[str]:
        with self._lock:
            return list(self._lines)[-n:]

    def lines(self) -> list[str]:
        with self._lock:
            return list(self._lines)

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        close = getattr(stream, "close", None)
        if callable(close):
            close()
        self._thread.join(timeout=3)


class WaitStatus(StrEnum):
    READY = "ready"
    DIED = "died"
    STALLED = "stalled"
    TIMEOUT = "timeout"
    STOPPED = "stopped"  # someone stopped the unit (systemctl stop) while we waited


@dataclass
class WarmupProgress:
    """One frame of the live display."""

    phase: str
    elapsed_s: float
    budget_s: int
    since_output_s: float
    stall_budget_s: int
    unit_active: str
    unit_sub: str
    restarts: int
    last_line: str


@dataclass
class WaitResult:
    status: WaitStatus
    elapsed_s: float
    phase: str
    unit: UnitState | None
    readiness: Readiness | None
    exit_status: int | None = None
    detail: str = ""
    noticed_mono: float = 0.0  # when the loop noticed the outcome (benchmarks measure against it)
    tail: list[str] = field(default_factory=list)
    engine_log: str = ""  # where podman wrote the engine's output (its k8s-file log), as the container said
    receipt: Receipt | None = None  # what the engine's start-up lines said of its memory (the last container's)


@dataclass(frozen=True)
class Warming:
    """The service whose warmup is waited for: its unit and container, where it answers, its budgets, and
    the restarts and time it started from."""

    unit: str
    container: str
    base_url: str
    health_path: str
    served_name: str
    warmup_budget_s: int
    stall_budget_s: int
    baseline_restarts: int
    start_mono: float
    budget: BootBudget | None = None  # learnt from earlier ready boots of this recipe and image
    cache_dir: Path | None = None  # the engine cache the unit mounts: its growth is progress too


# A warming engine can be busy and silent for minutes (torch.compile, FlashInfer's autotune: vllm#58031 prints
# nothing for 40 min). Silence is a stall only when the engine's processes spend no CPU time and its cache does
# not grow either: looked at every WORK_LOOK_S, CPU counted from WORK_CPU_SHARE of a core (an idle server's
# timer wake-ups stay far below it).
WORK_LOOK_S = 2.0
WORK_CPU_SHARE = 0.1
CACHE_LOOK_S = 10.0  # the cache walk is bounded but not free: less often


class WorkWatch:
    """When the engine last showed work other than output: CPU time of its process tree, or cache growth."""

    def __init__(self, follower: OutputFollower, cache_dir: Path | None, clock: Clock) -> None:
        self._follower, self._cache_dir, self._clock = follower, cache_dir, clock
        self._ticks: int | None = None
        self._cache: int | None = None
        self._looked = self._cache_looked = float("-inf")
        self.last_work = float("-inf")
        self.what = ""  # what the last work was: "CPU time" or "cache growth"

    def look(self, now: float) -> float:
        if now - self._looked >= WORK_LOOK_S:
            self._looked = now
            pid = self._follower.pid
            if pid is not None:
                ticks = cpu_ticks(process_tree(pid))
                if self._ticks is not None and ticks - self._ticks >= WORK_CPU_SHARE * WORK_LOOK_S * CLOCK_TICKS:
                    self.last_work, self.what = now, "CPU time"
                self._ticks = ticks
        if self._cache_dir is not None and now - self._cache_looked >= CACHE_LOOK_S:
            self._cache_looked = now
            found = engine_cache.size(self._cache_dir)
            held = found.bytes if found is not None else 0
            if self._cache is not None and held > self._cache:
                self.last_work, self.what = now, "cache growth"
            self._cache = held
        return self.last_work


def pid_alive(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}")


def wait_ready(
    warming: Warming,
    *,
    systemd: Systemd,
    probe: Probe,
    follower: OutputFollower,
    clock: Clock,
    on_progress: Callable[[WarmupProgress], None] | None = None,
    alive: Callable[[int], bool] = pid_alive,
    check_now: Callable[[], object] | None = None,
    on_answer: Callable[[], None] | None = None,
) -> WaitResult:
    """``check_now``: runs the container's health check at once (podman's, so its verdict is podman's); called
    when the engine answers while systemd still waits for the healthy signal. ``on_answer``: called each time
    the engine answers ready (`up` starts its smoke checks on the first, alongside systemd's wait)."""
    seen_started = False  # the unit left "inactive" at least once since our start job
    last: UnitState | None = None
    readiness: Readiness | None = None
    # NRestarts counts automatic restarts since the last manual start; a manual start resets it, so only
    # an increase between two looks means systemd brought a dead engine back.
    prev_restarts = warming.baseline_restarts
    checked_at: float | None = None
    work = WorkWatch(follower, warming.cache_dir, clock)
    while True:
        now = clock.monotonic()
        elapsed = now - warming.start_mono
        last = systemd.show(warming.unit)
        if last.active in {"active", "activating", "reloading", "deactivating"} and not last.restart_pending:
            seen_started = True
        died = (
            (seen_started and last.restarts > prev_restarts)
            or last.restart_pending
            or last.active == "failed"
            or (seen_started and last.active == "inactive")
        )
        noticed = clock.monotonic()
        pid = follower.pid
        if not died and pid is not None and not alive(pid):
            # The engine's process is gone; systemd will say so once podman's cleanup has run.
            died = True
            last = _settled(systemd, warming.unit, clock, last)
        if died:
            return _ended(warming, last, readiness, follower=follower, clock=clock, elapsed=elapsed,
                          noticed=noticed)
        prev_restarts = last.restarts
        if not seen_started and last.active == "inactive" and elapsed > 10 and last.result not in ("", "success"):
            return _ended(warming, last, readiness, follower=follower, clock=clock, elapsed=elapsed,
                          noticed=noticed)
        # The engine answering is ready only once systemd agrees: a unit with podman 5's Notify=healthy stays
        # "activating" until podman's health check passes, and one whose checks never run is killed at
        # TimeoutStartSec. (Units without it are active from the container's start, long before this.)
        awaiting_systemd = False
        if last.active in {"active", "activating"}:
            readiness = probe.check(warming.base_url, warming.health_path, warming.served_name)
            if readiness.ready_for(warming.served_name):
                if on_answer is not None:
                    on_answer()
                if last.active == "active":
                    return WaitResult(WaitStatus.READY, elapsed, str(Phase.READY), last, readiness,
                                      noticed_mono=clock.monotonic(), tail=follower.tail())
                awaiting_systemd = True
                if check_now is not None and (checked_at is None or now - checked_at >= CHECK_AGAIN_S):
                    checked_at = now
                    check_now()
                    continue  # look at systemd again at once: the check may have made the unit active
        # the follower may have stamped a line after ``now`` was read: that output is 0 s old, not -0.01 s
        since_output = max(0.0, now - max(follower.last_output_mono, work.look(now), warming.start_mono))
        silent_limit: float = warming.stall_budget_s
        if warming.budget is not None and not awaiting_systemd:  # judged against history
            phase = str(follower.phase.phase)
            allowed = warming.budget.allowance(phase, warming.stall_budget_s)
            in_phase = max(0.0, now - max(follower.phase_since(), warming.start_mono))
            if allowed is not None and in_phase > allowed:
                return WaitResult(WaitStatus.STALLED, elapsed, follower.phase.label(), last, readiness,
                                  detail=warming.budget.stall_detail(phase, in_phase, allowed),
                                  noticed_mono=clock.monotonic(), tail=follower.tail())
            silent_limit = allowed if allowed is not None else silent_limit
        if since_output > silent_limit and not awaiting_systemd:
            return WaitResult(WaitStatus.STALLED, elapsed, follower.phase.label(), last, readiness,
                              detail=f"no output, CPU time or cache growth for {since_output:.0f} s (stall budget "
                                     f"{silent_limit:.0f} s"
                                     + (", learnt from earlier boots)" if silent_limit != warming.stall_budget_s
                                        else ")"),
                              noticed_mono=clock.monotonic(), tail=follower.tail())
        if elapsed > warming.warmup_budget_s:
            detail = f"not ready after the warmup budget of {warming.warmup_budget_s} s"
            if awaiting_systemd:
                detail += (": the engine answers, but systemd still waits for podman's healthy signal "
                           "(Notify=healthy): its health checks did not pass, or did not run")
            return WaitResult(WaitStatus.TIMEOUT, elapsed, follower.phase.label(), last, readiness,
                              detail=detail,
                              noticed_mono=clock.monotonic(), tail=follower.tail())
        if on_progress is not None:
            tail = follower.tail(1)
            on_progress(WarmupProgress(
                phase=follower.phase.label(), elapsed_s=elapsed, budget_s=warming.warmup_budget_s,
                since_output_s=since_output, stall_budget_s=warming.stall_budget_s, unit_active=last.active,
                unit_sub=last.sub, restarts=last.restarts, last_line=tail[0] if tail else "",
            ))
        clock.sleep(POLL_S)


def death_detail(code: int | None) -> str:
    text = f"the engine exited{'' if code is None else f' with status {code}'} during warmup"
    if code == 0:
        text += " (exit 0 is still a crash: vLLM's API server exits 0 when its EngineCore dies)"
    return text


def _settled(systemd: Systemd, unit: str, clock: Clock, last: UnitState) -> UnitState:
    """The unit's state once systemd has seen the main process exit, waiting at most 0.4 s for it."""
    deadline = clock.monotonic() + 0.3
    state = last
    while clock.monotonic() < deadline:
        state = systemd.show(unit)
        if state.exit_status is not None or state.restart_pending or state.sub in ("failed", "dead"):
            break
        clock.sleep(0.05)
    return state


def _ended(
    warming: Warming, unit: UnitState, readiness: Readiness | None, *, follower: OutputFollower, clock: Clock,
    elapsed: float, noticed: float,
) -> WaitResult:
    # The follower may still be reading the dead container's last lines: wait until its stream has
    # ended (the writer gone, the log read to its end), for at most DRAIN_S; when it never attached,
    # only until its output has been quiet for a moment.
    deadline = noticed + DRAIN_S
    count = follower.line_count
    while clock.monotonic() < deadline and not follower.drained():
        clock.sleep(0.05)
        if (not follower.attached_ids and follower.line_count == count
                and clock.monotonic() - follower.last_output_mono > 0.15 and clock.monotonic() > noticed + 0.4):
            break
        count = follower.line_count
    stopped = unit.active == "inactive" and unit.result == "success" and not unit.restart_pending
    status = WaitStatus.STOPPED if stopped else WaitStatus.DIED
    code = unit.exit_status
    detail = "the unit was stopped while warming up" if stopped else death_detail(code)
    return WaitResult(status, elapsed, follower.phase.label(), unit, readiness, exit_status=code, detail=detail,
                      noticed_mono=noticed, tail=follower.tail())
