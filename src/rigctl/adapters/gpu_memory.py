"""GPU memory held by processes, through NVML where the library is there: `status` shows what a service
holds, `down` and `swap` say whether its GPUs were released. No NVML is "unknown", never an error."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from rigctl.host.facts import Gpu
    from rigctl.host.nvml_lib import NvmlLib


class GpuMemory(Protocol):
    def used_by(self, pids: set[int]) -> int | None:
        """MiB used on all GPUs by these processes; None when it cannot be known (no NVML)."""
        ...

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        """Whether any process still holds memory on these GPUs; None when unknown."""
        ...

    def devices(self, gpu_ids: Sequence[str]) -> list[Gpu] | None:
        """These GPUs (by index or UUID; every GPU when empty) as NVML sees them now: total, free and used
        memory, and each process holding some (pid, bytes where NVML can say, name where /proc shows it).
        None when it cannot be known (no NVML, or NVML failed)."""
        ...

    def cuda_version(self) -> str | None:
        """The driver's CUDA version ("13.0"), for drift; None when it cannot be known (no NVML)."""
        ...


class NvmlGpuMemory:
    """NVML is loaded and started once per adapter, on first use (``swap`` asks ``busy`` every half second
    while it waits for the GPUs to be released), through ``host.nvml_lib``: a host without the driver learns it
    without importing pynvml."""

    def __init__(self, lib: NvmlLib | None = None) -> None:
        """``lib``: the NVML module to use (tests give a fake); default the real one, where it loads."""
        self._given = lib
        self._lib: Any = None
        self._devices: list[tuple[str, str, Any]] | None = None
        self._names: dict[str, str] = {}
        self._started = False
        self._cuda: str | None = None
        self._cuda_asked = False

    def _handles(self) -> list[tuple[str, str, Any]] | None:
        """(index, UUID, handle) of every GPU; None where NVML cannot answer."""
        if self._started:
            return self._devices
        self._started = True
        from rigctl.host.nvml_lib import nvml_if_present  # noqa: PLC0415 - only status, down and swap ask

        lib: Any = self._given if self._given is not None else nvml_if_present()
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

    def cuda_version(self) -> str | None:
        if not self._cuda_asked:
            self._cuda_asked = True
            if self._handles() is not None:  # the one start status already pays for its memory figures
                from rigctl.host.nvml_lib import cuda_version_text  # noqa: PLC0415

                try:
                    self._cuda = cuda_version_text(int(self._lib.nvmlSystemGetCudaDriverVersion()))
                except Exception:  # an old driver without the call: unknown, as without NVML
                    self._cuda = None
        return self._cuda

    def devices(self, gpu_ids: Sequence[str]) -> list[Gpu] | None:
        from rigctl.host.facts import Gpu, GpuProcess  # noqa: PLC0415 - pydantic only once swap or status asks
        from rigctl.host.procfs import process_name  # noqa: PLC0415

        handles = self._handles()
        if handles is None:
            return None
        wanted = set(gpu_ids)
        out: list[Gpu] = []
        try:
            for index, uuid, handle in handles:
                if wanted and index not in wanted and uuid not in wanted:
                    continue
                if index not in self._names:
                    name = self._lib.nvmlDeviceGetName(handle)
                    self._names[index] = name if isinstance(name, str) else name.decode()
                mem = self._lib.nvmlDeviceGetMemoryInfo(handle)
                procs: dict[int, GpuProcess] = {}
                for proc in self._procs(handle):
                    pid, used = int(proc.pid), proc.usedGpuMemory
                    if pid not in procs:  # a process with compute and graphics contexts is listed once
                        procs[pid] = GpuProcess(pid=pid, used_memory_bytes=None if used is None else int(used),
                                                name=process_name(pid))
                out.append(Gpu(index=int(index), uuid=uuid, name=self._names[index],
                               memory_total_bytes=int(mem.total), memory_free_bytes=int(mem.free),
                               memory_used_bytes=int(mem.used), processes=list(procs.values())))
        except Exception:  # NVML failed mid-way (a GPU fell off the bus, the driver was reloaded): unknown
            return None
        return out
