"""Host facts: everything preflight needs to know about a box, gathered once, as one versioned document.

The document round-trips through JSON (``rigctl inventory --json``), so a capture from a GPU box can be
replayed anywhere with ``--inventory FILE``: checks are pure functions of (recipe, facts) and never read
the host themselves. Every probe that could not answer says so inside the document (``error`` fields,
``unsupported`` NVML calls) instead of failing the whole inventory.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

FACTS_SCHEMA = "1"  # the "rigctl" key of the document; bump on incompatible changes

MIB = 1024 * 1024
GIB = 1024 * MIB


class _Fact(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --- GPUs (NVML) -----------------------------------------------------------------------------------


class Unsupported(_Fact):
    """An NVML call that raised for this device: recorded, not fatal."""

    call: str
    error: str = Field(description="the pynvml exception class, e.g. NVMLError_NotSupported")
    message: str = ""


class GpuProcess(_Fact):
    pid: int
    used_memory_bytes: int | None = None
    name: str | None = Field(default=None, description="process name via psutil; None when not visible here")
    kind: Literal["compute", "graphics"] = "compute"


class PowerLimits(_Fact):
    """Milliwatts, as NVML reports them."""

    current_mw: int | None = None
    enforced_mw: int | None = None
    default_mw: int | None = None
    min_mw: int | None = None
    max_mw: int | None = None


class Gpu(_Fact):
    index: int
    uuid: str
    name: str
    pci_bus_id: str | None = None
    pci_device_id: int | None = Field(default=None, description="16-bit PCI device id, e.g. 0x2BB1")
    pci_vendor_id: int | None = None
    memory_total_bytes: int | None = None
    memory_free_bytes: int | None = None
    memory_used_bytes: int | None = None
    compute_capability: str | None = Field(default=None, description='"major.minor", e.g. "12.0"')
    architecture: int | None = Field(default=None, description="NVML architecture enum (10 = Blackwell)")
    power: PowerLimits = Field(default_factory=PowerLimits)
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    compute_mode: int | None = None
    pcie_generation: int | None = None
    pcie_generation_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    numa_node: int | None = None
    processes: list[GpuProcess] = Field(default_factory=list)
    unsupported: list[Unsupported] = Field(default_factory=list)

    @property
    def memory_total_mib(self) -> int | None:
        return None if self.memory_total_bytes is None else self.memory_total_bytes // MIB

    @property
    def memory_used_mib(self) -> int | None:
        return None if self.memory_used_bytes is None else self.memory_used_bytes // MIB

    @property
    def pci_device_hex(self) -> str | None:
        return None if self.pci_device_id is None else f"0x{self.pci_device_id:04X}"


P2P_STATUS_NAMES = {
    0: "ok",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "IOH topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}

TOPOLOGY_NAMES = {
    0: "same board",  # NVML_TOPOLOGY_INTERNAL
    10: "single PCIe switch",  # NVML_TOPOLOGY_SINGLE
    20: "multiple PCIe switches",  # NVML_TOPOLOGY_MULTIPLE
    30: "same PCIe host bridge",  # NVML_TOPOLOGY_HOSTBRIDGE
    40: "same NUMA node (across host bridges)",  # NVML_TOPOLOGY_NODE
    50: "across NUMA nodes (SMP interconnect)",  # NVML_TOPOLOGY_SYSTEM
}


class GpuPair(_Fact):
    """P2P read status (nvmlDeviceGetP2PStatus, READ) and the closest common ancestor of two GPUs."""

    a: int
    b: int
    p2p_read: int | None = Field(default=None, description="NVML_P2P_STATUS_*; 0 is OK")
    topology: int | None = Field(default=None, description="NVML_TOPOLOGY_*; smaller is closer")
    unsupported: list[Unsupported] = Field(default_factory=list)

    @property
    def p2p_ok(self) -> bool | None:
        return None if self.p2p_read is None else self.p2p_read == 0

    @property
    def p2p_text(self) -> str:
        if self.p2p_read is None:
            return "unknown (call not supported)"
        return P2P_STATUS_NAMES.get(self.p2p_read, f"status {self.p2p_read}")

    @property
    def topology_text(self) -> str:
        if self.topology is None:
            return "unknown"
        return TOPOLOGY_NAMES.get(self.topology, f"level {self.topology}")


class GpuInventory(_Fact):
    available: bool = Field(description="NVML initialised; False means no library or no driver")
    error: str | None = Field(default=None, description="why NVML is unavailable, e.g. NVMLError_LibraryNotFound")
    driver_version: str | None = None
    nvml_version: str | None = None
    cuda_driver_version: int | None = Field(default=None, description="e.g. 13000 for CUDA 13.0")
    devices: list[Gpu] = Field(default_factory=list)
    pairs: list[GpuPair] = Field(default_factory=list)

    @property
    def cuda_version(self) -> str | None:
        v = self.cuda_driver_version
        return None if v is None else f"{v // 1000}.{(v % 1000) // 10}"

    def pair(self, a: int, b: int) -> GpuPair | None:
        lo, hi = min(a, b), max(a, b)
        return next((p for p in self.pairs if p.a == lo and p.b == hi), None)


# --- files, disks, shm -----------------------------------------------------------------------------


class FileEntry(_Fact):
    name: str
    size: int
    mtime_ns: int


class PathProbe(_Fact):
    """A path preflight cares about (a checkpoint directory, a cache): whether it exists, the free space
    of the file system it lives on (or would live on), and for a directory its top-level files."""

    path: str
    exists: bool
    is_dir: bool = False
    probed: str | None = Field(default=None, description="the nearest existing ancestor used for disk space")
    free_bytes: int | None = None
    total_bytes: int | None = None
    files: list[FileEntry] | None = None
    files_truncated: bool = False
    error: str | None = None

    def file(self, name: str) -> FileEntry | None:
        return next((f for f in self.files or () if f.name == name), None)


class Shm(_Fact):
    path: str = "/dev/shm"
    total_bytes: int | None = None
    free_bytes: int | None = None
    error: str | None = None


# --- podman, CDI, systemd, ports, licenses ---------------------------------------------------------


class PodmanImage(_Fact):
    id: str
    digest: str | None = None
    repo_digests: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)


class Podman(_Fact):
    installed: bool
    version: str | None = None
    api_socket: str | None = None
    api_ok: bool = False
    quadlet: str | None = Field(default=None, description="the quadlet generator binary, if one is installed")
    images_via: Literal["api", "cli", "none"] = "none"
    images: list[PodmanImage] = Field(default_factory=list)
    error: str | None = None


class CdiSpec(_Fact):
    path: str
    kind: str | None = None
    devices: list[str] = Field(default_factory=list, description="device names: indices, UUIDs, all")
    mtime_ns: int | None = None
    driver_versions: list[str] = Field(
        default_factory=list, description="driver versions named inside the spec (library file suffixes)"
    )
    error: str | None = None


class Cdi(_Fact):
    dirs: list[str] = Field(default_factory=list)
    specs: list[CdiSpec] = Field(default_factory=list)
    driver_library: str | None = Field(default=None, description="libnvidia-ml.so.<driver version> found on disk")
    driver_installed_ns: int | None = Field(default=None, description="mtime of that library: the install time")


class Systemd(_Fact):
    system_manager: bool
    user_manager: bool
    user: str | None = None
    uid: int | None = None
    linger: bool | None = None
    error: str | None = None


class Listener(_Fact):
    address: str
    port: int
    pid: int | None = None
    process: str | None = None


class Ports(_Fact):
    listening: list[Listener] = Field(default_factory=list)
    error: str | None = None

    def holder(self, port: int, address: str = "127.0.0.1") -> Listener | None:
        """The listener that would collide with publishing ``address:port``."""
        wildcard = {"0.0.0.0", "::", "*", ""}
        for lis in self.listening:
            if lis.port != port:
                continue
            if address in wildcard or lis.address in wildcard or lis.address == address:
                return lis
        return None


class LicenseAcceptance(_Fact):
    id: str
    accepted_at: str
    by: str
    recipe: str | None = None


# --- the document ----------------------------------------------------------------------------------


class HostFacts(_Fact):
    rigctl: Literal["1"] = "1"  # FACTS_SCHEMA
    hostname: str = ""
    captured_at: str = ""
    cpu_count: int | None = None
    gpu: GpuInventory
    shm: Shm = Field(default_factory=Shm)
    paths: list[PathProbe] = Field(default_factory=list)
    podman: Podman = Field(default_factory=lambda: Podman(installed=False))
    cdi: Cdi = Field(default_factory=Cdi)
    systemd: Systemd = Field(default_factory=lambda: Systemd(system_manager=False, user_manager=False))
    ports: Ports = Field(default_factory=Ports)
    licenses: list[LicenseAcceptance] = Field(default_factory=list)
    probe_errors: dict[str, str] = Field(
        default_factory=dict, description="probes that crashed, by section: the rest of the document is valid"
    )

    def path(self, path: str) -> PathProbe | None:
        return next((p for p in self.paths if p.path == path), None)

    def with_licenses(self, extra: list[LicenseAcceptance]) -> HostFacts:
        known = {lic.id for lic in self.licenses}
        return self.model_copy(update={"licenses": [*self.licenses, *(x for x in extra if x.id not in known)]})
