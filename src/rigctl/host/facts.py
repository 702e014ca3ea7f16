"""Host facts: everything preflight needs to know about a box, gathered once, as one versioned document.

The document round-trips through JSON (``rigctl inventory --json``), so a capture from a GPU box can be
replayed anywhere with ``--inventory FILE``: checks are pure functions of (recipe, facts) and never read
the host themselves. Every probe that could not answer says so inside the document (``error`` fields,
``unsupported`` NVML calls) instead of failing the whole inventory.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, NonNegativeInt, model_validator

from rigctl.host.nvml_lib import cuda_version_text
from rigctl.places import Scope
from rigctl.podman_versions import Version, find_version
from rigctl.util.fields import empty_list
from rigctl.util.publish import every_address, same_address

FACTS_SCHEMA = "1"  # the "rigctl" key of the document; bump on incompatible changes

MIB = 1024 * 1024
GIB = 1024 * MIB


# A captured inventory is input like any other file: every string is bounded (a 100 KB GPU name made
# preflight's table take 42 s) and every quantity that cannot be negative is refused when it is (a
# negative "memory used" read as an idle GPU). Identities are refused when too long; free text from
# probes (errors, process names a local user can choose) is clipped instead, so a live gather never
# fails on them. Control characters are left to the views, which show them escaped.
NAME_MAX = 256
PATH_MAX = 4096
TEXT_MAX = 2048


def _clipper(most: int) -> BeforeValidator:
    def clip(value: object) -> object:
        return value[: most - 1] + "…" if isinstance(value, str) and len(value) > most else value

    return BeforeValidator(clip)


Name = Annotated[str, Field(max_length=NAME_MAX)]  # names, ids, versions: refused when longer
LongName = Annotated[str, Field(max_length=PATH_MAX)]  # paths, image references
Text = Annotated[str, _clipper(TEXT_MAX)]  # an error or message: clipped
ProcessName = Annotated[str, _clipper(NAME_MAX)]  # chosen by whoever runs the process: clipped
Count = NonNegativeInt
GpuUuid = Annotated[str, Field(pattern=r"^((GPU|MIG)-[A-Za-z0-9-]{1,96})?$")]  # "" when NVML could not say
Port = Annotated[int, Field(ge=0, le=65535)]


def _unique(kind: str, values: list[tuple[int, object]]) -> None:
    seen: dict[object, int] = {}
    for position, value in values:
        if value in seen:
            raise ValueError(f"devices.{position}.{kind} {value!r:.80} is also devices.{seen[value]}'s; "
                             "each GPU appears once")
        seen[value] = position


class _Fact(BaseModel):
    # defer_build: validators are built on first use, not at import. A replayed inventory validates
    # HostFacts only (one validator covers the nested models); a live gather builds the parts it makes.
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


# --- GPUs (NVML) -----------------------------------------------------------------------------------


class Unsupported(_Fact):
    """An NVML call that raised for this device: recorded, not fatal."""

    call: Name
    error: Name = Field(description="the pynvml exception class, e.g. NVMLError_NotSupported")
    message: Text = ""


class GpuProcess(_Fact):
    pid: Count
    used_memory_bytes: Count | None = None
    name: ProcessName | None = Field(default=None, description="process name via psutil; None when not visible here")
    kind: Literal["compute", "graphics"] = "compute"


class PowerLimits(_Fact):
    """Milliwatts, as NVML reports them."""

    current_mw: Count | None = None
    enforced_mw: Count | None = None
    default_mw: Count | None = None
    min_mw: Count | None = None
    max_mw: Count | None = None


# NVML_NVLINK_MAX_LINKS is 36 in today's nvml.h; a Hopper or Blackwell GPU has 18 links. More than this is no card.
NVLINK_LINKS_MAX = 64

NVLINK_VERSION_NAMES = {  # NVML_NVLINK_VERSION_* -> the NVLink generation
    1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0",
}


class NvLink(_Fact):
    """A GPU's NVLink ports: ``nvmlDeviceGetNvLinkState`` link by link until the device answers
    InvalidArgument (past its last link), and ``nvmlDeviceGetNvLinkVersion`` of the first active link."""

    supported: bool = Field(description="False: NVML answered NotSupported for link 0 (the card has no NVLink)")
    active: Count = Field(default=0, le=NVLINK_LINKS_MAX, description="links that are up")
    inactive: Count = Field(default=0, le=NVLINK_LINKS_MAX, description="links the card has that are down")
    version: Count | None = Field(default=None, le=255, description="NVML_NVLINK_VERSION_*: 6 is NVLink 4.0")

    @model_validator(mode="after")
    def _no_links_without_nvlink(self) -> NvLink:
        if not self.supported and (self.active or self.inactive or self.version is not None):
            raise ValueError("a card without NVLink (supported: false) has no links and no version")
        return self

    @property
    def version_text(self) -> str | None:
        return None if self.version is None else NVLINK_VERSION_NAMES.get(self.version, f"version {self.version}")


class Gpu(_Fact):
    index: Count
    uuid: GpuUuid
    name: Name
    pci_bus_id: Name | None = None
    pci_device_id: Count | None = Field(default=None, description="16-bit PCI device id, e.g. 0x2BB1")
    pci_vendor_id: Count | None = None
    memory_total_bytes: Count | None = None
    memory_free_bytes: Count | None = None
    memory_used_bytes: Count | None = None
    compute_capability: Name | None = Field(default=None, description='"major.minor", e.g. "12.0"')
    architecture: int | None = Field(default=None, description="NVML architecture enum (10 = Blackwell)")
    power: PowerLimits = Field(default_factory=PowerLimits)
    persistence_mode: bool | None = None
    ecc_enabled: bool | None = None
    mig_enabled: bool | None = None
    mig_pending: bool | None = None
    compute_mode: int | None = None
    pcie_generation: Count | None = None
    pcie_generation_max: Count | None = None
    pcie_width: Count | None = None
    pcie_width_max: Count | None = None
    numa_node: int | None = None
    nvlink: NvLink | None = Field(default=None, description="None: not probed (an inventory from an older rigctl)")
    processes: list[GpuProcess] = Field(default_factory=empty_list)
    unsupported: list[Unsupported] = Field(default_factory=empty_list)

    @model_validator(mode="after")
    def _memory_adds_up(self) -> Gpu:
        total = self.memory_total_bytes
        for part in ("memory_free_bytes", "memory_used_bytes"):
            value = getattr(self, part)
            if total is not None and value is not None and value > total:
                raise ValueError(f"{part} {value} is more than memory_total_bytes {total}")
        return self

    def named_by(self, ids: Collection[str]) -> bool:
        """Whether one of a unit's GPU ids names this GPU: its UUID, or its index (where NVML gave no UUID,
        ``Choice.unit_ids`` pins the index)."""
        return self.uuid in ids or str(self.index) in ids

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
    """P2P read status (nvmlDeviceGetP2PStatus, READ), the closest common ancestor of two GPUs, and the link
    that joins them. The common ancestor alone says "host bridge" for two H200s joined by 18 NVLinks: the
    NVLINK P2P capability and both GPUs' active links are what say NVLink."""

    a: Count
    b: Count
    p2p_read: int | None = Field(default=None, description="NVML_P2P_STATUS_*; 0 is OK")
    topology: int | None = Field(default=None, description="NVML_TOPOLOGY_*; smaller is closer")
    p2p_nvlink: Count | None = Field(
        default=None, description="NVML_P2P_STATUS_* of the NVLINK capability; asked only when both GPUs have "
                                  "active NVLinks")
    link: Literal["nvlink", "pcie"] | None = Field(
        default=None, description="what joins the pair; None: unknown, or an inventory from an older rigctl")
    nvlink_links: Count | None = Field(default=None, le=NVLINK_LINKS_MAX,
                                       description="NVLinks between the pair (NV18 in nvidia-smi topo -m)")
    nvlink_version: Count | None = Field(default=None, le=255, description="NVML_NVLINK_VERSION_* of those links")
    unsupported: list[Unsupported] = Field(default_factory=empty_list)

    @model_validator(mode="after")
    def _links_match_the_kind(self) -> GpuPair:
        if self.link == "nvlink" and not self.nvlink_links:
            raise ValueError("link nvlink needs nvlink_links of 1 or more")
        if self.link != "nvlink" and (self.nvlink_links or self.nvlink_version is not None):
            raise ValueError(f"nvlink_links and nvlink_version belong to an NVLink pair, not link {self.link}")
        return self

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
    error: Text | None = Field(default=None, description="why NVML is unavailable, e.g. NVMLError_LibraryNotFound")
    driver_version: Name | None = None
    nvml_version: Name | None = None
    cuda_driver_version: Count | None = Field(default=None, description="e.g. 13000 for CUDA 13.0")
    devices: list[Gpu] = Field(default_factory=empty_list, max_length=1024)
    pairs: list[GpuPair] = Field(default_factory=empty_list)

    @model_validator(mode="after")
    def _each_gpu_once(self) -> GpuInventory:
        """Two devices with one index or one UUID would let a selection or a check see the wrong one."""
        _unique("index", [(i, g.index) for i, g in enumerate(self.devices)])
        _unique("uuid", [(i, g.uuid) for i, g in enumerate(self.devices) if g.uuid])  # "": NVML could not say
        return self

    @property
    def cuda_version(self) -> str | None:
        v = self.cuda_driver_version
        return None if v is None else cuda_version_text(v)

    def pair(self, a: int, b: int) -> GpuPair | None:
        lo, hi = min(a, b), max(a, b)
        return next((p for p in self.pairs if p.a == lo and p.b == hi), None)


