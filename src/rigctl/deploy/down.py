"""`rigctl down`: stop a deployment (and remove its unit), idempotently, holding the deployment's lock
(``state.deployment_lock``; inside `swap`, the one the swap holds)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from tenacity import Retrying, retry_if_result, stop_after_attempt, wait_fixed

from rigctl.adapters.clock import Clock
from rigctl.adapters.gpu_memory import GpuMemory
from rigctl.adapters.podman import Podman
from rigctl.adapters.systemd import Systemd
from rigctl.deploy import canary as canaries
from rigctl.deploy import history
from rigctl.deploy import state as records
from rigctl.deploy.install import remove_files
from rigctl.deploy.state import deployment_lock
from rigctl.errors import CommandError, DeploymentNotFoundError, InvalidInputError
from rigctl.places import ENGINE_LOG_SUBDIR, quadlet_file
from rigctl.recipe.defaults import stop_wait_s

CONTAINER_GONE_WAIT_S = 15.0
CONTAINER_GONE_POLL_S = 0.2


def _wait_until_gone(podman: Podman, container: str, clock: Clock) -> bool:
    """Poll until podman no longer knows the container, for at most CONTAINER_GONE_WAIT_S. Bounded by
    attempts rather than wall time so an injected clock drives it in tests."""
    retrying = Retrying(
        sleep=clock.sleep,
        wait=wait_fixed(CONTAINER_GONE_POLL_S),
        stop=stop_after_attempt(int(CONTAINER_GONE_WAIT_S / CONTAINER_GONE_POLL_S) + 1),
        retry=retry_if_result(bool),
        retry_error_callback=lambda state: state.outcome.result() if state.outcome else True,
    )
    still_there: bool = retrying(lambda: podman.container(container) is not None)
    return not still_there


def _check_own_dir(record: records.DeploymentRecord, unit_dir: Path, where: Path) -> None:
    """``down --remove`` deletes only in this scope's quadlet directory: a record that says its units
    are elsewhere is refused before anything is stopped or deleted."""
    recorded = Path(record.unit_dir)
    same = os.path.normpath(recorded) == os.path.normpath(unit_dir)
    if not same and recorded.is_dir() and unit_dir.is_dir():
        same = os.path.samefile(recorded, unit_dir)
    if not same:
        raise InvalidInputError(
            [f"{where}: the record puts {record.recipe}'s unit files in {record.unit_dir}, not in this scope's "
             f"quadlet directory {unit_dir}; rigctl removes files only there"],
            fix="pick the scope it was deployed in (--user/--system), or remove its unit files and this record by hand",
        )


@dataclass
class DownResult:
    recipe: str
    unit: str
    was_active: str
    stopped: bool
    container_gone: bool
    removed: list[str] = field(default_factory=list)
    gpu_ids: list[str] = field(default_factory=list)
    gpus_released: bool | None = None  # None: not knowable here (no NVML, or no GPU in the layout)
    message: str = ""
    canary_removed: list[str] = field(default_factory=list)  # its timer, service and record (always removed)
    engine_log_kept: str | None = None  # --remove: an engine log left in place (not where rigctl's unit puts it)
    engine_cache_kept: str | None = None  # --remove: the engine cache left, and why (another deployment uses it)


def down(
    recipe_name: str,
    *,
    unit: str,
    container: str,
    unit_dir: Path,
    state_dir: Path,
    remove: bool,
    stop_timeout_s: float,
    systemd: Systemd,
    podman: Podman,
    gpu: GpuMemory,
    clock: Clock,
    canary_units: canaries.Units | None = None,
    canary_dir: Path | None = None,
    lock_dir: Path | None = None,
    engine_log: Path | None = None,
    unknown: DeploymentNotFoundError | None = None,
    cache_root: Path | None = None,
) -> DownResult:
    """``engine_log``: the unit's engine log, removed with ``remove``; ``cache_root``: where the manager keeps
    engine caches (the deployment's goes with ``remove`` when no other deployment mounts it). ``unknown``:
    raised when the name is nothing here (no record, and systemd has no such unit): a typo, not "nothing to
    do"."""
    records.check_record_name(recipe_name)  # a name, never a path: it names the record and the lock
    with deployment_lock(recipe_name, f"down {recipe_name}", lock_dir):
        return _down(recipe_name, unit=unit, container=container, unit_dir=unit_dir, state_dir=state_dir,
                     remove=remove, stop_timeout_s=stop_timeout_s, systemd=systemd, podman=podman, gpu=gpu,
                     clock=clock, canary_units=canary_units, canary_dir=canary_dir, engine_log=engine_log,
                     unknown=unknown, cache_root=cache_root)


def _down(
    recipe_name: str, *, unit: str, container: str, unit_dir: Path, state_dir: Path, remove: bool,
    stop_timeout_s: float, systemd: Systemd, podman: Podman, gpu: GpuMemory, clock: Clock,
    canary_units: canaries.Units | None, canary_dir: Path | None, engine_log: Path | None = None,
    unknown: DeploymentNotFoundError | None = None, cache_root: Path | None = None,
) -> DownResult:
    record = records.load_record(state_dir, recipe_name)  # refused whole when damaged: exit 3
    if record is not None:
        unit, container = record.unit, record.container
        engine_log = Path(record.engine_log) if record.engine_log else engine_log
    records.check_unit_name(unit)
    if record is None and unknown is not None:
        try:
            known = systemd.show(unit)
        except CommandError:
            raise unknown from None  # no record, no recipe, and no manager to run a unit of that name
        if known.load != "loaded" and known.active == "inactive":
            raise unknown  # before the canary's removal: nothing of a name never deployed is touched
    names = record.unit_files if record else [quadlet_file(unit)]
    if remove and record is not None:
        _check_own_dir(record, unit_dir, records.record_path(state_dir, recipe_name))
    canary_removed: list[str] = []
    if canary_units is not None and canary_dir is not None:
        # first: a canary left running would find the stopped engine failing (and might restart it)
        canary_removed = canaries.remove(recipe_name, unit_dir=canary_dir, state_dir=state_dir,
                                         systemd=canary_units).removed
    before = systemd.show(unit)
    if before.load == "loaded" or before.active != "inactive":
        systemd.stop(unit, wait=True, timeout=stop_wait_s(stop_timeout_s))
    after = systemd.show(unit)
    if record is not None and not remove and after.active in ("inactive", "failed"):
        record.stopped_at = clock.time()  # `status` tells a service stopped on purpose from a dead one
        records.save(state_dir, record)
    # ExecStopPost removes the container; wait for it (bounded) so "GPUs released" means something.
    gone = _wait_until_gone(podman, container, clock)
    result = DownResult(
        recipe=recipe_name, unit=unit, was_active=before.active,
        stopped=after.active in ("inactive", "failed"), container_gone=gone,
        gpu_ids=list(record.gpu_ids) if record else [], canary_removed=canary_removed,
    )
    if remove:
        result.removed = [str(p) for p in remove_files(unit_dir, names)]
        if result.removed:
            systemd.daemon_reload()
        systemd.reset_failed(unit)
        records.delete(state_dir, recipe_name)
        result.canary_removed += history.remove(state_dir, recipe_name, boots_too=True)
        _remove_engine_log(engine_log, unit, result)
        if record is not None and record.engine_cache and cache_root is not None:
            _remove_engine_cache(cache_root / record.engine_cache, record.engine_cache, state_dir, result)
    if result.gpu_ids:
        busy = gpu.busy(result.gpu_ids)
        result.gpus_released = None if busy is None else not busy
    if before.load != "loaded" and before.active == "inactive" and not result.removed:
        result.message = f"{unit} is not installed; nothing to do"
    elif before.active in ("inactive", "failed") and not result.removed:
        result.message = f"{unit} was already stopped"
    else:
        result.message = f"{unit} stopped" + (" and removed" if result.removed else "")
    if result.engine_log_kept:
        result.message += f"; its engine log is kept: {result.engine_log_kept}"
    if result.engine_cache_kept:
        result.message += f"; its engine cache is kept: {result.engine_cache_kept}"
    return result


def _remove_engine_cache(path: Path, key: str, state_dir: Path, result: DownResult) -> None:
    """The engine cache goes with the last deployment that mounts it (same image and GPU: same cache)."""
    from rigctl.deploy import engine_cache  # noqa: PLC0415 - only for --remove of a unit that keeps one

    users = [r.recipe for r in records.all_records(state_dir) if r.engine_cache == key]
    if users:
        result.engine_cache_kept = f"{path} (also mounted by {', '.join(sorted(users)[:5])})"
        return
    if engine_cache.size(path) is None:
        return
    why = engine_cache.remove(path)
    if why is not None:
        result.engine_cache_kept = f"{path} ({why})"
        return
    result.removed.append(str(path))


def _remove_engine_log(path: Path | None, unit: str, result: DownResult) -> None:
    """``--remove`` takes the engine's log too where it is the file rigctl's unit writes (``rigctl/logs/
    UNIT.log`` below the manager's state directory); one elsewhere (a drop-in's path) is kept and said."""
    if path is None:
        return
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return
    except OSError:
        return  # none: nothing to say
    if path.name != f"{unit.removesuffix('.service')}.log" or not str(path.parent).endswith("/" + ENGINE_LOG_SUBDIR):
        result.engine_log_kept = str(path)
        return
    try:
        path.unlink()
    except OSError as exc:
        result.engine_log_kept = f"{path} ({exc.strerror})"
        return
    result.removed.append(str(path))
