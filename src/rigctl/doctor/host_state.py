"""What doctor knows about the host beyond the unit files, gathered at the edge and handed to the rules.

The driver and the CDI specs come from the host probes preflight uses (``rigctl.host.cdi``,
``host.probes.probe_cdi``), so ``doctor`` and ``preflight`` cannot disagree on a spec. The digests of
local images (for pinning: ``host.probes.local_image_digests``) and the quadlet generator of each scope
are asked only for doctor.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from rigctl.adapters.systemd import Systemd, UnitState
from rigctl.deploy.drift import host_now, wants_cuda
from rigctl.deploy.state import PlannedHost, all_records
from rigctl.errors import CommandError, InvalidInputError
from rigctl.host.cdi import CDI_DIRS, DRIVER_VERSION_FILE, driver_from_proc, probe_driver, spec_from_text
from rigctl.host.facts import Cdi, CdiSpec
from rigctl.host.nvml_lib import read_cuda_version
from rigctl.host.probes import IMAGE_REF, local_image_digests, probe_cdi
from rigctl.host.quadlet import find_quadlet
from rigctl.host.unit import Unit
from rigctl.host.unitfile import UnitParseError
from rigctl.places import Scope, state_dir
from rigctl.recipe.reference import pinned


@dataclass(frozen=True)
class LiveUnit:
    """What the manager of a unit's scope says about the service it runs from the file: the live state,
    not the file (a changed file runs only after a daemon-reload, a new command line only after a restart)."""

    service: str  # the systemd service, e.g. rigctl-x.service
    scope: str  # system | user: whose manager (`systemctl` or `systemctl --user`)
    state: UnitState
    canary: str | None = None  # the ActiveState of rigctl's canary service for it (None: none, or not asked)

    @property
    def systemctl(self) -> str:
        """The command to paste for this unit's manager."""
        return "systemctl --user" if self.scope == "user" else "systemctl"


@dataclass(frozen=True)
class DoctorFacts:
    driver_version: str | None = None  # None: no NVIDIA driver seen; the CDI rules are skipped
    driver_source: str | None = None
    cdi: Cdi = field(default_factory=Cdi)
    # scope -> the quadlet generator its manager runs (None: none); a scope not here was not looked at
    quadlet: Mapping[str, str | None] = field(default_factory=dict)
    image_digests: Mapping[str, str] = field(default_factory=dict)  # image as written -> sha256:<hex>
    default_timeout_start_s: float = 90.0  # systemd's DefaultTimeoutStartSec
    min_warmup_s: float = 600.0  # a start timeout below this is too short for a large model's warmup
    # unit file path -> its service as its manager runs it; a unit not here was not asked about (--path, a
    # manager doctor cannot reach, another user's)
    live: Mapping[str, LiveUnit] = field(default_factory=dict)
    # unit file path -> (recipe, the host facts its deployment was planned on), from the deployment records;
    # ``now``: this host's side (deploy.drift.host_now), None where it was not read
    planned: Mapping[str, tuple[str, PlannedHost]] = field(default_factory=dict)
    now: PlannedHost | None = None
    # scope -> the engine cache directories in its manager's cache (name, bytes or None), for the orphan rule
    engine_caches: Mapping[str, list[tuple[str, int | None]]] = field(default_factory=dict)

    @property
    def cdi_specs(self) -> list[CdiSpec]:
        return self.cdi.specs


def snapshot_facts(driver_text: str, cdi_texts: Mapping[str, str]) -> DoctorFacts:
    """Facts from files another host shipped back (``fleet doctor`` without rigctl there): the driver
    file's text and the CDI specs' texts, read by the same functions as here."""
    version = driver_from_proc(driver_text) if driver_text else None
    specs = [spec_from_text(path, text) for path, text in sorted(cdi_texts.items())]
    return DoctorFacts(driver_version=version, driver_source=DRIVER_VERSION_FILE if version else None,
                       cdi=Cdi(dirs=list(CDI_DIRS), specs=specs))