# --- files, disks, shm -----------------------------------------------------------------------------


class FileEntry(_Fact):
    name: LongName
    size: Count
    mtime_ns: int


class PathProbe(_Fact):
    """A path preflight cares about (a checkpoint directory, a cache): whether it exists, the free space
    of the file system it lives on (or would live on), and for a directory its top-level files."""

    path: LongName
    exists: bool
    is_dir: bool = False
    probed: LongName | None = Field(default=None, description="the nearest existing ancestor used for disk space")
    free_bytes: Count | None = None
    total_bytes: Count | None = None
    files: list[FileEntry] | None = None
    files_truncated: bool = False
    error: Text | None = None

    def file(self, name: str) -> FileEntry | None:
        return next((f for f in self.files or () if f.name == name), None)


class Shm(_Fact):
    path: LongName = "/dev/shm"
    total_bytes: Count | None = None
    free_bytes: Count | None = None
    error: Text | None = None


# --- podman, CDI, systemd, ports, licenses ---------------------------------------------------------


# What an image's environment declares of the CUDA and NCCL inside it: NVIDIA's base images set CUDA_VERSION
# (12.8.1) and NCCL_VERSION (2.25.1-1); an image built on another base may set only the NV_CUDA_* ones.
IMAGE_CUDA_KEYS = ("CUDA_VERSION", "NV_CUDA_CUDART_VERSION", "NV_CUDA_LIB_VERSION")
IMAGE_NCCL_KEYS = ("NCCL_VERSION", "NV_LIBNCCL_PACKAGE_VERSION")
IMAGE_ENV_MAX = 512  # entries of an image's Env kept; a real one has tens


