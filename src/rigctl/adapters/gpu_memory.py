"""GPU memory held by processes, through NVML where the library is there: `status` shows what a service
holds, `down` and `swap` say whether its GPUs were released. No NVML is "unknown", never an error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol


class GpuMemory(Protocol):
    def used_by(self, pids: set[int]) -> int | None:
        """MiB used on all GPUs by these processes; None when it cannot be known (no NVML)."""
        ...

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        """Whether any process still holds memory on these GPUs; None when unknown."""
        ...


class NvmlGpuMemory:
    """NVML is loaded and started once per adapter, on first use (``swap`` asks ``busy`` every half second
    while it waits for the GPUs to be released), through ``host.nvml_lib``: a host without the driver learns it
    without importing pynvml."""

    def __init__(self) -> None:
        self._lib: Any = None
        self._devices: list[tuple[str, str, Any]] | None = None
        self._started = False

    def _handles(self) -> list[tuple[str, str, Any]] | None:
        """(index, UUID, handle) of every GPU; None where NVML cannot answer."""
        if self._started:
            return self._devices
        self._started = True
        from rigctl.host.nvml_lib import nvml_if_present  # noqa: PLC0415 - only status, down and swap ask

        lib: Any = nvml_if_present()
        if lib is None:
            return None
        try:
            lib.nvmlInit()
            devices = []
            for i in range(lib.nvmlDeviceGetCount()):
                handle = lib.nvmlDeviceGetHandleByIndex(i)
                uuid = lib.nvmlDeviceGetUUID(handle)
                devices.append((str(i), uuid if isinstance(uuid, str) else uuid.decode(), handle))
        except Exception:  # NVML absent or broken: GPU memory is then "n/a", not an error
            return None
        self._lib, self._devices = lib, devices
        return devices

    def _procs(self, handle: Any) -> list[Any]:
        procs: list[Any] = []
        for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs.extend(getattr(self._lib, call)(handle))
            except Exception:  # NotSupported on some boards; the other list may still answer
                continue
        return procs

    def used_by(self, pids: set[int]) -> int | None:
        handles = self._handles()
        if handles is None or not pids:
            return None
        total = 0
        for _, _, handle in handles:
            for proc in self._procs(handle):
                if proc.pid in pids and proc.usedGpuMemory:
                    total += int(proc.usedGpuMemory) // (1024 * 1024)
        return total

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        handles = self._handles()
        if handles is None:
            return None
        wanted = set(gpu_ids)
        return any(self._procs(h) for index, uuid, h in handles if index in wanted or uuid in wanted)
