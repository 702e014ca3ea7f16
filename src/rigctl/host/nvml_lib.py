"""Loading NVML: the ``NvmlLib`` protocol (the slice of pynvml rigctl calls), whether the driver's library
is there, and pynvml itself. No pydantic and no facts models here, so that a command can start NVML on a
thread of its own (``host.early``) while the rest of rigctl loads.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Protocol


class NvmlLib(Protocol):
    """The pynvml functions rigctl uses. Handles are opaque."""

    NVMLError: type[Exception]

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlSystemGetNVMLVersion(self) -> str: ...
    def nvmlSystemGetCudaDriverVersion(self) -> int: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any: ...
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]: ...
    def nvmlDeviceGetArchitecture(self, handle: Any) -> int: ...
    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int: ...
    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]: ...
    def nvmlDeviceGetPersistenceMode(self, handle: Any) -> int: ...
    def nvmlDeviceGetEccMode(self, handle: Any) -> list[int]: ...
    def nvmlDeviceGetMigMode(self, handle: Any) -> list[int]: ...
    def nvmlDeviceGetComputeMode(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int: ...
    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: Any) -> list[Any]: ...
    def nvmlDeviceGetP2PStatus(self, a: Any, b: Any, index: int) -> int: ...
    def nvmlDeviceGetTopologyCommonAncestor(self, a: Any, b: Any) -> int: ...
    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkVersion(self, handle: Any, link: int) -> int: ...


# The shared library pynvml loads on Linux, and what its nvmlInit() raises when that fails to load
NVML_LIBRARY = "libnvidia-ml.so.1"
LIBRARY_NOT_FOUND = "NVMLError_LibraryNotFound: NVML Shared Library Not Found"


def nvml_library_loads() -> bool:
    """Whether pynvml's nvmlInit() can load the NVML library: the same dlopen of the same name (the handle
    stays loaded, so pynvml's own load finds it). pynvml and ctypes.util cost tens of milliseconds to
    import, so a host without the driver learns it has no GPUs without them."""
    if not sys.platform.startswith("linux"):
        return True  # pynvml looks elsewhere on other systems: let it say
    try:  # ctypes.CDLL(name) is this call (mode 0: RTLD_NOW | RTLD_LOCAL) after building all of ctypes' types
        from _ctypes import dlopen  # noqa: PLC0415 - lazy: only a GPU probe
    except ImportError:  # pragma: no cover - CPython on Linux has it
        return True
    try:
        dlopen(NVML_LIBRARY, 0)
    except OSError:
        return False
    return True


def load_pynvml() -> NvmlLib | str:
    """The real library, or why it cannot be imported."""
    try:
        import pynvml  # noqa: PLC0415 - lazy: loading NVML costs time, and commands without GPUs skip it
    except ImportError as exc:  # pragma: no cover - nvidia-ml-py is a dependency
        return f"nvidia-ml-py is not installed ({exc})"
    lib: NvmlLib = pynvml
    return lib


def nvml_if_present() -> NvmlLib | None:
    """The real library where the NVML library loads and pynvml imports, else None (no GPUs to ask)."""
    if not nvml_library_loads():
        return None
    lib = load_pynvml()
    return None if isinstance(lib, str) else lib


def cuda_version_text(value: int) -> str:
    """NVML's CUDA driver version as CUDA names it: 13000 -> "13.0", 12080 -> "12.8"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


CUDA_READ_TIMEOUT_S = 5.0  # nvmlInit on a healthy box takes tens of milliseconds; a wedged driver can hang it


def read_cuda_version(lib: NvmlLib | None = None, *, timeout_s: float = CUDA_READ_TIMEOUT_S) -> str | None:
    """The driver's CUDA version alone (init, one call, shutdown), for a command that reads the host without
    the rest of NVML (doctor's drift). On a daemon thread given ``timeout_s``, so a driver that does not answer
    costs that long and no more; None when NVML is absent, fails or is late."""
    found: list[str] = []

    def ask() -> None:
        nvml = lib if lib is not None else nvml_if_present()
        if nvml is None:
            return
        try:
            nvml.nvmlInit()
        except Exception:  # no driver, no devices, no permission: unknown, not an error
            return
        try:
            found.append(cuda_version_text(int(nvml.nvmlSystemGetCudaDriverVersion())))
        except Exception:  # an old driver without the call, or one that fails it
            return
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()

    worker = threading.Thread(target=ask, name="rigctl-nvml-cuda", daemon=True)
    worker.start()
    worker.join(timeout_s)
    return found[0] if found else None  # an answer given before a slow shutdown still counts