def leading_version(text: str | None, parts: int = 3) -> tuple[int, ...] | None:
    """The dotted number a version text starts with ("12.8.90-1" -> (12, 8, 90)), at most ``parts`` long;
    None when it starts with none."""
    match = re.match(rf"\s*v?(\d{{1,6}}(?:\.\d{{1,6}}){{0,{parts - 1}}})", text or "")
    return None if match is None else tuple(int(x) for x in match.group(1).split("."))


def declared_in(env: list[str] | None, keys: tuple[str, ...]) -> tuple[str, str] | None:
    """The first of ``keys`` an image config's Env (KEY=value entries) sets, and its value."""
    values = dict(item.split("=", 1) for item in env or () if "=" in item)
    return next(((k, values[k]) for k in keys if values.get(k)), None)


def cuda_of(env: list[str] | None) -> tuple[int, ...] | None:
    """The CUDA an image was built for, (major, minor), as its Env declares it."""
    found = declared_in(env, IMAGE_CUDA_KEYS)
    return None if found is None else leading_version(found[1], 2)


def nccl_of(env: list[str] | None) -> str | None:
    """The NCCL release an image's Env declares ("2.26.2"), without the package's "-1" suffix."""
    found = declared_in(env, IMAGE_NCCL_KEYS)
    version = None if found is None else leading_version(found[1])
    return None if version is None else ".".join(map(str, version))


