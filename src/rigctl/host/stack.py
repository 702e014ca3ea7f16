"""Probes of the layer between the driver and the engine: the kernel module's flavour, Xid lines in the kernel
log, each GPU's bridges (their ACS settings) and IOMMU group, the kernel's iommu options.

rigctl may run as root, so every read here is of a fixed /proc, /sys or /dev path, bounded in size; a path
built from a GPU's bus id is built only from a bus id that parsed as one, and a link in sysfs is followed only
where it stays inside the sysfs tree the kernel made. A read that fails leaves its fact None with why, never an
exception: an unreadable fact is no failure of the box.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Iterable

from rigctl.host.facts import (
    PCI_BDF,
    XID_EVENTS_MAX,
    GpuInventory,
    GpuPath,
    KernelModule,
    PcieBridge,
    StackFacts,
    XidEvent,
    XidLog,
)

PROC_VERSION = "/proc/driver/nvidia/version"
SYS_MODULE_VERSION = "/sys/module/nvidia/version"
KMSG = "/dev/kmsg"
CMDLINE = "/proc/cmdline"
SYS = "/sys"

SMALL_FILE = 4096  # a /proc version file, a sysfs attribute, a PCI config space (4096 bytes for PCIe)
KMSG_RECORDS_MAX = 200_000  # the kernel's ring buffer holds far fewer; a bound, not a budget
CONFIG_STEPS_MAX = 64  # capability lists are linked lists in the device's own memory: never follow one forever


def read_small(path: str, limit: int = SMALL_FILE) -> bytes:
    """At most ``limit`` bytes of a fixed path; never blocks on a FIFO and never follows a last-component link."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        chunks: list[bytes] = []
        left = limit
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)


# --- kernel module ------------------------------------------------------------------------------------

_MODULE_LINE = re.compile(r"NVRM version: NVIDIA UNIX (?P<open>Open )?(?:\S+ )?Kernel Module(?: for \S+)?\s+"
                          r"(?P<version>\d+(?:\.\d+){1,3})")


def parse_module_version(text: str) -> KernelModule:
    """The flavour and version /proc/driver/nvidia/version names: "NVIDIA UNIX Open Kernel Module for x86_64
    580.159.04" (open) or "NVIDIA UNIX x86_64 Kernel Module  384.98" (proprietary)."""
    match = _MODULE_LINE.search(text)
    if match is None:
        return KernelModule(source=PROC_VERSION, error="no NVRM version line in it")
    return KernelModule(flavour="open" if match.group("open") else "proprietary", version=match.group("version"),
                        source=PROC_VERSION)


def read_kernel_module(proc_file: str = PROC_VERSION, sys_version: str = SYS_MODULE_VERSION) -> KernelModule:
    try:
        text = read_small(proc_file).decode(errors="replace")
    except OSError as exc:
        version = None
        with contextlib.suppress(OSError):  # the version alone, without the flavour, still tells drift
            version = read_small(sys_version, 64).decode(errors="replace").strip() or None
        return KernelModule(version=version, source=sys_version if version else None,
                            error=f"cannot read {proc_file}: {_why(exc)} (is the nvidia module loaded?)")
    return parse_module_version(text).model_copy(update={"source": proc_file})


# --- Xid lines ------------------------------------------------------------------------------------------

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{1,8}:[0-9A-Fa-f]{1,2}:[0-9A-Fa-f]{1,2}(?:\.[0-7])?)\):"
                  r" (?P<xid>\d{1,6}),? ?(?P<text>.*)")


def parse_xid(lines: Iterable[str]) -> tuple[list[XidEvent], bool]:
    """The Xid events in kernel log lines (dmesg's or /dev/kmsg's), the last ``XID_EVENTS_MAX``, and whether
    there were more."""
    events: list[XidEvent] = []
    truncated = False
    for line in lines:
        match = _XID.search(line)
        if match is None:
            continue
        events.append(XidEvent(pci=match.group("pci"), xid=int(match.group("xid")), text=match.group("text").strip()))
        if len(events) > XID_EVENTS_MAX:
            del events[0]
            truncated = True
    return events, truncated


def _kmsg_messages(path: str) -> Iterable[str]:
    """Each record's message, read without blocking: a read past the last record answers EAGAIN."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        for _ in range(KMSG_RECORDS_MAX):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                return
            except OSError as exc:
                if exc.errno == errno.EPIPE:  # the record was overwritten while reading: the next one follows
                    continue
                raise
            if not record:
                return
            _, _, message = record.decode(errors="replace").partition(";")
            yield message.split("\n", 1)[0]
    finally:
        os.close(fd)


def read_xid(kmsg: str = KMSG) -> XidLog:
    try:
        events, truncated = parse_xid(_kmsg_messages(kmsg))
    except OSError as exc:
        hint = " (root, or kernel.dmesg_restrict=0, may read it)" if exc.errno in (errno.EPERM, errno.EACCES) else ""
        return XidLog(read=False, source=kmsg, error=f"cannot read {kmsg}: {_why(exc)}{hint}")
    return XidLog(read=True, source=kmsg, events=events, truncated=truncated)


# --- PCIe path, ACS, IOMMU --------------------------------------------------------------------------------

_BDF = re.compile(PCI_BDF)
PCIE_CAP = 0x10
ACS_ECAP = 0x000D


def sysfs_bdf(bus_id: str | None) -> str | None:
    """NVML's "00000000:01:00.0" as sysfs names it ("0000:01:00.0"); None for anything else."""
    match = re.fullmatch(r"0{0,4}([0-9A-Fa-f]{4}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])", bus_id or "")
    return None if match is None else "{}:{}:{}.{}".format(*(g.lower() for g in match.groups()))


