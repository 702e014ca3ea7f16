"""`rigctl swap FROM TO`: replace one served model by another on this host, and roll back on any failure.

The sequence is a small state machine over four deploy operations (preflight, stop, up, restore) that
come in through the ``SwapDeploy`` Protocol, so every failure point can be exercised without a GPU:

    preflight TO (the memory FROM's processes hold and its port counted as free) -> stop FROM
    -> wait for NVML to show FROM's GPU memory released
    -> up TO (warmup + health, models, smoke, repetition) -> remove FROM's unit        = swapped (0)
    any failure after FROM stopped -> stop and remove TO -> wait for TO's GPU memory
    -> restore FROM (its installed unit, unchanged) and verify it                       = rolled-back (4)
    the restore fails too                                                               = rollback-failed (70)
    TO's preflight fails: nothing is stopped                                            = refused (1)

TO's preflight (gpu-fit above all) is judged against the memory FROM frees: what NVML shows free now plus
what FROM's processes (its container's process tree) hold, with every other process's memory still held;
FROM's processes are measured once more just before it stops. After the stop the swap waits, bounded by
``release_timeout_s``, until NVML no longer lists any of those processes and the free memory has come back
by what they held, with a line of progress every few seconds; when the bound passes, the step fails naming
every process still holding memory on those GPUs (pid, name, GiB) and the swap rolls back.

FROM's canary (`rigctl canary`), if it has one, follows the deployment that serves: it is paused before
FROM stops (its runs would judge, and might restart, an engine stopped on purpose), moved to TO with the
same settings once TO is proven (FROM's canary units and record removed), and started again on FROM after
a rollback, whether or not the restore worked (a failing canary is the truth then).

Both services' locks are held for the whole swap (``state.deployment_lock``: the lock ``up()`` and
``down()`` take, which inside the swap go on under the swap's), so no other rigctl command can touch either
service half-way through.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from rigctl.adapters import Adapters
from rigctl.adapters.clock import Clock
from rigctl.adapters.gpu_memory import GpuMemory
from rigctl.deploy import canary as canaries
from rigctl.deploy import state as records
from rigctl.deploy.down import DownResult, down
from rigctl.deploy.install import installed_texts
from rigctl.deploy.lookup import FoundDeployment
from rigctl.deploy.state import deployment_lock
from rigctl.deploy.up import UpOptions, UpResult, install_and_start, plan_here, up
from rigctl.deploy.warmup import WarmupProgress
from rigctl.errors import DeployError, RigctlError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.host.facts import GIB, MIB, Gpu, HostFacts
from rigctl.host.gather import facts_for_recipe, refresh_facts
from rigctl.host.procfs import process_tree
from rigctl.host.quadlet import find_quadlet
from rigctl.places import Dirs, Scope, container_service
from rigctl.plan.plan import Plan, make_plan
from rigctl.recipe.model import Recipe
from rigctl.render.canary_units import timer_name
from rigctl.util.jsonable import jsonable

RELEASE_POLL_S = 0.5
RELEASE_PROGRESS_S = 5.0  # a progress line at the first look that finds memory held, then this often
RELEASE_SLACK = 256 * MIB  # free memory this close to what FROM's processes held counts as back


@dataclass(frozen=True)
class Side:
    """One end of a swap: the recipe, where it came from, and (for FROM) what its deployment holds."""

    recipe: Recipe
    source: str
    gpu_ids: tuple[str, ...] = ()
    port: int | None = None

    @property
    def name(self) -> str:
        return self.recipe.name


class SwapDeploy(Protocol):
    """The deploy operations a swap sequences; the real one drives systemd/podman through rigctl.deploy."""

    def preflight(self, side: Side, *, freed_gpus: Sequence[str], freed_port: int | None,
                  freed_pids: Collection[int] | None = None) -> Plan:
        """Plan ``side`` as if ``freed_port`` and the GPU memory of ``freed_pids`` (FROM's processes) were
        already released; ``freed_pids`` None (not known): all of ``freed_gpus`` counted free."""
        ...

    def holders(self, side: Side) -> set[int] | None:
        """The processes of ``side``'s running container (its process tree: the engine's workers hold the
        GPU memory); None when it is not running or cannot be asked."""
        ...

    def stop(self, side: Side, *, remove: bool) -> DownResult: ...

    def up(self, side: Side) -> UpResult:
        """Deploy and verify (at least smoke and repetition); a unit that died in warmup is stopped."""
        ...

    def restore(self, side: Side) -> UpResult:
        """Start ``side``'s installed unit again, unchanged, wait for it and verify it."""
        ...

    def pause_canary(self, side: Side) -> canaries.Held | None:
        """Stop ``side``'s canary (units and record kept); None when it has none."""
        ...

    def resume_canary(self, held: canaries.Held) -> None: ...

    def move_canary(self, held: canaries.Held, target: Side) -> canaries.CanaryChange:
        """Give ``target`` the held canary's settings; remove the held one's units and record."""
        ...