class PodmanImage(_Fact):
    id: Name
    digest: Name | None = None
    repo_digests: list[LongName] = Field(default_factory=empty_list)
    names: list[LongName] = Field(default_factory=empty_list)
    env: list[Text] | None = Field(default=None, max_length=IMAGE_ENV_MAX,
                                   description="the image config's Env (KEY=value); None: not inspected")

    def declared(self, keys: tuple[str, ...]) -> tuple[str, str] | None:
        """The first of ``keys`` the image's environment sets, and its value."""
        return declared_in(self.env, keys)

    @property
    def cuda_version(self) -> tuple[int, ...] | None:
        """The CUDA the image was built for, (major, minor), as its environment declares it."""
        return cuda_of(self.env)

    @property
    def nccl_version(self) -> str | None:
        """The NCCL release the image declares ("2.26.2"), without the package's "-1" suffix."""
        return nccl_of(self.env)


DIGEST = r"^sha256:[0-9a-f]{64}$"


class RegistryImage(_Fact):
    """The recipe's image config as its registry serves it, read only when the image is not pulled here: what
    CUDA and NCCL it declares, before a pull. Every manifest and blob on the way was checked against its
    sha256 digest; whatever went wrong (offline, a refusal, a wrong digest) is said in ``error``."""

    image: LongName = Field(description="the recipe's pinned reference")
    digest: Annotated[str, Field(pattern=DIGEST)] = Field(description="the pinned digest (an index or a manifest)")
    registry: Name = Field(default="", description="the host asked, e.g. registry-1.docker.io")
    platform: Name | None = Field(default=None, description="the index entry chosen, e.g. linux/amd64")
    config_digest: Annotated[str, Field(pattern=DIGEST)] | None = None
    env: list[Text] | None = Field(default=None, max_length=IMAGE_ENV_MAX,
                                   description="the config's Env entries that declare CUDA or NCCL; None: not read")
    cached: bool = Field(default=False, description="read from rigctl's cache of configs by digest, not asked")
    error: Text | None = Field(default=None, description="why the config was not read (offline, refused, ...)")


class PodmanFacts(_Fact):
    installed: bool
    version: Name | None = None
    api_socket: LongName | None = None
    api_ok: bool = False
    quadlet: LongName | None = Field(default=None, description="the quadlet generator binary systemd runs for "
                                     "quadlet_scope, if one is installed")
    quadlet_version: Name | None = Field(default=None, description="what that binary's -version says")
    quadlet_scope: Scope | None = Field(default=None, description="the service manager it was looked up for")
    quadlet_elsewhere: LongName | None = Field(default=None, description="where quadlet_scope's manager has no "
                                               "generator: the other manager's, which could run the unit")
    images_via: Literal["api", "cli", "none"] = "none"
    images: list[PodmanImage] = Field(default_factory=empty_list)
    error: Text | None = None

    def image(self, digest: str) -> PodmanImage | None:
        """The local image with this ``sha256:`` digest (its own, or one of its repo digests), if one was listed."""
        return next((i for i in self.images if i.digest == digest or any(rd.endswith("@" + digest)
                                                                         for rd in i.repo_digests)), None)

    @property
    def found_version(self) -> Version | None:
        """podman's MAJOR.MINOR as `podman --version` said it (here or on a captured box); None when podman
        was not found or said no version: the one reading of it, for preflight's check and the plan."""
        return find_version(self.version) if self.installed else None

    @property
    def found_quadlet_version(self) -> Version | None:
        """The quadlet generator's MAJOR.MINOR as its ``-version`` said it; None when it said none."""
        return find_version(self.quadlet_version)

    def generator_for(self, scope: Scope) -> bool:
        """Whether the generator facts are ``scope``'s manager's: a captured box's (or this host's) generator
        counts for the scope it was found for; one found for no scope in particular, for any."""
        return self.quadlet_scope in (None, scope)

    def generator_elsewhere(self, scope: Scope) -> tuple[Scope, str] | None:
        """The other manager and its quadlet generator, when ``scope``'s has none (these facts were gathered
        for it) and the other's has one: root on a box whose only manager is a `systemd --user` one."""
        if self.quadlet is not None or self.quadlet_elsewhere is None or not self.generator_for(scope):
            return None
        return Scope(scope).other, self.quadlet_elsewhere


