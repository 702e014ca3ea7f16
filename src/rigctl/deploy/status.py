"""`rigctl status`: every rigctl-managed service on the host, found from the quadlet directories (units
carrying the ``rigctl.managed`` label) and from rigctl's deployment records.

Units are found by the one loader (``rigctl.host.unitdirs``: each as quadlet sees it, from whichever of
the scope's directories holds it, with every drop-in quadlet applies, whichever directory holds that),
each a ``rigctl.host.unit.Unit``: parsed once by the one parser, judged rigctl's by the one rule
(``Unit.managed``) and its endpoint read by the one reading of a published port (``Unit.endpoint``), so
status and ``doctor`` agree on which units are rigctl's and on their keys."""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rigctl.adapters.gpu_memory import GpuMemory
from rigctl.adapters.podman import ContainerEvent, Podman
from rigctl.adapters.probe import Probe
from rigctl.adapters.systemd import Systemd, UnitState
from rigctl.deploy import history
from rigctl.deploy import state as records
from rigctl.errors import CommandError
from rigctl.host.procfs import process_tree
from rigctl.host.unit import Unit
from rigctl.host.unitfile import MergedUnit
from rigctl.host.unitsnapshot import scope_units
from rigctl.places import Dirs, Scope, quadlet_file
from rigctl.recipe.defaults import HEALTH_PATH
from rigctl.recipe.reference import digest_of
from rigctl.util.jsonable import jsonable

if TYPE_CHECKING:
    from rigctl.deploy.drift import Drift


@dataclass
class Managed:
    """One managed service as found on disk, before asking anybody about it. ``unit_file`` is the file
    quadlet reads for it; ``loaded`` that file with the drop-ins quadlet applies (None: not read)."""

    scope: Scope
    unit: str
    unit_file: Path | None
    record: records.DeploymentRecord | None
    loaded: Unit | None = None


def _quadlet_units(scopes: tuple[Scope, ...]) -> dict[tuple[Scope, str], Unit]:
    """{(scope, service): unit} for every ``.container`` quadlet generates a service from. A unit file
    that is a link is left out: rigctl writes regular files, so a link is none of its services."""
    units, snap = scope_units([s.value for s in scopes])
    return {(Scope(u.scope), service): u for u in units
            if u.kind == "container" and not snap.found[u.path].link and (service := u.service) is not None}


def discover(scope: Scope, records_dir: Path, units: dict[tuple[Scope, str], Unit],
             unreadable: list[tuple[str, str]] | None = None) -> list[Managed]:
    """The services of ``scope``: its units labelled rigctl's, and those rigctl's records name (a record that
    cannot be read is added to ``unreadable``, when given)."""
    found: dict[str, Managed] = {}
    for (where, name), unit in units.items():
        if where is scope and unit.managed:
            found[name] = Managed(scope, name, Path(unit.path), None, unit)
    for record in records.all_records(records_dir, unreadable):
        if record.scope is not scope:
            continue
        entry = found.get(record.unit)
        if entry is not None:
            entry.record = record
            continue
        loaded = units.get((scope, record.unit))  # quadlet's file for it, if any: not labelled rigctl's
        path = Path(loaded.path) if loaded else Path(record.unit_dir) / quadlet_file(record.unit)
        found[record.unit] = Managed(scope, record.unit, path if path.exists() else None, record, loaded)
    return list(found.values())


def discover_all(choice: Scope | None, unreadable: list[tuple[str, str]] | None = None) -> list[Managed]:
    """Every managed service in the scopes verify, logs and down look in (``state.search_scopes``); the
    deployment records that cannot be read go to ``unreadable``, when given."""
    scopes = records.search_scopes(choice)
    units = _quadlet_units(scopes)
    return [item for scope in scopes for item in discover(scope, Dirs.of(scope).state, units, unreadable)]


