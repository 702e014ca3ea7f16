"""Drift (#34): the host under a deployment against the facts it was planned on (``state.PlannedHost``), for
`status` and `doctor`. The host side is read cheaply here (the driver's /proc file, the kernel module's flavour,
the CDI specs: no NVML), so the driver's CUDA is compared only where a caller brings it."""

from __future__ import annotations

from collections.abc import Sequence

from rigctl.deploy.state import DeploymentRecord, PlannedHost, host_drift
from rigctl.host.cdi import CDI_DIRS, DRIVER_VERSION_FILE, nvidia_specs, probe_driver
from rigctl.host.probes import probe_cdi
from rigctl.host.stack import PROC_VERSION, read_kernel_module


def host_now(*, driver_file: str = DRIVER_VERSION_FILE, module_file: str = PROC_VERSION,
             cdi_dirs: Sequence[str] = CDI_DIRS) -> PlannedHost:
    """This host's side of the comparison, read now."""
    version, _ = probe_driver(driver_file)
    module = read_kernel_module(module_file)
    cdi = probe_cdi(version, cdi_dirs)
    versions = sorted({v for spec in nvidia_specs(cdi) for v in spec.driver_versions if v})
    return PlannedHost(driver_version=version, module_flavour=module.flavour, module_version=module.version,
                       cdi_driver_versions=versions)


def drift_of(record: DeploymentRecord | None, now: PlannedHost, image_digest: str | None = None) -> list[str] | None:
    """How the host differs from what ``record`` was planned on (``image_digest``: what runs now); None when
    the record keeps no planned facts (an older rigctl's, or none)."""
    if record is None or record.planned_on is None:
        return None
    return host_drift(record.planned_on, PlannedHost(
        driver_version=now.driver_version, cuda_version=now.cuda_version, module_flavour=now.module_flavour,
        module_version=now.module_version, cdi_driver_versions=now.cdi_driver_versions, image_digest=image_digest))