class CdiSpec(_Fact):
    path: LongName
    kind: Name | None = None
    devices: list[Name] = Field(default_factory=empty_list, description="device names: indices, UUIDs, all")
    mtime_ns: int | None = None
    driver_versions: list[Name] = Field(
        default_factory=empty_list, description="driver versions named inside the spec (library file suffixes)"
    )
    error: Text | None = None


class Cdi(_Fact):
    dirs: list[LongName] = Field(default_factory=empty_list)
    specs: list[CdiSpec] = Field(default_factory=empty_list)
    driver_library: LongName | None = Field(default=None, description="libnvidia-ml.so.<driver version> found on disk")
    driver_installed_ns: int | None = Field(default=None, description="mtime of that library: the install time")


class SystemdFacts(_Fact):
    system_manager: bool
    user_manager: bool
    user: Name | None = None
    uid: Count | None = None
    linger: bool | None = None
    error: Text | None = None


class Listener(_Fact):
    address: Name
    port: Port
    pid: Count | None = None
    process: ProcessName | None = None


class Ports(_Fact):
    listening: list[Listener] = Field(default_factory=empty_list)
    error: Text | None = None
    # The ports whose holders were looked up: a recipe's gather names only its own port's (the others
    # have no pid here); None: every port's, as `rigctl inventory` captures them.
    owners_of: list[Port] | None = None

    def holder(self, port: int, address: str = "127.0.0.1") -> Listener | None:
        """The listener that would collide with publishing ``address:port``."""
        for lis in self.listening:
            if lis.port != port:
                continue
            if every_address(address) or every_address(lis.address) or same_address(lis.address, address):
                return lis
        return None


class LicenseAcceptance(_Fact):
    id: Name
    accepted_at: Name
    by: Name
    recipe: Name | None = None


MemBytes = Annotated[int, Field(ge=0, le=1 << 50)]  # a GPU memory figure: under 1 PiB


class MemoryReceipt(_Fact):
    """What an engine said about its memory at a boot here (its own start-up lines), beside what the plan had
    said: the next plan for the same recipe settings, image and GPU product uses it."""

    recipe: Name
    key: Name  # gpu_fit.receipt_key: the recipe's memory settings
    image: LongName
    gpu_product: Name
    at: Name  # when the boot was ready, ISO 8601
    engine: Name = ""
    engine_version: Name | None = None
    kv_available_bytes: MemBytes | None = None
    weights_bytes: MemBytes | None = None
    kv_tokens: Annotated[int, Field(ge=0, le=1 << 40)] | None = None
    max_concurrency: Annotated[float, Field(ge=0, le=1e9, allow_inf_nan=False)] | None = None
    graphs_bytes: MemBytes | None = None
    planned_kv_budget_low: int | None = Field(default=None, ge=-(1 << 50), le=1 << 50)
    planned_kv_budget_high: int | None = Field(default=None, ge=-(1 << 50), le=1 << 50)
    planned_weights_bytes: MemBytes | None = None


# --- the stack under the engine: kernel module, kernel log, PCIe path ------------------------------

