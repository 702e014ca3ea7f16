"""Drift (#34): the host under a deployment against the facts it was planned on (``state.PlannedHost``), for
`status` and `doctor`. The host side is read cheaply here (the driver's /proc file, the kernel module's flavour,
the CDI specs); the driver's CUDA comes from NVML, which the caller opens or already holds (status's GPU memory
adapter, doctor's bounded read). A planned fact the host cannot say now is named as not compared, never as
drift."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from rigctl.deploy.state import DeploymentRecord, PlannedHost, host_drift
from rigctl.host.cdi import CDI_DIRS, DRIVER_VERSION_FILE, nvidia_specs, probe_driver
from rigctl.host.probes import probe_cdi
from rigctl.host.stack import PROC_VERSION, read_kernel_module

CUDA_NOT_COMPARED = "the driver's CUDA not compared: NVML unavailable"


@dataclass(frozen=True)
class Drift:
    changes: list[str]  # how the host differs, one phrase each; [] when it does not
    not_compared: list[str] = field(default_factory=list)  # planned facts this host could not say now


def host_now(*, driver_file: str = DRIVER_VERSION_FILE, module_file: str = PROC_VERSION,
             cdi_dirs: Sequence[str] = CDI_DIRS, cuda_version: str | None = None) -> PlannedHost:
    """This host's side of the comparison, read now; ``cuda_version``: the driver's, where NVML said it."""
    version, _ = probe_driver(driver_file)
    module = read_kernel_module(module_file)
    cdi = probe_cdi(version, cdi_dirs)
    versions = sorted({v for spec in nvidia_specs(cdi) for v in spec.driver_versions if v})
    return PlannedHost(driver_version=version, cuda_version=cuda_version, module_flavour=module.flavour,
                       module_version=module.version, cdi_driver_versions=versions)


def wants_cuda(planned: PlannedHost | None) -> bool:
    """Whether comparing with ``planned`` needs the driver's CUDA (and so NVML): only where it was recorded."""
    return planned is not None and planned.cuda_version is not None


def not_compared(planned: PlannedHost, now: PlannedHost) -> list[str]:
    """The planned facts ``now`` lacks because NVML did not answer (the others are read from files: a file
    that is missing is itself a change, and host_drift says so where it matters)."""
    return [CUDA_NOT_COMPARED] if planned.cuda_version is not None and now.cuda_version is None else []


def compare(record: DeploymentRecord | None, now: PlannedHost, image_digest: str | None = None) -> Drift | None:
    """How the host differs from what ``record`` was planned on (``image_digest``: what runs now), and what
    could not be compared; None when the record keeps no planned facts (an older rigctl's, or none)."""
    if record is None or record.planned_on is None:
        return None
    planned = record.planned_on
    changes = host_drift(planned, PlannedHost(
        driver_version=now.driver_version, cuda_version=now.cuda_version, module_flavour=now.module_flavour,
        module_version=now.module_version, cdi_driver_versions=now.cdi_driver_versions, image_digest=image_digest))
    return Drift(changes, not_compared(planned, now))


def drift_of(record: DeploymentRecord | None, now: PlannedHost, image_digest: str | None = None) -> list[str] | None:
    """``compare``'s changes alone."""
    found = compare(record, now, image_digest)
    return None if found is None else found.changes