@dataclass
class ServiceStatus:
    recipe: str | None
    scope: Scope
    unit: str
    unit_file: str | None
    active: str
    sub: str
    restarts: int | None
    restart_policy: str
    exit_status: int | None
    health: str  # ready | unhealthy (<why>) | down | unknown
    endpoint: str | None
    model: str | None
    image: str | None
    image_digest: str | None
    uptime_s: float | None  # rounded to 0.1 s, as shown
    gpu_memory_mib: int | None
    gpu_ids: list[str] = field(default_factory=list)
    last_failure: dict[str, Any] | None = None
    canary: dict[str, Any] | None = None  # history.CanaryState.summary(): interval, last run and result, ...
    last_boot: dict[str, Any] | None = None  # the last recorded boot: when, outcome, seconds, phases
    # what the service is, judged (VERDICTS); a FAILING one makes `status` exit SERVICE_DOWN, ok false
    verdict: str = "unknown"
    verdict_detail: str = ""
    last_exit: dict[str, Any] | None = None  # how its engine last ended: a LastExit's fields
    # per GPU of the deployment: what the gpu-fit plan gives the engine and what its processes hold now
    # (preflight.gpu_fit.GpuMemoryUse's fields); None where it cannot be said (no NVML, no GPUs, no recipe)
    gpu_memory: list[dict[str, Any]] | None = None
    # who said restart_policy: the manager (what it runs), or, when it did not answer, the unit file (what it
    # would run once loaded); "" where neither did
    restart_policy_from: str = "manager"
    # the memory plan against the last ready boot's receipt (deploy.memory.view): planned, receipt, disagrees
    memory: dict[str, Any] | None = None
    # the engine cache the unit mounts: its directory, size, and the last ready boot that found it cold and
    # warm (#36); None when the unit keeps none
    engine_cache: dict[str, Any] | None = None
    # how the host differs from what the deployment was planned on (driver, kernel module, CDI spec, image:
    # deploy.drift); [] when it does not, None when its record keeps no planned facts
    host_drift: list[str] | None = None
    # planned facts not compared with this host (the driver's CUDA where NVML did not answer); None as above
    host_drift_not_compared: list[str] | None = None

    @property
    def failing(self) -> bool:
        # a model that serves but whose canary fails, cannot be read or no longer runs (stale) fails too: a
        # script reading exit 0 would take word salad for a served model
        return self.verdict in FAILING or bool(self.canary and self.canary.get("failing"))


def _learnt(item: Managed, systemd: Systemd) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The canary's summary (stale when its service is failed, which systemd is asked) and the last boot,
    from the deployment's history (none without a record)."""
    if item.record is None:
        return None, None
    state_dir = Dirs.of(item.scope).state
    boot = history.last_boot(state_dir, item.record.recipe)
    canary = history.canary_state(state_dir, item.record.recipe)
    service = None
    if canary.config is not None or canary.unreadable is not None:
        from rigctl.render.canary_units import service_name  # noqa: PLC0415 - its escape rules load the recipe model

        try:
            service = systemd.show(service_name(item.record.recipe)).active
        except CommandError:  # not asked: judged by the age of its last run alone
            service = None
    paused_by = records.lock_holder(item.record.recipe) if canary.config is not None else None
    return canary.summary(service=service, paused_by=paused_by), boot.to_dict() if boot else None


# serving: active and ready; starting: its first warmup; not-ready: active, no restart, /health says no, within
# its warmup budget; not-serving: active, no restart, not ready though this start was ready before or its
# warmup budget is spent (an engine that hangs or died behind a live API server); restarting: it died and
# systemd is bringing it back (waiting, or warming up again); failed: systemd gave up; down: inactive though
# deployed (not stopped by `rigctl down`); stopped: by `rigctl down`; unknown: no answer
VERDICTS = ("serving", "starting", "not-ready", "not-serving", "restarting", "failed", "down", "stopped", "unknown")
# unknown fails too: a model whose manager did not answer is not known to serve, and a script reading exit 0
# would take it for one that does
FAILING = frozenset({"not-serving", "restarting", "failed", "down", "unknown"})
EVENTS_WINDOW_S = 7 * 24 * 3600.0  # how far back podman's events are asked about a container's last death


@dataclass(frozen=True)
class LastExit:
    """How the engine's container last ended, from whoever still knows: systemd until it starts the next
    one, podman's events after that, else the record of the failed warmup rigctl watched."""

    said: str  # "exit 137", "signal 9"
    status: int
    how: str  # exited | killed | dumped
    at: float | None  # seconds since the epoch
    # warmup | serving: before or after the container was ready (a health check of it passed, or rigctl saw it
    # ready); None: not known
    phase: str | None
    source: str  # systemd | podman-events | record

    def words(self) -> str:
        when = f" at {time.strftime('%H:%M', time.localtime(self.at))}" if self.at is not None else ""
        phase = {"warmup": " during warmup", "serving": " while serving"}.get(self.phase or "", "")
        return f"{self.said}{when}{phase}"


