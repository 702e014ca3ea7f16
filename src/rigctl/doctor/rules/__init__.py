"""Every rule doctor runs, in the order its findings are reported. A new rule is one function (in the
module of its kind, see ``context`` for what it gets and returns) plus one entry here; its id is stable
(kebab-case: scripts and ``fleet doctor`` read it), its severity the default a hit may lower."""

from __future__ import annotations

from rigctl.doctor.rules import container, credentials, exposure, host, live, service
from rigctl.doctor.rules.context import HostRule, UnitRule
from rigctl.severity import Severity

FAIL = Severity.FAIL  # every rule's default; a hit may lower it

UNIT_RULES: tuple[UnitRule, ...] = (
    UnitRule("restart-not-always", FAIL, "Restart= weaker than always", service.restart),
    UnitRule("ipc-host-with-shm-size", FAIL, "--ipc=host with an explicit shm size", container.ipc_shm),
    UnitRule("notify-healthy-short-timeout", FAIL, "Notify=healthy with a start timeout shorter than a warmup",
             service.notify_timeout),
    UnitRule("podman-restart-policy", FAIL, "podman's own --restart inside a systemd unit", service.podman_restart),
    UnitRule("image-not-pinned", FAIL, "image not pinned by digest", container.image_pinned),
    UnitRule("published-without-auth", FAIL, "published on a non-loopback address without auth", exposure.published),
    UnitRule("secret-in-unit", Severity.WARN, "a credential-looking value written in clear into the unit",
             credentials.in_clear),
    UnitRule("unit-failed", FAIL, "the service is failed: systemd will not start it again", live.failed),
    UnitRule("unit-restarting", FAIL, "the service's engine died and systemd is restarting it", live.restarting),
    UnitRule("unit-needs-daemon-reload", FAIL, "its files changed since the manager read them (NeedDaemonReload)",
             live.needs_reload),
)

HOST_RULES: tuple[HostRule, ...] = (
    HostRule("cdi-spec-stale", FAIL, "a CDI spec generated for another driver than the loaded one", host.cdi_stale),
    HostRule("cdi-spec-missing", FAIL, "units use CDI GPUs but there is no NVIDIA CDI spec", host.cdi_missing),
    HostRule("quadlet-missing", FAIL, ".container units but no quadlet generator for their manager",
             host.quadlet_missing),
)

REGISTRY: tuple[UnitRule | HostRule, ...] = (*UNIT_RULES, *HOST_RULES)
