"""Rules about the host the units run on, judged once for all of them: the CDI spec against the loaded
driver (by ``rigctl.host.cdi.stale``, preflight's rule), and the quadlet generator that turns
``.container`` files into services."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from rigctl.deploy.drift import not_compared
from rigctl.deploy.engine_cache import mounted_keys
from rigctl.deploy.state import host_drift as changes_since
from rigctl.doctor.host_state import DoctorFacts
from rigctl.doctor.rules.context import HostHit, RuleContext
from rigctl.host.cdi import CDI_DIRS, nvidia_specs, stale
from rigctl.places import Scope, engine_cache_root
from rigctl.podman_args import NVIDIA_CDI_KIND
from rigctl.severity import Severity

_GENERATE = "nvidia-ctk cdi generate --output="


def _gpu_units(units: Sequence[RuleContext]) -> list[str]:
    return [c.unit.path for c in units if any(NVIDIA_CDI_KIND in d for d in c.spec.devices)]


def cdi_stale(units: Sequence[RuleContext], facts: DoctorFacts) -> list[HostHit]:
    if facts.driver_version is None:
        return []
    gpu_units = _gpu_units(units)
    users = f"; units using CDI GPUs: {', '.join(gpu_units)}" if gpu_units else ""
    hits: list[HostHit] = []
    for spec in nvidia_specs(facts.cdi):
        why = stale(spec, facts.driver_version, facts.cdi)
        if why:
            hits.append(HostHit(
                spec.path,
                f"CDI spec {why}: containers fail to start with `cannot stat` on the old libraries{users}",
                f"regenerate it: `{_GENERATE}{spec.path}`",
            ))
    return hits


def cdi_missing(units: Sequence[RuleContext], facts: DoctorFacts) -> list[HostHit]:
    if facts.driver_version is None or nvidia_specs(facts.cdi):
        return []
    where = " or ".join(facts.cdi.dirs or CDI_DIRS)
    return [
        HostHit(
            path,
            f"uses nvidia.com/gpu CDI devices but there is no NVIDIA CDI spec in {where} "
            f"(driver {facts.driver_version})",
            f"generate one: `{_GENERATE}/etc/cdi/nvidia.yaml`",
        )
        for path in _gpu_units(units)
    ]


def quadlet_missing(units: Sequence[RuleContext], facts: DoctorFacts) -> list[HostHit]:
    """A ``.container`` in a quadlet directory does nothing without the generator: systemd never sees a
    service (Debian 12's podman 4.3 ships none)."""
    hits: list[HostHit] = []
    for ctx in units:
        scope = ctx.unit.scope
        if ctx.unit.kind == "container" and scope in facts.quadlet and facts.quadlet[scope] is None:
            hits.append(HostHit(
                ctx.unit.path,
                f"no quadlet generator for the {scope} manager: systemd never turns this .container into a "
                "service, so it does not run",
                "install podman 4.4 or later (it ships quadlet as podman-system-generator and "
                f"podman-user-generator), then `systemctl{' --user' if scope == 'user' else ''} daemon-reload`",
            ))
    return hits


def host_drift(units: Sequence[RuleContext], facts: DoctorFacts) -> list[HostHit]:
    """The host under a deployment no longer matches what it was planned on (#34): the engine runs on a
    driver, module or CDI spec it was not checked against, and its next restart meets them."""
    if facts.now is None:
        return []
    hits: list[HostHit] = []
    for ctx in units:
        found = facts.planned.get(ctx.unit.path)
        if found is None:
            continue
        recipe, planned = found
        digest = ctx.spec.image.partition("@")[2] if ctx.spec.image and "@" in ctx.spec.image else None
        now = replace(facts.now, image_digest=digest)
        changes = changes_since(planned, now)
        unsaid = not_compared(planned, now)
        if changes:
            hits.append(HostHit(
                ctx.unit.path, f"the host changed since {recipe} was planned: {'; '.join([*changes, *unsaid])}",
                f"check it against the host as it is now (`rigctl preflight {recipe}`), then `rigctl up {recipe}` "
                "to deploy and record it again; a CDI spec for another driver: regenerate it "
                f"(`{_GENERATE}/etc/cdi/nvidia.yaml`)",
            ))
        elif unsaid:  # nothing changed that could be read: say what was not, rather than a silent all-clear
            hits.append(HostHit(ctx.unit.path, f"since {recipe} was planned: {'; '.join(unsaid)}",
                                "run doctor where NVML answers (as root, or a user who may open /dev/nvidiactl)",
                                severity=Severity.INFO))
    return hits



def engine_cache_orphan(units: Sequence[RuleContext], facts: DoctorFacts) -> list[HostHit]:
    """An engine cache directory no unit of its manager mounts any more (its image or GPU changed, or its
    unit went without `down --remove`): gigabytes of compiled kernels for nothing."""
    used = mounted_keys(c.unit for c in units)
    hits: list[HostHit] = []
    for scope, found in sorted(facts.engine_caches.items()):
        root = engine_cache_root(Scope(scope))
        for name, size in found:
            if name in used:
                continue
            held = f"{size / 2**30:.1f} GiB" if size is not None else "its size unknown"
            hits.append(HostHit(str(root / name), f"engine cache {root / name} ({held}) is mounted by no unit of "
                                                   f"the {scope} manager",
                                f"remove it: `rm -rf -- {root / name}` (a unit that needs it again rebuilds it)",
                                severity=Severity.WARN))
    return hits