def _wall(mono_us: int) -> float | None:
    """A CLOCK_MONOTONIC timestamp of systemd's as seconds since the epoch (None for systemd's 0: never)."""
    if not mono_us:
        return None
    return time.time() - max(0.0, time.monotonic() - mono_us / 1e6)


def last_exit(unit: UnitState | None, events: Sequence[ContainerEvent], current_id: str | None,
              record: records.DeploymentRecord | None, *, ready_at: float | None = None) -> LastExit | None:
    """The engine's last end: systemd's while it keeps it, else the newest death podman recorded of a
    container that is not the one running now, else the failed warmup in the record. ``ready_at``: when
    rigctl last saw this deployment become ready (``describe``), which places the end in time."""
    if unit is not None and (said := unit.ended()) is not None and unit.exit_status is not None:
        at = _wall(unit.exited_mono_us)
        died = [e for e in events if e.status == "died"]
        if died:
            phase = _phase(events, died[-1], ready_at)
        else:
            # no event to name the container: the one `up` saw ready is the one that ended only while systemd
            # has not restarted the unit since
            phase = _phase_by_ready(at, ready_at, first_since_ready=unit.restarts == 0)
        return LastExit(said, unit.exit_status, unit.exit_code, at, phase, "systemd")
    died = [e for e in events if e.status == "died" and e.id != current_id and e.exit_code is not None]
    if died:
        last = died[-1]
        code = last.exit_code if last.exit_code is not None else 0
        return LastExit(f"exit {code}", code, "exited", last.at, _phase(events, last, ready_at), "podman-events")
    failure = record.last_failure if record else None
    status = records.record_number(failure.get("exit_status"), high=255, integer=True) if failure else None
    if failure and status is not None:
        at = records.record_number(failure.get("at"), high=records.TIME_MAX)
        return LastExit(f"exit {status}", int(status), "exited", at, "warmup", "record")
    return None


def _phase(events: Sequence[ContainerEvent], died: ContainerEvent, ready_at: float | None) -> str | None:
    """Where ``died`` falls: serving when a health check of that container passed before it died; else by
    rigctl's own ready time; else warmup when its health checks ran and none passed; None: not known (no
    health checks, and a container started after the one rigctl saw ready)."""
    checks = [e for e in events if e.id == died.id and e.status == "health_status" and e.at <= died.at]
    if any(e.health == "healthy" for e in checks):
        return "serving"
    first = not any(e.status == "died" and e.id != died.id and ready_at is not None and ready_at <= e.at < died.at
                    for e in events)
    by_ready = _phase_by_ready(died.at, ready_at, first_since_ready=first)
    if by_ready is not None:
        return by_ready
    return "warmup" if checks else None


def _phase_by_ready(at: float | None, ready_at: float | None, *, first_since_ready: bool) -> str | None:
    """By the time rigctl saw the deployment ready: an end before it came in warmup; the first end after it
    ended the container that had been ready, so it came while serving; a later one ended a container started
    since, which rigctl did not watch (None)."""
    if at is None or ready_at is None:
        return None
    if at < ready_at:
        return "warmup"
    return "serving" if first_since_ready else None