PCI_BDF = r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$"  # sysfs's spelling: 0000:01:00.0
XID_EVENTS_MAX = 256


class KernelModule(_Fact):
    """Which flavour of the NVIDIA kernel module is loaded: Blackwell runs only on the open one."""

    flavour: Literal["open", "proprietary"] | None = Field(default=None, description="None: not read, see error")
    version: Name | None = None
    source: LongName | None = Field(default=None, description="the file it was read from")
    error: Text | None = None


class XidEvent(_Fact):
    pci: Name = Field(description='the GPU as the driver names it in the line, e.g. "0000:cb:00"')
    xid: Count = Field(le=1_000_000)
    text: Text = Field(description="the rest of the line")


class XidLog(_Fact):
    """NVRM Xid lines in the kernel log since boot."""

    read: bool = Field(default=False, description="False: the kernel log could not be read, see error")
    source: LongName | None = None
    events: list[XidEvent] = Field(default_factory=empty_list, max_length=XID_EVENTS_MAX)
    truncated: bool = Field(default=False, description="more lines than events keeps (the last ones are kept)")
    error: Text | None = None

    def for_gpu(self, bus_id: str | None) -> list[XidEvent]:
        """The events of the GPU NVML calls ``bus_id`` ("00000000:CB:00.0"); the driver writes it without the
        function and with a 4-digit domain ("0000:cb:00")."""
        key = pci_key(bus_id)
        return [] if key is None else [e for e in self.events if pci_key(e.pci) == key]


def pci_key(bus_id: str | None) -> tuple[int, int, int] | None:
    """(domain, bus, device) of a PCI address in any of the spellings NVML, sysfs and the driver use."""
    match = re.match(r"^(?:([0-9A-Fa-f]{1,8}):)?([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})(?:\.[0-7])?$", bus_id or "")
    if match is None:
        return None
    return int(match.group(1) or "0", 16), int(match.group(2), 16), int(match.group(3), 16)


# PCIe Device/Port Type (PCIe capability register, bits 7:4): which kind of bridge an ACS setting sits on
PORT_TYPE_NAMES = {0: "endpoint", 4: "root port", 5: "switch upstream port", 6: "switch downstream port",
                   7: "PCIe-to-PCI bridge", 8: "PCI-to-PCIe bridge", 9: "root complex endpoint"}
ACS_REQUEST_REDIRECT = 0x4  # ACS Control: P2P Request Redirect Enable
ACS_COMPLETION_REDIRECT = 0x8  # ACS Control: P2P Completion Redirect Enable


class PcieBridge(_Fact):
    """A bridge above a GPU, with what its config space says (root only: past 64 bytes it is root's to read)."""

    bdf: Annotated[str, Field(pattern=PCI_BDF)]
    port_type: Count | None = Field(default=None, le=15, description="PCIe Device/Port Type; 6: switch downstream")
    acs_control: Count | None = Field(default=None, le=0xFFFF, description="ACS Control register; None: no ACS "
                                      "capability, or config space not readable (see error)")
    error: Text | None = None

    @property
    def redirects(self) -> bool:
        redirect = ACS_REQUEST_REDIRECT | ACS_COMPLETION_REDIRECT
        return self.acs_control is not None and bool(self.acs_control & redirect)

    @property
    def port_text(self) -> str:
        return "bridge" if self.port_type is None else PORT_TYPE_NAMES.get(self.port_type, f"type {self.port_type}")


class GpuPath(_Fact):
    """A GPU's place on the PCIe tree: the bridges above it (root first) and its IOMMU group's domain type."""

    gpu: Count = Field(description="the GPU's NVML index")
    bdf: Annotated[str, Field(pattern=PCI_BDF)]
    bridges: list[PcieBridge] = Field(default_factory=empty_list, max_length=32)
    iommu_group_type: Name | None = Field(default=None, description='"identity" (passthrough), "DMA" or "DMA-FQ" '
                                          "(translated); None: no IOMMU group, or not readable")
    error: Text | None = None


