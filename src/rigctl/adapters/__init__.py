"""The outside systems rigctl drives, one module each, each a small ``Protocol`` plus the real class:
``systemd`` (systemctl), ``podman`` (the podman CLI), ``journal`` (journalctl), ``probe`` (HTTP readiness),
``clock`` (time and sleep), ``gpu_memory`` (NVML). Core code takes the Protocols; the CLI builds the real
ones; tests pass the fakes in ``tests/fakes.py``, which keep each Protocol's contract (a unit's state as
``systemctl show`` reports it)."""

from __future__ import annotations

from dataclasses import dataclass

from rigctl.adapters.clock import Clock, RealClock
from rigctl.adapters.gpu_memory import GpuMemory, NvmlGpuMemory
from rigctl.adapters.podman import Podman, PodmanCli
from rigctl.adapters.probe import HttpProbe, Probe
from rigctl.adapters.systemd import SystemctlCli, Systemd
from rigctl.places import Scope


@dataclass
class Adapters:
    """What `up` and `swap` talk to, passed in as one value."""

    systemd: Systemd
    podman: Podman
    probe: Probe
    clock: Clock
    gpu: GpuMemory


def real_adapters(scope: Scope, *, probe_timeout: float = 1.0) -> Adapters:
    """The real adapters for ``scope``; the caller closes ``probe`` when done."""
    return Adapters(systemd=SystemctlCli(scope), podman=PodmanCli(), probe=HttpProbe(timeout=probe_timeout),
                    clock=RealClock(), gpu=NvmlGpuMemory())