def judge(unit: UnitState | None, health: str, *, record: records.DeploymentRecord | None,
          exit_: LastExit | None, ready_at: float | None = None, now: float | None = None) -> tuple[str, str]:
    """(verdict, the sentence that says it). ``ready_at``: when rigctl last saw this deployment become ready
    (its last boot's end, seconds since the epoch); ``now``: the wall clock, for the tests."""
    ended = f" after {exit_.words()}" if exit_ is not None else ""
    if unit is None:
        return "unknown", "the service manager did not answer"
    active, restarts = unit.active, unit.restarts
    if unit.load == "not-found":
        return "down", "deployed (rigctl has its record) but systemd has no such unit: `systemctl daemon-reload`?"
    if active == "failed":
        return "failed", f"failed (result {unit.result or '?'}){ended}: systemd will not start it again by itself"
    if unit.restart_pending:
        return "restarting", f"down, systemd restarts it{ended} (restart {(restarts or 0) + 1})"
    if active in ("inactive", "deactivating"):
        went_down = _wall(unit.inactive_since_mono_us)
        stopped_at = record.stopped_at if record else None
        if stopped_at is not None and (went_down is None or went_down <= stopped_at + 1.0):
            return "stopped", f"stopped by `rigctl down` at {time.strftime('%H:%M', time.localtime(stopped_at))}"
        if record is not None and record.last_failure and active == "inactive" and exit_ is not None \
                and exit_.source == "record":
            return "down", f"down: its last warmup failed ({record.last_failure.get('status')}){ended}"
        return "down", f"down{ended or ' (inactive)'} though deployed; `rigctl down` did not stop it"
    if health == "ready":
        return "serving", "serving" if not restarts else f"serving (restarted {restarts} time(s){ended})"
    now = time.time() if now is None else now
    # ActiveEnter is this start's only once it is active (a Notify=healthy unit warms up activating)
    since = _wall(unit.active_since_mono_us) if active == "active" else None
    if ready_at is not None and since is not None and ready_at >= since:
        # this very start was ready once: no warmup is left to wait for
        return "not-serving", (f"no longer ready, though active and not restarted since it was ready at "
                               f"{time.strftime('%H:%M', time.localtime(ready_at))}: {health}")
    budget = record.warmup_budget_s if record is not None else None
    if restarts:
        # systemd's restart gets the warmup budget again, counted from this start's main process
        started = _wall(unit.main_started_mono_us) or since
        if budget is not None and started is not None and now - started > budget:
            return "not-serving", (f"still not ready {now - started:.0f} s after systemd restarted it{ended} "
                                   f"(restart {restarts}), past its warmup budget of {budget} s: {health}")
        return "restarting", f"warming up again{ended or ' after a restart'} (restart {restarts})"
    if active == "activating":
        return "starting", "starting"
    if budget is not None and since is not None and now - since > budget:
        return "not-serving", (f"still not ready after {now - since:.0f} s active, past its warmup budget of "
                               f"{budget} s: {health}")
    return "not-ready", f"active but not ready ({health})"


def describe(
    item: Managed, *, systemd: Systemd, podman: Podman, probe: Probe, gpu: GpuMemory
) -> ServiceStatus:
    # the keys quadlet reads for it, its drop-ins applied (a file that cannot be read left out); none when
    # it was not read
    keys = item.loaded.readable_keys if item.loaded else MergedUnit(files=())
    record = item.record
    endpoint = record.endpoint if record else None
    if endpoint is None and item.loaded:
        endpoint = item.loaded.endpoint
    image = record.image if record else keys.value("Container", "Image")
    container = record.container if record else keys.value("Container", "ContainerName")
    model = record.served_name if record else None

    unit: UnitState | None
    try:
        unit = systemd.show(item.unit)
        active, sub, restarts = unit.active, unit.sub, unit.restarts
        policy, exit_status = unit.restart_policy, unit.exit_status
        uptime = None
        if unit.active == "active" and unit.active_since_mono_us:
            uptime = round(max(0.0, time.monotonic() - unit.active_since_mono_us / 1e6), 1)
    except CommandError:
        unit = None
        active, sub, restarts, exit_status, uptime = "unknown", "manager unreachable", None, None, None
        policy = keys.value("Service", "Restart") or ""  # a quadlet passes [Service] on as it is
    said_by = "manager" if unit is not None else ("unit file" if policy else "")

    info = podman.container(container) if container else None
    digest = info.image_digest if info and info.image_digest else None
    if digest is None and image:
        digest = digest_of(image)

    health = "down"
    if active == "active" and endpoint and model:
        answer = probe.check(endpoint, record.health_path if record else HEALTH_PATH, model)
        health = "ready" if answer.ready_for(model) else f"unhealthy ({answer.detail})"
    elif active == "unknown":
        health = "unknown"
    elif active == "activating":
        health = "restarting" if unit is not None and unit.restart_pending else "starting"
    events: list[ContainerEvent] = []
    if container and unit is not None and (restarts or unit.exit_status is not None or not unit.running):
        since = time.time() - record.installed_at if record and record.installed_at else EVENTS_WINDOW_S
        events = podman.events(container, since_s=min(EVENTS_WINDOW_S, since + 60.0))
    canary, last_boot = _learnt(item, systemd)
    ready_at = last_boot["at"] if last_boot and last_boot.get("status") == "ready" else None
    exit_ = last_exit(unit, events, info.id if info and info.running else None, record, ready_at=ready_at)
    verdict, verdict_detail = judge(unit, health, record=record, exit_=exit_, ready_at=ready_at)
    # the engine's workers hold the memory, not the process podman names as the container's
    pids = process_tree(info.pid) if info and info.pid else None
    gpu_mib = gpu.used_by(pids) if pids is not None else None
    drift = _drift(record, digest, gpu)
    return ServiceStatus(
        recipe=record.recipe if record else None, scope=item.scope, unit=item.unit,
        unit_file=str(item.unit_file) if item.unit_file else None, active=active, sub=sub, restarts=restarts,
        restart_policy=policy, exit_status=exit_status, health=health, endpoint=endpoint, model=model, image=image,
        image_digest=digest, uptime_s=uptime, gpu_memory_mib=gpu_mib, gpu_ids=list(record.gpu_ids) if record else [],
        last_failure=record.last_failure if record else None, canary=canary, last_boot=last_boot,
        verdict=verdict, verdict_detail=verdict_detail,
        last_exit=jsonable(exit_) if exit_ is not None else None,
        gpu_memory=memory_plan(record, pids, gpu), restart_policy_from=said_by,
        memory=_memory(record),
        host_drift=drift.changes if drift else None,
        host_drift_not_compared=drift.not_compared if drift else None,
        engine_cache=_engine_cache(item.scope, record),
    )