@dataclass
class SwapStep:
    name: str
    ok: bool
    message: str
    detail: dict[str, Any] = field(default_factory=dict)  # typed values (findings, ...); made JSON by to_dict


@dataclass
class SwapResult:
    from_recipe: str
    to_recipe: str
    outcome: str = ""  # swapped | rolled-back | rollback-failed | refused
    exit_code: ExitCode = ExitCode.INTERNAL
    message: str = ""
    steps: list[SwapStep] = field(default_factory=list)
    todo: list[str] = field(default_factory=list)  # what the operator must do now (rollback-failed)
    # how the swap went: "cold" (FROM stopped before TO started: one model at a time), with the seconds the
    # endpoint had no verified model behind it (FROM's stop to TO's, or the restored FROM's, verified ready);
    # None where nothing was stopped
    mode: str = "cold"
    downtime_s: float | None = None

    @property
    def ok(self) -> bool:
        return self.outcome == "swapped"

    def add(self, name: str, ok: bool, message: str, /, **detail: Any) -> SwapStep:
        step = SwapStep(name, ok, message, detail)
        self.steps.append(step)
        return step

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: "from"/"to" and "step" are the JSON's names
        steps = [{"step": s.name, "ok": s.ok, "message": s.message, "detail": jsonable(s.detail)} for s in self.steps]
        return {"from": self.from_recipe, "to": self.to_recipe, "outcome": self.outcome, "message": self.message,
                "steps": steps, "todo": self.todo, "mode": self.mode, "downtime_s": self.downtime_s}


@dataclass(frozen=True)
class SwapOptions:
    release_timeout_s: float = 120.0  # how long freed GPU memory may take to show as released


@dataclass(frozen=True)
class Release:
    """What a stopped side is to give back on one GPU, measured just before the stop."""

    gpu: Gpu  # as NVML showed it then
    held_bytes: int | None  # by the side's processes (None: NVML did not say how much)
    expect_free: int | None  # free bytes once they are gone (None: not known)


def releases(devices: Sequence[Gpu], pids: Collection[int] | None) -> list[Release]:
    """Per GPU, what ``pids`` hold and the free memory to expect once they are gone. ``pids`` None (the
    side's processes are not known): every process on these GPUs is taken as the side's."""
    out = []
    for g in devices:
        mine = [p for p in g.processes if pids is None or p.pid in pids]
        if any(p.used_memory_bytes is None for p in mine):
            out.append(Release(g, None, None))
            continue
        held = sum(p.used_memory_bytes or 0 for p in mine)
        free = None if g.memory_free_bytes is None else g.memory_free_bytes + held
        if free is not None and g.memory_total_bytes is not None:
            free = min(free, g.memory_total_bytes)
        out.append(Release(g, held, free))
    return out


def _gib(n: int) -> str:
    return f"{n / GIB:.1f} GiB"


def _holder_list(g: Gpu, pids: Collection[int] | None = None) -> str:
    procs = [p for p in g.processes if pids is None or p.pid in pids]
    return ", ".join(f"PID {p.pid} ({p.name or 'name not visible'}"
                     + (f", {_gib(p.used_memory_bytes)})" if p.used_memory_bytes is not None else ")") for p in procs)