class StackFacts(_Fact):
    """The layer between the driver and the engine (kernel module, Xid log, PCIe path, IOMMU). Every part that
    could not be read says why and stays None: none of it is worth failing an inventory for."""

    kernel_module: KernelModule = Field(default_factory=KernelModule)
    xid: XidLog = Field(default_factory=XidLog)
    gpu_paths: list[GpuPath] | None = Field(default=None, max_length=1024,
                                            description="None: not probed (an inventory of an older rigctl)")
    iommu_cmdline: list[Name] = Field(default_factory=empty_list, max_length=16,
                                      description="the iommu options of the kernel command line")
    error: Text | None = None

    def path_of(self, gpu: int) -> GpuPath | None:
        return next((p for p in self.gpu_paths or () if p.gpu == gpu), None)


# --- the document ----------------------------------------------------------------------------------


# What `rigctl inventory --json` writes around the facts (``util.text.envelope``): ``command``, ``ok`` and the
# ``version`` of the rigctl that wrote it. The facts' own ``rigctl`` key is the envelope's too.
ENVELOPE_COMMAND = "inventory"


def facts_body(data: dict[str, object]) -> tuple[dict[str, object], str | None]:
    """The facts document inside ``data``: the document itself, or the `inventory --json` envelope with its
    head keys set aside. With it, the problem of a head key the envelope never holds so (a ``version`` that is
    not a short text), or None. Every other key is the model's to accept."""
    body = dict(data)
    if body.get("command") != ENVELOPE_COMMAND:
        return body, None
    del body["command"]
    body.pop("ok", None)
    version = body.pop("version", "")
    if not isinstance(version, str) or len(version) > NAME_MAX:
        return body, f"version: {version!r:.80} is not the version of a rigctl"
    return body, None


class HostFacts(_Fact):
    rigctl: Literal["1"] = "1"  # FACTS_SCHEMA
    hostname: Name = ""
    captured_at: Name = ""
    cpu_count: Count | None = None
    gpu: GpuInventory
    shm: Shm = Field(default_factory=Shm)
    paths: list[PathProbe] = Field(default_factory=empty_list)
    podman: PodmanFacts = Field(default_factory=lambda: PodmanFacts(installed=False))
    cdi: Cdi = Field(default_factory=Cdi)
    systemd: SystemdFacts = Field(default_factory=lambda: SystemdFacts(system_manager=False, user_manager=False))
    ports: Ports = Field(default_factory=Ports)
    licenses: list[LicenseAcceptance] = Field(default_factory=empty_list)
    stack: StackFacts = Field(default_factory=StackFacts, description="kernel module, Xid log, PCIe path")
    image_registry: RegistryImage | None = Field(
        default=None, description="the recipe's image config from its registry, when the image is not pulled "
                                  "here; None: not asked (pulled, no recipe, or an older rigctl)")
    receipts: list[MemoryReceipt] = Field(default_factory=empty_list, max_length=256,
                                          description="what engines booted here said of their memory")
    probe_errors: dict[LongName, Text] = Field(
        default_factory=dict, description="probes that crashed, by section: the rest of the document is valid"
    )

    def path(self, path: str) -> PathProbe | None:
        return next((p for p in self.paths if p.path == path), None)

    def other_scope(self, scope: Scope | None) -> str | None:
        """Why the user manager could run here what the system manager cannot (root in a container with a
        `systemd --user` manager, a CI runner), judged from these facts; None for any other scope (a plain
        user cannot take the system's), or when there is nothing to say. The CLI adds the `--user` to type."""
        if scope != Scope.SYSTEM:
            return None
        moved = self.podman.generator_elsewhere(scope)
        if moved is not None:
            return f"the system manager has no quadlet generator here, the user manager has one ({moved[1]})"
        if not self.systemd.system_manager and self.systemd.user_manager:
            return "no systemd system manager runs here, a user manager does"
        return None

    def with_licenses(self, extra: list[LicenseAcceptance]) -> HostFacts:
        known = {lic.id for lic in self.licenses}
        return self.model_copy(update={"licenses": [*self.licenses, *(x for x in extra if x.id not in known)]})