def _engine_cache(scope: Scope, record: records.DeploymentRecord | None) -> dict[str, Any] | None:
    if record is None or not record.engine_cache:
        return None
    from rigctl.deploy import engine_cache  # noqa: PLC0415 - only for units that keep one
    from rigctl.places import engine_cache_root  # noqa: PLC0415

    where = engine_cache_root(scope) / record.engine_cache
    found = engine_cache.size(where)
    return {"dir": str(where), **(found.to_dict() if found else {"bytes": None, "files": None, "complete": True}),
            "boots": history.by_cache(history.boots(Dirs.of(scope).state, record.recipe))}


def _drift(record: records.DeploymentRecord | None, digest: str | None, gpu: GpuMemory) -> Drift | None:
    if record is None or record.planned_on is None:
        return None  # nothing to compare with: the host is not read
    from rigctl.deploy.drift import compare, host_now, wants_cuda  # noqa: PLC0415 - only for records that keep them

    # NVML is asked only when the record keeps a CUDA to compare; it is the adapter's one start, shared
    cuda = gpu.cuda_version() if wants_cuda(record.planned_on) else None
    return compare(record, host_now(cuda_version=cuda), digest)


def _memory(record: records.DeploymentRecord | None) -> dict[str, Any] | None:
    if record is None or record.memory is None:
        return None
    from rigctl.deploy.memory import view  # noqa: PLC0415 - only where a boot left a receipt

    return view(record.memory)


def memory_plan(record: records.DeploymentRecord | None, pids: Collection[int] | None,
                gpu: GpuMemory) -> list[dict[str, Any]] | None:
    """Planned against used memory per GPU of a running deployment (``gpu_fit.planned_vs_used``), from the
    recipe the record was deployed from; None when NVML, the record, its GPUs or its recipe is missing."""
    if record is None or not record.gpu_ids or pids is None or not record.recipe_source:
        return None
    devices = gpu.devices(list(record.gpu_ids))
    if devices is None:
        return None
    from rigctl.errors import RigctlError  # noqa: PLC0415 - recipes load pydantic: only for a GPU deployment
    from rigctl.preflight.gpu_fit import planned_vs_used  # noqa: PLC0415
    from rigctl.recipe.load import load  # noqa: PLC0415

    try:
        recipe = load(record.recipe_source).recipe
    except (RigctlError, OSError):
        return None
    return [jsonable(use) for use in planned_vs_used(recipe, record.gpu_ids, devices, set(pids))]
