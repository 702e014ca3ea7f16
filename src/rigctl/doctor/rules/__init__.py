"""Every rule doctor runs, in the order its findings are reported. A new rule is one function (in the
module of its kind, see ``context`` for what it gets and returns) plus one entry here; its id is stable
(kebab-case: scripts and ``fleet doctor`` read it), its severity the default a hit may lower."""

from __future__ import annotations

from rigctl.doctor.rules import canary, container, credentials, exposure, host, live, service
from rigctl.doctor.rules.context import HostRule, UnitRule
from rigctl.severity import Severity

FAIL = Severity.FAIL  # every rule's default; a hit may lower it

UNIT_RULES: tuple[UnitRule, ...] = (
    UnitRule("restart-not-always", FAIL, "Restart= weaker than always", service.restart,
             "vLLM's API server exits 0 when its engine dies, and systemd restarts a clean exit only under "
             "Restart=always: with on-failure or none the model stays down and nothing says so"),
    UnitRule("ipc-host-with-shm-size", FAIL, "--ipc=host with an explicit shm size", container.ipc_shm,
             "podman refuses host IPC together with a shm size of its own: the container fails on every start, "
             "and the unit with it"),
    UnitRule("notify-healthy-short-timeout", FAIL, "Notify=healthy with a start timeout shorter than a warmup",
             service.notify_timeout,
             "with Notify=healthy the unit is starting until the engine's health check passes, minutes into a "
             "warmup; a shorter start timeout makes systemd kill every boot before it serves"),
    UnitRule("podman-restart-policy", FAIL, "podman's own --restart inside a systemd unit", service.podman_restart,
             "systemd owns the restarts of the container it runs; podman restarting it as well competes with "
             "systemd for the same container, and with the --rm quadlet adds"),
    UnitRule("image-not-pinned", FAIL, "image not pinned by digest", container.image_pinned,
             "a tag names whatever was pushed last: a re-pull, or a pull on another box, brings a different "
             "engine build under the same name, and the model changes without a deploy"),
    UnitRule("published-without-auth", FAIL, "published on a non-loopback address without auth", exposure.published,
             "a port published beyond loopback with no key configured is an open model: anyone who reaches the "
             "host can use it, and its GPUs"),
    UnitRule("secret-in-unit", Severity.WARN, "a credential-looking value written in clear into the unit",
             credentials.in_clear,
             "unit files are read by more than the service (`systemctl cat`, backups, support bundles, other "
             "users where the file is readable): a credential written in one leaks with it"),
    UnitRule("unit-failed", FAIL, "the service is failed: systemd will not start it again", live.failed,
             "a failed unit stays down until someone starts it again: the model serves nothing meanwhile"),
    UnitRule("unit-restarting", FAIL, "the service's engine died and systemd is restarting it", live.restarting,
             "between starts the model serves nothing, and each start repeats the whole warmup; the engine's "
             "log says why it died"),
    UnitRule("unit-needs-daemon-reload", FAIL, "its files changed since the manager read them (NeedDaemonReload)",
             live.needs_reload,
             "the manager runs a unit as it last read it: an edit or a fix takes effect only after a "
             "daemon-reload, and until then the file does not say what runs"),
    UnitRule("canary-failing", FAIL, "its canary fails, cannot be read, or no longer runs (stale)", canary.failing,
             "a model can serve word salad with /health 200, and a canary that stopped running (its recipe or "
             "interpreter gone) proves nothing while its last pass still shows"),
)

HOST_RULES: tuple[HostRule, ...] = (
    HostRule("cdi-spec-stale", FAIL, "a CDI spec generated for another driver than the loaded one", host.cdi_stale,
             "a CDI spec made for another driver names libraries that are no longer there: podman cannot add "
             "the GPUs and the container does not start"),
    HostRule("cdi-spec-missing", FAIL, "units use CDI GPUs but there is no NVIDIA CDI spec", host.cdi_missing,
             "the units name their GPUs through CDI; without an NVIDIA spec podman cannot resolve those names "
             "and the container fails at its start"),
    HostRule("quadlet-missing", FAIL, ".container units but no quadlet generator for their manager",
             host.quadlet_missing,
             "a .container file does nothing without the quadlet generator: systemd never sees a service for "
             "it, and nothing says so (Debian 12's podman 4.3 ships none)"),
    HostRule("engine-cache-orphan", Severity.WARN, "an engine cache directory no unit mounts",
             host.engine_cache_orphan,
             "each image and GPU gets its own cache of compiled kernels (often gigabytes); one whose unit changed "
             "image or went without `down --remove` is kept by nothing and never cleaned"),
    HostRule("host-drift", Severity.WARN, "the host changed under a deployment since it was planned",
             host.host_drift,
             "a driver upgraded, a kernel module swapped or a CDI spec left for an older driver under a running "
             "engine shows only at its next restart, as a container that does not start or an engine that fails "
             "at its first kernel"),
)

REGISTRY: tuple[UnitRule | HostRule, ...] = (*UNIT_RULES, *HOST_RULES)