def local_facts(units: Sequence[Unit], *, driver_file: str = DRIVER_VERSION_FILE,
                cdi_dirs: Sequence[str] = CDI_DIRS,
                cuda: Callable[[], str | None] = read_cuda_version) -> DoctorFacts:
    """``cuda``: the driver's CUDA through NVML, asked (bounded) only where a deployment recorded one to compare."""
    version, source = probe_driver(driver_file)
    scopes = sorted({u.scope for u in units if u.kind == "container" and u.scope != "path"})
    planned = planned_facts(Scope(s) for s in sorted({u.scope for u in units if u.scope != "path"}))
    return DoctorFacts(
        driver_version=version, driver_source=source, cdi=probe_cdi(version, cdi_dirs),
        quadlet={scope: find_quadlet(Scope(scope)) for scope in scopes},
        image_digests=local_image_digests(unpinned_images(units)),
        planned=planned, now=host_now(driver_file=driver_file, cdi_dirs=cdi_dirs, cuda_version=cuda() if any(
            wants_cuda(p) for _, p in planned.values()) else None) if planned else None,
        engine_caches={scope: _caches(Scope(scope), units) for scope in scopes},
    )


def _caches(scope: Scope, units: Sequence[Unit]) -> list[tuple[str, int | None]]:
    """The engine cache directories of ``scope``'s manager (this login's view of %C) that no unit mounts,
    with their sizes: a mounted cache is not walked."""
    from rigctl.deploy import engine_cache  # noqa: PLC0415 - doctor's host side only
    from rigctl.places import engine_cache_root  # noqa: PLC0415

    used = engine_cache.mounted_keys(units)
    return [(name, size.bytes if size is not None else None)
            for name, size in engine_cache.orphans(engine_cache_root(scope), used)]


def planned_facts(scopes: Iterable[Scope]) -> dict[str, tuple[str, PlannedHost]]:
    """Unit file path -> (recipe, planned-on facts) of every readable deployment record of ``scopes`` that keeps
    them; a record that cannot be read is status's and down's to report, not drift's."""
    out: dict[str, tuple[str, PlannedHost]] = {}
    for scope in scopes:
        try:
            found = all_records(state_dir(scope))
        except (InvalidInputError, OSError):
            continue
        for record in found:
            if record.planned_on is not None:
                out.update({os.path.join(record.unit_dir, name): (record.recipe, record.planned_on)
                            for name in record.unit_files})
    return out


def unpinned_images(units: Sequence[Unit]) -> list[str]:
    """Unpinned image references of podman-run units that look like image references: a value from a
    unit file reaches podman only when it cannot be read as an option."""
    images: list[str] = []
    for unit in units:
        try:
            spec = unit.serving
        except UnitParseError:
            continue  # an unreadable unit is audit()'s finding; it has no image to pin
        if spec and spec.image and not pinned(spec.image) and spec.runner in ("quadlet", "podman") \
                and IMAGE_REF.fullmatch(spec.image):
            images.append(spec.image)
    return sorted(set(images))


def live_units(targets: Mapping[str, tuple[str, str]], systemd_for: Callable[[Scope], Systemd]) -> dict[str, LiveUnit]:
    """``targets``: unit file path -> (scope, service). Each manager is asked once per service; one that
    does not answer leaves its units out (no live finding is guessed)."""
    live: dict[str, LiveUnit] = {}
    managers: dict[str, Systemd] = {}
    for path, (scope, service) in targets.items():
        systemd = managers.setdefault(scope, systemd_for(Scope(scope)))
        try:
            state = systemd.show(service)
        except CommandError:
            continue
        if state.load != "not-found":
            live[path] = LiveUnit(service, scope, state, _canary_state(systemd, service))
    return live


def _canary_state(systemd: Systemd, service: str) -> str | None:
    """The ActiveState of a rigctl unit's canary service: a failed one (its run could not run) fails the
    canary whatever its record's age says. Only rigctl's units are asked (one more call each)."""
    if not service.startswith("rigctl-") or service.endswith("-canary.service"):
        return None
    try:
        found = systemd.show(service.removesuffix(".service") + "-canary.service")
    except CommandError:
        return None
    return found.active if found.load != "not-found" else None