def _u16(data: bytes, at: int) -> int | None:
    return int.from_bytes(data[at:at + 2], "little") if at + 2 <= len(data) else None


def _u32(data: bytes, at: int) -> int | None:
    return int.from_bytes(data[at:at + 4], "little") if at + 4 <= len(data) else None


def parse_config(bdf: str, data: bytes) -> PcieBridge:
    """The port type (PCIe capability) and ACS Control (extended capability 0x0D, at +6) of one config space.
    An unprivileged read of sysfs's config gets its first 64 bytes only: then both are unknown, said so."""
    if len(data) <= 64:
        return PcieBridge(bdf=bdf, error=f"only {len(data)} bytes of config space readable (the rest is root's)")
    port_type = None
    pointer = data[0x34] & 0xFC if (_u16(data, 0x06) or 0) & 0x10 else 0  # Status: capabilities list present
    for _ in range(CONFIG_STEPS_MAX):
        if pointer < 0x40 or pointer + 4 > len(data):
            break
        if data[pointer] == PCIE_CAP:
            port_type = ((_u16(data, pointer + 2) or 0) >> 4) & 0xF
            break
        pointer = data[pointer + 1] & 0xFC
    if len(data) <= 0x100:
        return PcieBridge(bdf=bdf, port_type=port_type, error="no extended config space readable")
    acs = None
    offset = 0x100
    for _ in range(CONFIG_STEPS_MAX):
        header = _u32(data, offset)
        if not header or header == 0xFFFFFFFF:
            break
        if header & 0xFFFF == ACS_ECAP:
            acs = _u16(data, offset + 6)
            break
        offset = (header >> 20) & 0xFFC
        if offset < 0x100:
            break
    return PcieBridge(bdf=bdf, port_type=port_type, acs_control=acs)


def _read_bridge(device_dir: str, bdf: str) -> PcieBridge:
    try:
        return parse_config(bdf, read_small(os.path.join(device_dir, "config")))
    except OSError as exc:
        return PcieBridge(bdf=bdf, error=f"cannot read its config space: {_why(exc)}")


def _iommu_type(device_dir: str, sys_root: str) -> str | None:
    """The default domain type of the device's IOMMU group: a link the kernel made into
    <sys>/kernel/iommu_groups/N, followed only when it lands there."""
    groups = os.path.join(os.path.realpath(sys_root), "kernel", "iommu_groups")
    group = os.path.realpath(os.path.join(device_dir, "iommu_group"))
    if os.path.dirname(group) != groups or not os.path.basename(group).isdigit():
        return None
    try:
        return read_small(os.path.join(group, "type"), 64).decode(errors="replace").strip() or None
    except OSError:
        return None


def read_gpu_path(index: int, bus_id: str | None, sys_root: str = SYS) -> GpuPath | None:
    """The bridges above one GPU, root first, from the sysfs device path its bus id resolves to."""
    bdf = sysfs_bdf(bus_id)
    if bdf is None:
        return None
    devices = os.path.join(os.path.realpath(sys_root), "devices")
    real = os.path.realpath(os.path.join(sys_root, "bus", "pci", "devices", bdf))
    parts = os.path.relpath(real, devices).split(os.sep)
    if real == devices or parts[0] == ".." or not re.fullmatch(r"pci[0-9a-f]{4}:[0-9a-f]{2}", parts[0]) \
            or parts[-1] != bdf or not all(_BDF.fullmatch(p) for p in parts[1:]):
        return GpuPath(gpu=index, bdf=bdf, error=f"{bdf} is not a PCI device under {devices}")
    bridges = []
    here = os.path.join(devices, parts[0])
    for part in parts[1:-1][-32:]:
        here = os.path.join(here, part)
        bridges.append(_read_bridge(here, part))
    return GpuPath(gpu=index, bdf=bdf, bridges=bridges, iommu_group_type=_iommu_type(real, sys_root))


def read_iommu_cmdline(path: str = CMDLINE) -> tuple[list[str], str | None]:
    try:
        words = read_small(path).decode(errors="replace").split()
    except OSError as exc:
        return [], f"cannot read {path}: {_why(exc)}"
    keep = [w[:200] for w in words if w.split("=", 1)[0] in ("iommu", "intel_iommu", "amd_iommu")
            or (w.startswith("pci=") and "noacs" in w)]
    return keep[:16], None


def probe_stack(gpu: GpuInventory, *, proc_version: str = PROC_VERSION, sys_version: str = SYS_MODULE_VERSION,
                kmsg: str = KMSG, sys_root: str = SYS, cmdline: str = CMDLINE) -> StackFacts:
    """Every fact of the stack; the GPUs' bus ids (NVML's) say whose PCIe path is read."""
    paths = [p for g in gpu.devices if (p := read_gpu_path(g.index, g.pci_bus_id, sys_root)) is not None]
    words, problem = read_iommu_cmdline(cmdline)
    return StackFacts(kernel_module=read_kernel_module(proc_version, sys_version), xid=read_xid(kmsg),
                      gpu_paths=paths if gpu.available else None, iommu_cmdline=words, error=problem)

