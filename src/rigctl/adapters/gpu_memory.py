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
    def _handles(self) -> list[tuple[str, str, Any]] | None:
        try:
            import pynvml  # noqa: PLC0415 - NVML is optional; only status and down ask for it

            pynvml.nvmlInit()
        except Exception:  # NVML absent or broken: GPU memory is then "n/a", not an error
            return None
        handles = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            handles.append((str(i), uuid if isinstance(uuid, str) else uuid.decode(), handle))
        return handles

    def _procs(self, handle: Any) -> list[Any]:
        import pynvml  # noqa: PLC0415 - see _handles

        procs: list[Any] = []
        for call in ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses"):
            try:
                procs.extend(getattr(pynvml, call)(handle))
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
