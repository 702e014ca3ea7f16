"""`rigctl status`: every rigctl-managed service on the host, found from the quadlet directories (files
carrying the ``rigctl.managed`` label) and from rigctl's deployment records.

Unit files are read by the one parser (``rigctl.host.unitfile``) and judged rigctl's by the one rule
(``rigctl.host.managed``, the unit file's own label), so status and ``doctor --fix`` agree on which units
are rigctl's and on what their keys are, drop-ins included."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigctl.adapters.gpu_memory import GpuMemory
from rigctl.adapters.podman import Podman
from rigctl.adapters.probe import Probe
from rigctl.adapters.systemd import Systemd
from rigctl.deploy import state as records
from rigctl.errors import CommandError, InvalidInputError
from rigctl.host.managed import is_managed
from rigctl.host.procfs import process_tree
from rigctl.host.unitfile import MergedUnit, UnitParseError, dropin_dirs, parse
from rigctl.places import Dirs, Scope
from rigctl.util import safefs


@dataclass
class Managed:
    """One managed service as found on disk, before asking anybody about it."""

    scope: Scope
    unit: str
    unit_file: Path | None
    record: records.DeploymentRecord | None


def _unit_text(path: Path) -> str | None:
    """A unit file's text, bounded; None for anything rigctl did not write as a regular file (a link,
    a FIFO, a huge or undecodable file), which therefore is not one of its services."""
    try:
        got = safefs.read_file(path, limit=safefs.UNIT_LIMIT, nofollow=True)
        return None if got is None else got.text(path)
    except InvalidInputError:
        return None


def discover(scope: Scope, unit_dir: Path, state_dir: Path) -> list[Managed]:
    found: dict[str, Managed] = {}
    if unit_dir.is_dir():
        for path in sorted(unit_dir.glob("*.container")):
            text = _unit_text(path)
            if text is not None and is_managed(str(path), text):
                unit = path.stem + ".service"
                found[unit] = Managed(scope, unit, path, None)
    for record in records.all_records(state_dir):
        if record.scope is not scope:
            continue
        entry = found.get(record.unit)
        path = Path(record.unit_dir) / (record.unit.removesuffix(".service") + ".container")
        if entry is None:
            found[record.unit] = Managed(scope, record.unit, path if path.exists() else None, record)
        else:
            entry.record = record
    return list(found.values())


def discover_all(choice: Scope | None) -> list[Managed]:
    """Every managed service in the scopes verify, logs and down look in (``state.search_scopes``)."""
    return [item for scope in records.search_scopes(choice)
            for item in discover(scope, Dirs.of(scope).units, Dirs.of(scope).state)]


def unit_keys(path: Path) -> MergedUnit | None:
    """The unit file with its drop-ins applied, as doctor applies them (the directories
    ``dropin_dirs`` names, in that order, each by file name). None when the unit cannot be read; a
    drop-in that cannot be read is left out."""
    text = _unit_text(path)
    if text is None:
        return None
    try:
        main = parse(str(path), text)
    except UnitParseError:
        return None
    dropins = []
    for dirname in dropin_dirs(str(path), text):
        folder = path.parent / dirname
        for conf in sorted(folder.glob("*.conf")) if folder.is_dir() else ():
            conf_text = _unit_text(conf)
            if conf_text is None:
                continue
            try:
                dropins.append(parse(str(conf), conf_text))
            except UnitParseError:
                continue
    return MergedUnit.of(main, dropins)


_PUBLISH = re.compile(r"(?:(\[[0-9a-fA-F:]+\]|[0-9.]+):)?(\d+):\d+")


def _endpoint(keys: MergedUnit) -> str | None:
    """From the first ``PublishPort=`` that names a host port."""
    for word in keys.words("Container", "PublishPort"):
        if m := _PUBLISH.match(word):
            return f"http://{(m.group(1) or '127.0.0.1')}:{m.group(2)}"
    return None


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


def describe(
    item: Managed, *, systemd: Systemd, podman: Podman, probe: Probe, gpu: GpuMemory
) -> ServiceStatus:
    keys = (unit_keys(item.unit_file) if item.unit_file is not None else None) or MergedUnit(files=())
    record = item.record
    endpoint = record.endpoint if record else None
    if endpoint is None:
        endpoint = _endpoint(keys)
    image = record.image if record else keys.value("Container", "Image")
    container = record.container if record else keys.value("Container", "ContainerName")
    model = record.served_name if record else None

    try:
        unit = systemd.show(item.unit)
        active, sub, restarts = unit.active, unit.sub, unit.restarts
        policy, exit_status = unit.restart_policy, unit.exit_status
        uptime = None
        if unit.active == "active" and unit.active_since_mono_us:
            uptime = round(max(0.0, time.monotonic() - unit.active_since_mono_us / 1e6), 1)
    except CommandError:
        active, sub, restarts, policy, exit_status, uptime = "unknown", "manager unreachable", None, "", None, None

    info = podman.container(container) if container else None
    digest = info.image_digest if info and info.image_digest else None
    if digest is None and image and "@sha256:" in image:
        digest = image.split("@", 1)[1]

    health = "down"
    if active == "active" and endpoint and model:
        answer = probe.check(endpoint, record.health_path if record else "/health", model)
        health = "ready" if answer.ready_for(model) else f"unhealthy ({answer.detail})"
    elif active == "unknown":
        health = "unknown"
    elif active == "activating":
        health = "starting" if sub != "auto-restart" else "restarting"
    # the engine's workers hold the memory, not the process podman names as the container's
    gpu_mib = gpu.used_by(process_tree(info.pid)) if info and info.pid else None
    return ServiceStatus(
        recipe=record.recipe if record else None, scope=item.scope, unit=item.unit,
        unit_file=str(item.unit_file) if item.unit_file else None, active=active, sub=sub, restarts=restarts,
        restart_policy=policy, exit_status=exit_status, health=health, endpoint=endpoint, model=model, image=image,
        image_digest=digest, uptime_s=uptime, gpu_memory_mib=gpu_mib, gpu_ids=list(record.gpu_ids) if record else [],
        last_failure=record.last_failure if record else None,
    )
