"""GPU facts through NVML.

``NvmlLib`` (``host.nvml_lib``) is the slice of the pynvml module rigctl calls; the real adapter is the
module itself (nvidia-ml-py, imported lazily so that commands without GPUs never pay for it), and tests pass
``FakeNvml`` from ``tests/support/nvml_fake.py`` (not shipped), which answers with the same types and
raises the same exception classes. A call a device does not support is recorded in ``Gpu.unsupported``;
a missing library or driver makes ``GpuInventory(available=False, error=...)``, never an exception.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from rigctl.host import nvml_lib, procfs
from rigctl.host.facts import Gpu, GpuInventory, GpuPair, GpuProcess, NvLink, PowerLimits, Unsupported
from rigctl.host.nvml_lib import NvmlLib

T = TypeVar("T")

# nvidia-ml-py defines NVML_P2P_CAPS_INDEX_READ as ``0,`` (a tuple) in some releases; ctypes would pass
# that tuple's address. The C enum value is 0.
P2P_CAPS_INDEX_READ = 0
P2P_CAPS_INDEX_NVLINK = 2  # NVML_P2P_CAPS_INDEX_NVLINK
# NVML_NVLINK_MAX_LINKS in today's nvml.h. A device answers InvalidArgument past its own last link (link 18 on an
# H200, in the real two-H200 capture), so probing stops there.
NVLINK_MAX_LINKS = 36


ProcessNamer = Callable[[int], str | None]


def psutil_process_name(pid: int) -> str | None:
    """The process's name as psutil gives it: read from /proc (``procfs``), through psutil where there is
    no /proc. None: gone, in another PID namespace, or not ours to read."""
    if os.path.isdir(procfs.PROC):
        return procfs.process_name(pid)
    import psutil  # noqa: PLC0415 - lazy: only where /proc cannot answer

    try:
        return psutil.Process(pid).name()
    except (psutil.Error, OSError):
        return None


class _Recorder:
    def __init__(self, lib: NvmlLib) -> None:
        self.lib = lib
        self.unsupported: list[Unsupported] = []

    def call(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except self.lib.NVMLError as exc:
            self.unsupported.append(Unsupported(call=fn.__name__, error=type(exc).__name__, message=str(exc)))
            return None


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def probe_gpus(lib: NvmlLib | None = None, *, process_name: ProcessNamer = psutil_process_name) -> GpuInventory:
    """Every GPU fact NVML can give. Never raises for an NVML error."""
    if lib is None:
        if not nvml_lib.nvml_library_loads():
            return GpuInventory(available=False, error=nvml_lib.LIBRARY_NOT_FOUND)  # as nvmlInit() would have said
        loaded = nvml_lib.load_pynvml()
        if isinstance(loaded, str):
            return GpuInventory(available=False, error=loaded)
        lib = loaded
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        return GpuInventory(available=False, error=_error_text(exc))
    try:
        return _probe_initialised(lib, process_name)
    finally:
        with contextlib.suppress(lib.NVMLError):  # nothing to release if shutdown itself fails
            lib.nvmlShutdown()


def _probe_initialised(lib: NvmlLib, process_name: ProcessNamer) -> GpuInventory:
    rec = _Recorder(lib)
    driver = rec.call(lib.nvmlSystemGetDriverVersion)
    nvml_version = rec.call(lib.nvmlSystemGetNVMLVersion)
    cuda = rec.call(lib.nvmlSystemGetCudaDriverVersion)
    try:
        count = lib.nvmlDeviceGetCount()
    except lib.NVMLError as exc:
        return GpuInventory(available=False, error=_error_text(exc), driver_version=driver,
                            nvml_version=nvml_version, cuda_driver_version=cuda)
    devices: list[Gpu] = []
    handles: list[tuple[int, Any]] = []
    for index in range(count):
        try:
            handle = lib.nvmlDeviceGetHandleByIndex(index)
        except lib.NVMLError as exc:
            # A GPU that fell off the bus (NVMLError_GpuIsLost) must still be visible in the inventory.
            devices.append(Gpu(index=index, uuid="", name="(unreachable)", unsupported=[
                Unsupported(call="nvmlDeviceGetHandleByIndex", error=type(exc).__name__, message=str(exc))]))
            continue
        handles.append((index, handle))
        devices.append(_probe_device(lib, index, handle, process_name))
    nvlinks = {g.index: g.nvlink for g in devices}
    pairs = [_probe_pair(lib, (a, ha, nvlinks.get(a)), (b, hb, nvlinks.get(b)))
             for i, (a, ha) in enumerate(handles) for (b, hb) in handles[i + 1 :]]
    return GpuInventory(available=True, driver_version=driver, nvml_version=nvml_version,
                        cuda_driver_version=cuda, devices=devices, pairs=pairs)


def _probe_device(lib: NvmlLib, index: int, handle: Any, process_name: ProcessNamer) -> Gpu:
    rec = _Recorder(lib)
    c = rec.call
    pci = c(lib.nvmlDeviceGetPciInfo, handle)
    mem = c(lib.nvmlDeviceGetMemoryInfo, handle)
    cc = c(lib.nvmlDeviceGetCudaComputeCapability, handle)
    constraints = c(lib.nvmlDeviceGetPowerManagementLimitConstraints, handle)
    ecc = c(lib.nvmlDeviceGetEccMode, handle)
    mig = c(lib.nvmlDeviceGetMigMode, handle)
    persistence = c(lib.nvmlDeviceGetPersistenceMode, handle)
    processes: list[GpuProcess] = []
    sources: tuple[tuple[Literal["compute", "graphics"], Callable[[Any], list[Any]]], ...] = (
        ("compute", lib.nvmlDeviceGetComputeRunningProcesses),
        ("graphics", lib.nvmlDeviceGetGraphicsRunningProcesses),
    )
    for kind, fn in sources:
        for proc in c(fn, handle) or []:
            pid = int(proc.pid)
            if any(p.pid == pid for p in processes):
                continue  # a process with both contexts is listed once
            used = getattr(proc, "usedGpuMemory", None)
            processes.append(GpuProcess(pid=pid, used_memory_bytes=None if used is None else int(used),
                                        name=process_name(pid), kind=kind))
    pci_device_id = pci_vendor_id = None
    bus_id = None
    if pci is not None:
        raw = int(pci.pciDeviceId)
        pci_device_id, pci_vendor_id = raw >> 16, raw & 0xFFFF
        bus_id = str(pci.busId)
    return Gpu(
        index=index,
        uuid=c(lib.nvmlDeviceGetUUID, handle) or "",
        name=c(lib.nvmlDeviceGetName, handle) or "(unknown)",
        pci_bus_id=bus_id,
        pci_device_id=pci_device_id,
        pci_vendor_id=pci_vendor_id,
        memory_total_bytes=None if mem is None else int(mem.total),
        memory_free_bytes=None if mem is None else int(mem.free),
        memory_used_bytes=None if mem is None else int(mem.used),
        compute_capability=None if cc is None else f"{cc[0]}.{cc[1]}",
        architecture=c(lib.nvmlDeviceGetArchitecture, handle),
        power=PowerLimits(
            current_mw=c(lib.nvmlDeviceGetPowerManagementLimit, handle),
            enforced_mw=c(lib.nvmlDeviceGetEnforcedPowerLimit, handle),
            default_mw=c(lib.nvmlDeviceGetPowerManagementDefaultLimit, handle),
            min_mw=None if constraints is None else int(constraints[0]),
            max_mw=None if constraints is None else int(constraints[1]),
        ),
        persistence_mode=None if persistence is None else bool(persistence),
        ecc_enabled=None if ecc is None else bool(ecc[0]),
        mig_enabled=None if mig is None else bool(mig[0]),
        mig_pending=None if mig is None else bool(mig[1]),
        compute_mode=c(lib.nvmlDeviceGetComputeMode, handle),
        pcie_generation=c(lib.nvmlDeviceGetCurrPcieLinkGeneration, handle),
        pcie_generation_max=c(lib.nvmlDeviceGetMaxPcieLinkGeneration, handle),
        pcie_width=c(lib.nvmlDeviceGetCurrPcieLinkWidth, handle),
        pcie_width_max=c(lib.nvmlDeviceGetMaxPcieLinkWidth, handle),
        numa_node=c(lib.nvmlDeviceGetNumaNodeId, handle),
        nvlink=_probe_nvlink(lib, handle, rec),
        processes=processes,
        unsupported=rec.unsupported,
    )


def _probe_nvlink(lib: NvmlLib, handle: Any, rec: _Recorder) -> NvLink | None:
    """Count the links that are up. A card without NVLink answers NotSupported for link 0: that is the
    answer, not an unsupported call worth listing, so it is kept out of ``Gpu.unsupported``. Any other error
    is recorded there; on link 0 it leaves the NVLink facts unknown (None)."""
    active = inactive = 0
    first_active: int | None = None
    for link in range(NVLINK_MAX_LINKS):
        try:
            state = lib.nvmlDeviceGetNvLinkState(handle, link)
        except lib.NVMLError as exc:
            error = type(exc).__name__
            if link == 0 and error in {"NVMLError_NotSupported", "NVMLError_InvalidArgument"}:
                return NvLink(supported=False)
            if error == "NVMLError_InvalidArgument":
                break  # past the device's last link: the normal end
            rec.unsupported.append(Unsupported(call="nvmlDeviceGetNvLinkState", error=error,
                                               message=f"link {link}: {exc}"))
            if link == 0:
                return None
            break
        if state:
            active += 1
            first_active = link if first_active is None else first_active
        else:
            inactive += 1
    version = None if first_active is None else rec.call(lib.nvmlDeviceGetNvLinkVersion, handle, first_active)
    return NvLink(supported=True, active=active, inactive=inactive, version=version)


Probed = tuple[int, Any, NvLink | None]  # index, handle, its NVLink facts


def _probe_pair(lib: NvmlLib, first: Probed, second: Probed) -> GpuPair:
    """P2P, common ancestor and the joining link. NVLink only when both GPUs have links up AND the driver
    says NVLink P2P works between these two (a GPU bridged to another one is not joined to this one)."""
    (a, ha, la), (b, hb, lb) = first, second
    rec = _Recorder(lib)
    p2p_read = rec.call(lib.nvmlDeviceGetP2PStatus, ha, hb, P2P_CAPS_INDEX_READ)
    topology = rec.call(lib.nvmlDeviceGetTopologyCommonAncestor, ha, hb)
    p2p_nvlink: int | None = None
    link: Literal["nvlink", "pcie"] | None = None
    links = version = None
    if la is not None and lb is not None:
        if la.active and lb.active:
            p2p_nvlink = rec.call(lib.nvmlDeviceGetP2PStatus, ha, hb, P2P_CAPS_INDEX_NVLINK)
            if p2p_nvlink == 0:
                # Every active link of a directly bridged pair goes to the peer (NV18 on the H200 pair), and on an
                # NVSwitch box every link reaches every peer; a mesh that splits a GPU's links between several
                # peers would need nvmlDeviceGetNvLinkRemotePciInfo, which no capture here shows answering.
                link, links = "nvlink", min(la.active, lb.active)
                versions = [v for v in (la.version, lb.version) if v is not None]
                version = min(versions) if versions else None
            elif p2p_nvlink is not None:
                link = "pcie"
        else:
            link = "pcie"
    return GpuPair(a=a, b=b, p2p_read=p2p_read, topology=topology, p2p_nvlink=p2p_nvlink, link=link,
                   nvlink_links=links, nvlink_version=version, unsupported=rec.unsupported)