def swap(
    source: Side,
    target: Side,
    *,
    deploy: SwapDeploy,
    gpu: GpuMemory,
    clock: Clock,
    options: SwapOptions | None = None,
    lock_dir: Path | None = None,
    on_step: Callable[[SwapStep], None] | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> SwapResult:
    """``on_step``: each step as it ends; ``on_wait``: a line of progress while GPU memory is awaited."""
    if source.name == target.name:
        raise UsageError(f"FROM and TO are the same recipe ({source.name})",
                         fix="to redeploy one recipe use `rigctl up`; swap replaces one recipe by another")
    opts = options or SwapOptions()
    result = SwapResult(source.name, target.name)
    note = on_step or (lambda _step: None)
    # Sorted so that two opposite swaps contend on the same first lock instead of holding one each.
    first, second = sorted([source.name, target.name])
    command = f"swap {source.name} {target.name}"
    with deployment_lock(first, command, lock_dir), deployment_lock(second, command, lock_dir):
        _Machine(source, target, deploy, gpu, clock, opts, result, note, on_wait or (lambda _line: None)).run()
    return result


@dataclass
class _Machine:
    source: Side
    target: Side
    deploy: SwapDeploy
    gpu: GpuMemory
    clock: Clock
    opts: SwapOptions
    result: SwapResult
    note: Callable[[SwapStep], None]
    say: Callable[[str], None]
    to_gpu_ids: tuple[str, ...] = ()  # the GPUs TO's up was given
    held: canaries.Held | None = None
    down_since: float | None = None  # when FROM was told to stop: the endpoint's downtime starts there

    def step(self, name: str, ok: bool, message: str, /, **detail: Any) -> bool:
        self.note(self.result.add(name, ok, message, **detail))
        return ok

    def run(self) -> None:
        if not self._preflight():
            self._finish("refused", ExitCode.CHECKS_FAILED,
                         f"preflight of {self.target.name} failed: nothing was stopped, "
                         f"{self.source.name} keeps serving")
            return
        self._pause_canary()
        if self._stop_source() and self._up_target():
            self._served_again()
            self._remove_source()
            self._move_canary()
            self._finish("swapped", ExitCode.OK, f"{self.target.name} is serving in place of {self.source.name}"
                         + (f" after {self.result.downtime_s:.1f} s without a model (a cold swap: one model at "
                            "a time)" if self.result.downtime_s is not None else ""))
            return
        self._rollback()

    def _served_again(self) -> None:
        if self.down_since is not None and self.result.downtime_s is None:
            self.result.downtime_s = round(self.clock.monotonic() - self.down_since, 2)

    def _finish(self, outcome: str, code: ExitCode, message: str) -> None:
        self.result.outcome, self.result.exit_code, self.result.message = outcome, code, message

    # --- forward -----------------------------------------------------------------------------------

    def _preflight(self) -> bool:
        pids = self._holders(self.source)
        try:
            pre = self.deploy.preflight(self.target, freed_gpus=self.source.gpu_ids, freed_port=self.source.port,
                                        freed_pids=pids)
        except RigctlError as err:
            return self.step("preflight-to", False, f"preflight of {self.target.name} could not run: {err.message}")
        findings = list(pre.report.findings)
        freed = ""
        if self.source.gpu_ids:
            what = "the memory its processes hold on" if pids is not None else "all of"
            freed = f" (counting {what} {self.source.name}'s GPUs {','.join(self.source.gpu_ids)} as free)"
        if pre.ok:
            return self.step("preflight-to", True, f"preflight of {self.target.name} passed{freed}",
                             gpu_ids=list(pre.gpu_ids), findings=findings)
        failing = [f for f in pre.report.findings if f.fails]
        problem = pre.install_problem()
        names = (", ".join(f"{f.id}: {f.message}" for f in failing)
                 or (problem.message if problem is not None else "failed"))
        return self.step("preflight-to", False, f"preflight of {self.target.name} failed{freed}: {names}",
                         findings=findings)

    def _stop_source(self) -> bool:
        pids = self._holders(self.source)
        before = self._devices(self.source.gpu_ids)
        self.down_since = self.clock.monotonic()
        try:
            done = self.deploy.stop(self.source, remove=False)
        except RigctlError as err:
            return self.step("stop-from", False, f"stopping {self.source.name} failed: {err.message}")
        if not done.stopped:
            return self.step("stop-from", False, f"{done.unit} did not stop (state {done.was_active})",
                             **asdict(done))
        self.step("stop-from", True, f"{done.unit} stopped (unit kept for a rollback)", **asdict(done))
        return self._wait_released(self.source, self.source.gpu_ids, "gpu-release", pids, before)

    def _holders(self, side: Side) -> set[int] | None:
        try:
            return self.deploy.holders(side)
        except RigctlError:
            return None

    def _devices(self, ids: Sequence[str]) -> list[Gpu] | str:
        """The GPUs as NVML shows them now, or why not."""
        try:
            got = self.gpu.devices(list(ids))
        except Exception as exc:  # NVML can fail mid-way; that is "unknown", not a crash of the swap
            return f"{type(exc).__name__}: {exc}"
        return "no NVML on this host" if got is None else got

    def _wait_released(self, side: Side, gpu_ids: Sequence[str], name: str, pids: set[int] | None,
                       before: list[Gpu] | str) -> bool:
        """Until NVML lists none of ``pids`` (every process, when they are not known) on ``gpu_ids`` and each
        GPU's free memory is back by what they held (``before``), bounded by ``release_timeout_s``."""
        ids = list(gpu_ids)
        if not ids:
            return self.step(name, True, f"{side.name} holds no GPUs: nothing to release", released=None)
        shown = ",".join(ids)
        owed = {r.gpu.index: r for r in releases(before, pids)} if not isinstance(before, str) else {}
        start = self.clock.monotonic()
        said: float | None = None
        while True:
            now = self._devices(ids)
            waited = round(self.clock.monotonic() - start, 1)
            if isinstance(now, str):
                return self.step(name, True, f"GPUs {shown}: release not verifiable ({now}); treated as released",
                                 released=None, waited_s=waited)
            held = [(g, self._still_held(g, pids, owed.get(g.index))) for g in now]
            held = [(g, why) for g, why in held if why]
            if not held:
                freed = sum(r.held_bytes or 0 for r in owed.values())
                what = f"{_gib(freed)} " if freed else ""
                return self.step(name, True, f"GPUs {shown}: {side.name}'s {what}memory released after {waited}s",
                                 released=True, waited_s=waited)
            if waited >= self.opts.release_timeout_s:
                rows = "; ".join(f"GPU {g.index}: {why}; held by " + (_holder_list(g) or "no process NVML lists")
                                 for g, why in held)
                pids_left = sorted({p.pid for g, _ in held for p in g.processes})
                fix = (f"stop the holders (`kill {' '.join(map(str, pids_left))}`, or the unit that owns them) or "
                       "wait longer (--release-timeout)" if pids_left else
                       "`nvidia-smi` on the host shows who holds it (another PID namespace?); or --release-timeout")
                return self.step(name, False, f"GPU memory still held {waited}s after {side.name} stopped: {rows}; "
                                 f"{fix}", released=False, waited_s=waited, holders=[
                                     {"gpu": g.index, "uuid": g.uuid, "pid": p.pid, "name": p.name,
                                      "used_bytes": p.used_memory_bytes} for g, _ in held for p in g.processes])
            if said is None or waited - said >= RELEASE_PROGRESS_S:
                said = waited
                rows = "; ".join(f"GPU {g.index} {why}" for g, why in held)
                self.say(f"waiting for {side.name}'s GPU memory: {rows} ({waited:.0f}s of "
                         f"{self.opts.release_timeout_s:g}s)")
            self.clock.sleep(RELEASE_POLL_S)

    @staticmethod
    def _still_held(g: Gpu, pids: set[int] | None, owed: Release | None) -> str:
        """Why ``g`` does not count as released yet ("" when it does)."""
        left = [p for p in g.processes if pids is None or p.pid in pids]
        if left:
            return "still lists " + _holder_list(g, {p.pid for p in left})
        if owed is None or owed.expect_free is None or g.memory_free_bytes is None:
            return ""
        short = owed.expect_free - g.memory_free_bytes
        if short > RELEASE_SLACK:
            return (f"has {_gib(g.memory_free_bytes)} free, {_gib(short)} short of the {_gib(owed.expect_free)} "
                    "expected once the memory is back")
        return ""

    def _up_target(self) -> bool:
        try:
            res = self.deploy.up(self.target)
        except RigctlError as err:
            return self.step("up-to", False, f"up {self.target.name} failed: {err.message}")
        self.to_gpu_ids = tuple(res.gpu_ids)
        return self.step("up-to", res.ok, _up_message(res), **_up_detail(res))

    def _remove_source(self) -> None:
        # FROM's unit stays installed until TO is proven: with it gone, a reboot cannot start both.
        try:
            done = self.deploy.stop(self.source, remove=True)
        except RigctlError as err:
            self.step("remove-from", False, f"{self.source.name}'s unit could not be removed: {err.message}; "
                      f"it is stopped, but would start again at boot: `rigctl down {self.source.name} --remove`")
            return
        self.step("remove-from", True, f"{done.unit} removed: {self.source.name} will not start at boot",
                  removed=done.removed)

    def _pause_canary(self) -> None:
        try:
            self.held = self.deploy.pause_canary(self.source)
        except RigctlError as err:  # no reason to refuse the swap: a run then fails, its restart finds the lock held
            self.step("canary-pause", False, f"{self.source.name}'s canary could not be stopped: {err.message}; "
                      "its runs during the swap will fail")
            self.held = canaries.Held(self.source.name, None, timer_name(self.source.name))
            return
        if self.held is not None:
            self.step("canary-pause", True, f"{self.held.timer} stopped for the swap", timer=self.held.timer)

    def _move_canary(self) -> None:
        if self.held is None:
            return
        try:
            change = self.deploy.move_canary(self.held, self.target)
        except RigctlError as err:
            self.step("canary-move", False, f"{self.target.name} has no canary: {err.message}; "
                      f"`rigctl canary {self.target.name} --every 10m` installs one")
            return
        self.step("canary-move", change.action != "absent", change.message, timer=change.timer,
                  settings=change.settings)

    def _resume_canary(self) -> None:
        if self.held is None:
            return
        try:
            self.deploy.resume_canary(self.held)
        except RigctlError as err:
            self.step("canary-resume", False, f"{self.held.timer} could not be started again: {err.message}; "
                      f"`rigctl canary {self.source.name}` shows its settings, `--every SPAN` installs it again")
            return
        self.step("canary-resume", True, f"{self.held.timer} started again: the canary watches "
                  f"{self.source.name} again", timer=self.held.timer)

    # --- back --------------------------------------------------------------------------------------

    def _rollback(self) -> None:
        stopped_target = True
        if any(s.name == "up-to" for s in self.result.steps):
            to_ids = self.target.gpu_ids or self.to_gpu_ids
            pids = self._holders(self.target)
            before = self._devices(to_ids)
            try:
                done = self.deploy.stop(self.target, remove=True)
                stopped_target = done.stopped
                self.step("stop-to", done.stopped, f"{done.unit} stopped and removed" if done.stopped
                          else f"{done.unit} did not stop (state {done.was_active})", **asdict(done))
            except RigctlError as err:
                stopped_target = False
                self.step("stop-to", False, f"stopping {self.target.name} failed: {err.message}")
            if stopped_target:
                self._wait_released(self.target, to_ids, "gpu-release-to", pids, before)
        res: UpResult | None = None
        try:
            res = self.deploy.restore(self.source)
        except RigctlError as err:
            self.step("restore-from", False, f"restarting {self.source.name} failed: {err.message}")
        if res is not None:
            if res.ok:
                self._served_again()
            self.step("restore-from", res.ok, _up_message(res), **_up_detail(res))
        self._resume_canary()
        failed_at = next((s for s in self.result.steps if not s.ok), None)
        why = f"{failed_at.name}: {failed_at.message}" if failed_at else "unknown failure"
        if res is not None and res.ok:
            self._finish("rolled-back", ExitCode.DEPLOY_FAILED,
                         f"swap to {self.target.name} failed ({why}); rolled back: {self.source.name} is serving "
                         "again and passed verification"
                         + (f" ({self.result.downtime_s:.1f} s without a model)" if self.result.downtime_s else ""))
            return
        self._finish("rollback-failed", ExitCode.INTERNAL,
                     f"ROLLBACK FAILED: swap to {self.target.name} failed ({why}) and {self.source.name} could not "
                     "be brought back: NOTHING MAY BE SERVING on this host")
        self.result.todo = [
            f"`rigctl status` and `rigctl logs {self.source.name}` to see why {self.source.name} did not come back",
            *([] if stopped_target else [f"`rigctl down {self.target.name} --remove` ({self.target.name} may still "
                                         "hold the GPUs)"]),
            "`nvidia-smi` for processes still holding GPU memory",
            f"then `rigctl up {self.source.source}` to serve {self.source.name} again",
        ]


def _up_message(res: UpResult) -> str:
    if res.ok:
        return f"{res.recipe}: {res.message or 'ready and verified'}"
    failing = [c for c in (res.checks.results if res.checks else []) if c.fails]
    if failing:
        return f"{res.recipe}: failed verification: " + "; ".join(f"{c.id}: {c.message}" for c in failing)
    return f"{res.recipe}: {res.message or 'failed'}"


def _up_detail(res: UpResult) -> dict[str, Any]:
    data = res.to_dict()
    return {k: data[k] for k in ("action", "unit", "endpoint", "gpu_ids", "wait", "checks", "signatures",
                                 "stopped_after_failure")}


# --- the real deploy -----------------------------------------------------------------------------------


def resolve_source(origin: FoundDeployment, source: str) -> Side:
    """FROM must be deployed here: its record (the one ``find_deployment`` read) says which GPUs it holds and
    which unit files to restore."""
    recipe, record = origin.need_recipe(), origin.record
    if record is None:
        raise DeployError(f"{recipe.name} is not deployed on this host (no record in {origin.dirs.state})",
                          fix=f"`rigctl status` lists deployments; to deploy without a swap: `rigctl up {source}`")
    return Side(recipe, record.recipe_source or source, tuple(record.gpu_ids), recipe.publish.port)


def _freed(g: Gpu, pids: Collection[int]) -> Gpu:
    """``g`` once ``pids`` are gone: their memory free, every other process's still held."""
    gone = [p for p in g.processes if p.pid in pids]
    if not gone:
        return g
    others = [p for p in g.processes if p.pid not in pids]
    total, free, used = g.memory_total_bytes, g.memory_free_bytes, g.memory_used_bytes
    if any(p.used_memory_bytes is None for p in gone) and total is not None:
        # NVML did not say what FROM holds: all but what the other processes are known to hold
        free = total - min(total, sum(p.used_memory_bytes or 0 for p in others))
        used = total - free
    else:
        freed = sum(p.used_memory_bytes or 0 for p in gone)
        free = None if free is None else free + freed if total is None else min(total, free + freed)
        used = None if used is None else max(0, used - freed)
    return g.model_copy(update={"processes": others, "memory_free_bytes": free, "memory_used_bytes": used})


def free_facts(facts: HostFacts, gpu_ids: Sequence[str], port: int | None,
               pids: Collection[int] | None = None) -> HostFacts:
    """Host facts as they will be once FROM has stopped: the memory its processes (``pids``) hold free on
    every GPU, the other processes' memory still held, its published port free. ``pids`` None (FROM's
    processes not known): FROM's GPUs (``gpu_ids``) counted idle, whoever holds them."""
    ids = set(gpu_ids)
    if pids is None:
        devices = [
            g.model_copy(update={"processes": [], "memory_used_bytes": 0, "memory_free_bytes": g.memory_total_bytes})
            if g.named_by(ids) else g
            for g in facts.gpu.devices
        ]
    else:
        devices = [_freed(g, pids) for g in facts.gpu.devices]
    listening = [lis for lis in facts.ports.listening if port is None or lis.port != port]
    return facts.model_copy(update={
        "gpu": facts.gpu.model_copy(update={"devices": devices}),
        "ports": facts.ports.model_copy(update={"listening": listening}),
    })


class HostSwapDeploy:
    """The real operations on this host, in ``scope``: `up`'s plan and execution, and `down`. They run
    under the locks the swap holds throughout (``up()`` and ``down()`` go on under a held lock)."""

    def __init__(self, scope: Scope, *, adapters: Adapters, dirs: Dirs, force: Sequence[str] = (),
                 gpus: Sequence[str] | None = None, on_progress: Callable[[WarmupProgress], None] | None = None,
                 on_stage: Callable[[str], None] | None = None, canary: CanaryPlace | None = None) -> None:
        self.scope, self.adapters, self.dirs = scope, adapters, dirs
        self.canary = canary  # None: canaries are left alone (nothing of theirs to touch here)
        self.force, self.gpus = tuple(force), list(gpus) if gpus else None
        self.on_progress, self.on_stage = on_progress, on_stage  # each warmup's progress, as `up` reports it
        self._gathered: dict[str, HostFacts] = {}  # by side: the facts its preflight gathered

    def preflight(self, side: Side, *, freed_gpus: Sequence[str], freed_port: int | None,
                  freed_pids: Collection[int] | None = None) -> Plan:
        gathered = facts_for_recipe(side.recipe, scope=self.scope)
        self._gathered[side.name] = gathered
        facts = free_facts(gathered, freed_gpus, freed_port, freed_pids)
        return make_plan(side.recipe, facts, scope=self.scope, force=self.force, gpus=self.gpus)

    def holders(self, side: Side) -> set[int] | None:
        info = self.adapters.podman.container(side.recipe.container_name)
        if info is None or not info.running or info.pid <= 0:
            return None
        return process_tree(info.pid)

    def stop(self, side: Side, *, remove: bool) -> DownResult:
        a = self.adapters
        return down(side.name, unit=container_service(side.recipe.container_name), container=side.recipe.container_name,
                    unit_dir=self.dirs.units, state_dir=self.dirs.state, remove=remove,
                    stop_timeout_s=side.recipe.service.stop_timeout_s, systemd=a.systemd, podman=a.podman,
                    gpu=a.gpu, clock=a.clock)

    def up(self, side: Side) -> UpResult:
        """Planned again on the facts as they are now, FROM stopped: what is installed is what was judged. The
        GPUs and ports are probed again; the rest is what this swap's preflight gathered moments ago."""
        gathered = self._gathered.get(side.name)
        if gathered is None:
            plan = plan_here(side.recipe, self.scope, force=self.force, gpus=self.gpus)
        else:
            facts = refresh_facts(gathered, owners_of=[side.recipe.publish.port])
            plan = make_plan(side.recipe, facts, scope=self.scope, force=self.force, gpus=self.gpus)
        return up(plan, recipe_source=side.source, adapters=self.adapters, dirs=self.dirs,
                  options=UpOptions(verify=True), on_progress=self.on_progress, on_stage=self.on_stage)

    def restore(self, side: Side) -> UpResult:
        """The unit files still installed, byte for byte, started again and verified: nothing is re-rendered
        (FROM may have been deployed with --set or overlays this command never saw), nothing preflighted
        (it ran when FROM was deployed)."""
        record = records.load_record(self.dirs.state, side.name)
        if record is None:
            raise DeployError(f"{side.name}'s deployment record is gone from {self.dirs.state}",
                              fix=f"`rigctl up {side.source}`")
        result = UpResult.begin(side.recipe, self.scope, self.dirs)
        result.gpu_ids = list(record.gpu_ids)
        restored = install_and_start(side.recipe, _installed(record), result, recipe_source=side.source,
                                     quadlet=find_quadlet(self.scope), adapters=self.adapters, dirs=self.dirs,
                                     options=UpOptions(verify=True), on_progress=self.on_progress,
                                     on_stage=self.on_stage, planned_on=record.planned_on)
        # what runs again is what was deployed then: the record keeps that deployment's recipe digest and
        # install time, not the file's digest now
        again = records.load_record(self.dirs.state, side.name)
        if again is not None and (again.recipe_sha256, again.installed_at) != (record.recipe_sha256,
                                                                               record.installed_at):
            again.recipe_sha256, again.installed_at = record.recipe_sha256, record.installed_at
            records.save(self.dirs.state, again)
        return restored

    def pause_canary(self, side: Side) -> canaries.Held | None:
        if self.canary is None:
            return None
        return canaries.pause(side.name, unit_dir=self.canary.unit_dir, state_dir=self.dirs.state,
                              systemd=self.canary.units)

    def resume_canary(self, held: canaries.Held) -> None:
        if self.canary is not None:
            canaries.resume(held, systemd=self.canary.units)

    def move_canary(self, held: canaries.Held, target: Side) -> canaries.CanaryChange:
        place = self.canary
        if place is None:
            raise DeployError("no systemd to install the canary with")
        return canaries.move(held, target.name, engine_unit=container_service(target.recipe.container_name),
                             command=canaries.command_for(target.name, self.scope, place.executable),
                             unit_dir=place.unit_dir, state_dir=self.dirs.state, systemd=place.units,
                             now=self.adapters.clock.time())


@dataclass(frozen=True)
class CanaryPlace:
    """Where this scope's canaries live and how to drive them: the systemd unit directory, systemctl, and the
    interpreter a moved canary's service runs rigctl with."""

    unit_dir: Path
    units: canaries.Units
    executable: str


def _installed(record: records.DeploymentRecord) -> dict[str, str]:
    texts = installed_texts(Path(record.unit_dir), record.unit_files)
    missing = [n for n, t in texts.items() if t is None]
    if missing:
        raise DeployError(f"{record.recipe}'s unit files are gone ({', '.join(missing)} in {record.unit_dir})",
                          fix=f"`rigctl up {record.recipe_source or record.recipe}`")
    return {n: t for n, t in texts.items() if t is not None}
