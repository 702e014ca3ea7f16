"""host.stack (#34): the kernel module's flavour, Xid lines, the GPUs' bridges (ACS) and IOMMU group, read from
fixed paths and bounded; real captures where there are any (the H100 device box, published lines)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.nvml_fake import FakeNvml

from rigctl.host.facts import GpuInventory, HostFacts, PodmanFacts, PodmanImage
from rigctl.host.gather import facts_from_json
from rigctl.host.nvml import probe_gpus
from rigctl.host.stack import (
    parse_config,
    parse_xid,
    probe_stack,
    read_gpu_path,
    read_kernel_module,
    read_xid,
    sysfs_bdf,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
H100 = FIXTURES / "device" / "h100-2026-12-07"
STACK = FIXTURES / "stack"


def test_open_module_of_the_h100_capture() -> None:
    module = read_kernel_module(str(H100 / "proc-driver-nvidia-version.txt"))
    assert (module.flavour, module.version, module.error) == ("open", "580.159.04", None)


def test_open_module_with_a_build_date() -> None:
    module = read_kernel_module(str(STACK / "proc-driver-nvidia-version-open-565.txt"))
    assert (module.flavour, module.version) == ("open", "565.57.01")


def test_proprietary_module() -> None:
    module = read_kernel_module(str(STACK / "proc-driver-nvidia-version-proprietary.txt"))
    assert (module.flavour, module.version) == ("proprietary", "384.98")


def test_no_module_falls_back_to_the_sysfs_version(tmp_path: Path) -> None:
    module = read_kernel_module(str(tmp_path / "absent"), str(H100 / "sys-module-nvidia-version.txt"))
    assert module.flavour is None and module.version == "580.159.04" and "cannot read" in (module.error or "")
    nothing = read_kernel_module(str(tmp_path / "absent"), str(tmp_path / "absent-too"))
    assert nothing.flavour is None and nothing.version is None and nothing.error


def test_a_fifo_is_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "version"
    os.mkfifo(fifo)
    assert read_kernel_module(str(fifo)).flavour is None  # opened non-blocking: an empty read, no hang


def test_xid_lines_published_and_of_the_h100() -> None:
    events, truncated = parse_xid((STACK / "dmesg-xid-published.txt").read_text().splitlines())
    assert [(e.pci, e.xid) for e in events] == [("0000:cb:00", 13), ("0000:cb:00", 109), ("0000:43:00", 13),
                                                 ("0000:44:00", 79)] and not truncated
    assert events[1].text.startswith("pid=1797828, name=pt_main_thread")
    assert parse_xid((H100 / "dmesg-xid.txt").read_text().splitlines()) == ([], False)  # NVRM lines, no Xid


def test_xid_events_match_the_gpu_by_nvml_bus_id() -> None:
    from rigctl.host.facts import XidLog

    events, _ = parse_xid((STACK / "dmesg-xid-published.txt").read_text().splitlines())
    log = XidLog(read=True, events=events)
    assert [e.xid for e in log.for_gpu("00000000:CB:00.0")] == [13, 109]
    assert log.for_gpu("00000000:01:00.0") == [] and log.for_gpu(None) == []


def test_xid_keeps_the_last_events() -> None:
    events, truncated = parse_xid(["NVRM: Xid (PCI:0000:01:00): 13, x"] * 300)
    assert len(events) == 256 and truncated


def test_unreadable_kernel_log_is_said(tmp_path: Path) -> None:
    log = read_xid(str(tmp_path / "kmsg"))
    assert not log.read and "cannot read" in (log.error or "")


def _config(port_type: int, acs: int | None, size: int = 4096) -> bytes:
    data = bytearray(size)
    data[0x06] = 0x10  # capabilities list
    data[0x34] = 0x40
    data[0x40], data[0x41] = 0x10, 0  # PCIe capability, last
    data[0x42:0x44] = (0x2 | port_type << 4).to_bytes(2, "little")
    if acs is not None and size > 0x100:
        data[0x100:0x104] = (0x000D | 1 << 16).to_bytes(4, "little")
        data[0x106:0x108] = acs.to_bytes(2, "little")
    return bytes(data)


def test_config_space_port_type_and_acs() -> None:
    bridge = parse_config("0000:02:08.0", _config(6, 0x1D))
    assert (bridge.port_type, bridge.acs_control, bridge.redirects) == (6, 0x1D, True)
    assert parse_config("0000:02:08.0", _config(4, None)).acs_control is None
    short = parse_config("0000:02:08.0", _config(6, 0x1D)[:64])  # what a user who is not root reads
    assert short.port_type is None and short.acs_control is None and "64 bytes" in (short.error or "")


def test_a_looping_capability_list_ends() -> None:
    data = bytearray(_config(6, None))
    data[0x40], data[0x41] = 0x05, 0x40  # a capability pointing at itself
    data[0x100:0x104] = (0x0001 | 1 << 16 | 0x100 << 20).to_bytes(4, "little")
    bridge = parse_config("0000:02:08.0", bytes(data))
    assert bridge.port_type is None and bridge.acs_control is None


def _sysfs(root: Path, acs: int = 0x1D, iommu: str = "DMA-FQ") -> Path:
    chain = ["0000:00:01.1", "0000:01:00.0", "0000:02:08.0"]
    here = root / "devices" / "pci0000:00"
    for bdf, kind in zip(chain, (4, 5, 6), strict=True):
        here = here / bdf
        here.mkdir(parents=True)
        (here / "config").write_bytes(_config(kind, acs if kind == 6 else None))
    gpu = here / "0000:03:00.0"
    gpu.mkdir()
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    os.symlink(gpu, root / "bus" / "pci" / "devices" / "0000:03:00.0")
    group = root / "kernel" / "iommu_groups" / "7"
    group.mkdir(parents=True)
    (group / "type").write_text(iommu + "\n")
    os.symlink(group, gpu / "iommu_group")
    return root


def test_gpu_path_from_sysfs(tmp_path: Path) -> None:
    path = read_gpu_path(0, "00000000:03:00.0", str(_sysfs(tmp_path)))
    assert path is not None and path.error is None and path.iommu_group_type == "DMA-FQ"
    assert [(b.bdf, b.port_type, b.acs_control) for b in path.bridges] == [
        ("0000:00:01.1", 4, None), ("0000:01:00.0", 5, None), ("0000:02:08.0", 6, 0x1D)]


def test_a_device_link_leading_out_of_sysfs_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    (root / "bus" / "pci" / "devices").mkdir(parents=True)
    outside = tmp_path / "etc"
    outside.mkdir()
    os.symlink(outside, root / "bus" / "pci" / "devices" / "0000:03:00.0")
    path = read_gpu_path(0, "00000000:03:00.0", str(root))
    assert path is not None and path.bridges == [] and "not a PCI device" in (path.error or "")


def test_an_iommu_link_leading_elsewhere_is_not_read(tmp_path: Path) -> None:
    root = _sysfs(tmp_path)
    gpu = root / "devices" / "pci0000:00" / "0000:00:01.1" / "0000:01:00.0" / "0000:02:08.0" / "0000:03:00.0"
    os.unlink(gpu / "iommu_group")
    os.symlink(tmp_path, gpu / "iommu_group")
    path = read_gpu_path(0, "00000000:03:00.0", str(root))
    assert path is not None and path.iommu_group_type is None


def test_only_a_bus_id_becomes_a_path() -> None:
    assert sysfs_bdf("00000000:CB:00.0") == "0000:cb:00.0"
    assert sysfs_bdf("../../etc") is None and sysfs_bdf("0000:01:00.0/../x") is None and sysfs_bdf(None) is None


def test_probe_stack_on_nothing_readable_is_facts_not_a_crash(tmp_path: Path) -> None:
    gpu = probe_gpus(FakeNvml(json.loads((FIXTURES / "inventory" / "boxes" / "pro6000-mixed.json").read_text())))
    stack = probe_stack(gpu, proc_version=str(tmp_path / "v"), sys_version=str(tmp_path / "s"),
                        kmsg=str(tmp_path / "k"), sys_root=str(tmp_path / "sys"), cmdline=str(tmp_path / "c"))
    assert stack.kernel_module.flavour is None and not stack.xid.read and stack.error
    assert [p.gpu for p in stack.gpu_paths or []] == [0, 1] and all(p.error for p in stack.gpu_paths or [])


def test_the_new_facts_round_trip_through_an_inventory(tmp_path: Path) -> None:
    gpu = probe_gpus(FakeNvml(json.loads((FIXTURES / "inventory" / "boxes" / "pro6000-mixed.json").read_text())))
    stack = probe_stack(gpu, proc_version=str(STACK / "proc-driver-nvidia-version-proprietary.txt"),
                        kmsg=str(tmp_path / "k"), sys_root=str(_sysfs(tmp_path / "sys")), cmdline=str(tmp_path / "c"))
    image = PodmanImage(id="f" * 64, env=["CUDA_VERSION=12.8.1", "NCCL_VERSION=2.26.2-1"])
    facts = HostFacts(gpu=gpu, stack=stack, podman=PodmanFacts(installed=True, images=[image]))
    replayed = facts_from_json(json.loads(facts.model_dump_json()), "capture.json")
    assert replayed == facts
    assert replayed.stack.kernel_module.flavour == "proprietary"
    assert replayed.podman.images[0].nccl_version == "2.26.2" and replayed.podman.images[0].cuda_version == (12, 8)


def test_older_inventories_have_no_stack_facts() -> None:
    facts = facts_from_json({"rigctl": "1", "gpu": {"available": False}}, "old.json")
    assert facts.stack.gpu_paths is None and facts.stack.kernel_module.flavour is None
    assert GpuInventory(available=False).devices == []


def test_image_env_from_one_podman_image_inspect(tmp_path: Path) -> None:
    from rigctl.host.probes import with_env

    podman = tmp_path / "podman"
    inspected = [{"Id": "a" * 64, "Config": {"Env": ["PATH=/usr/bin", "CUDA_VERSION=13.1.0", "NCCL_VERSION=2.28.9-1"]}},
                 {"Id": "b" * 64, "Config": {}}]
    podman.write_text(f"#!/bin/sh\n[ \"$1 $2 $3 $4 $5\" = 'image inspect --format json --' ] || exit 2\n"
                      f"cat <<'X'\n{json.dumps(inspected)}\nX\n")
    podman.chmod(0o755)
    images = [PodmanImage(id="a" * 64), PodmanImage(id="b" * 64), PodmanImage(id="not an id")]
    got = with_env(images, str(podman))
    assert got[0].cuda_version == (13, 1) and got[0].nccl_version == "2.28.9"
    assert got[1].env is None and got[2].env is None  # no Env said; never passed to podman
    broken = tmp_path / "broken"
    broken.write_text("#!/bin/sh\necho '{not json'\n")
    broken.chmod(0o755)
    assert with_env(images, str(broken)) == images
