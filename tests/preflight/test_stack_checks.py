"""The stack under the engine (#34) on the story's box: a TP2 vLLM recipe on a Blackwell pair (pro6000-mixed),
each test breaking one layer: the image's CUDA, its NCCL, the custom all-reduce, a narrow link, the kernel
module, ACS, the IOMMU, Xids. The clean box (matching image, --disable-custom-all-reduce) raises none."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.preflight.conftest import box_capture, healthy_facts

from rigctl.host.facts import (
    GpuPath,
    HostFacts,
    KernelModule,
    PcieBridge,
    StackFacts,
    XidEvent,
    XidLog,
)
from rigctl.preflight.finding import Severity
from rigctl.preflight.known_bad import bundled
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.model import Recipe

NEW = ("kernel-module", "image-cuda", "pcie-link", "pcie-acs", "iommu", "gpu-xid", "known-bad")
DISABLE = "--disable-custom-all-reduce"
CLEAN_ENV = ["PATH=/usr/local/sbin:/usr/bin", "NV_CUDA_CUDART_VERSION=12.8.90-1", "CUDA_VERSION=12.8.1",
             "NCCL_VERSION=2.27.3-1"]
OPEN = KernelModule(flavour="open", version="580.95.05", source="/proc/driver/nvidia/version")


def with_args(recipe: Recipe, *args: str) -> Recipe:
    return recipe.model_copy(update={"engine": recipe.engine.model_copy(update={"args": [*recipe.engine.args, *args]})})


def paths(*, acs: int = 0, port_type: int = 6, iommu: str = "identity") -> list[GpuPath]:
    """Both GPUs under one PCIe switch (root port 00:01.1, switch up 01:00.0, one downstream port each)."""
    def chain(down: str, gpu_bus: str, index: int) -> GpuPath:
        return GpuPath(gpu=index, bdf=f"0000:{gpu_bus}:00.0", iommu_group_type=iommu, bridges=[
            PcieBridge(bdf="0000:00:01.1", port_type=4, acs_control=0x1D),
            PcieBridge(bdf="0000:01:00.0", port_type=5, acs_control=None),
            PcieBridge(bdf=down, port_type=port_type, acs_control=acs)])
    return [chain("0000:02:08.0", "03", 0), chain("0000:02:10.0", "04", 1)]


def clean(recipe: Recipe, box: str | dict[str, Any] = "pro6000-mixed", *, env: list[str] | None = None,
          stack: StackFacts | None = None) -> HostFacts:
    facts = healthy_facts(recipe, box)
    image = facts.podman.images[0].model_copy(update={"env": CLEAN_ENV if env is None else env})
    stack = stack or StackFacts(kernel_module=OPEN, xid=XidLog(read=True, source="/dev/kmsg"), gpu_paths=paths())
    return facts.model_copy(update={"podman": facts.podman.model_copy(update={"images": [image]}), "stack": stack})


def finding(recipe: Recipe, facts: HostFacts, check: str) -> tuple[Severity, str, str | None]:
    f = run_preflight(recipe, facts).finding(check)
    return f.severity, f.message, f.fix


@pytest.fixture
def tp2(glm: Recipe) -> Recipe:
    """The story's recipe with the flag the check asks for: the clean stack."""
    return with_args(glm, DISABLE)


def test_clean_box_raises_none_of_them(tp2: Recipe) -> None:
    report = run_preflight(tp2, clean(tp2))
    got = {i: (report.finding(i).severity, report.finding(i).message) for i in NEW}
    assert all(s is Severity.OK for s, _ in got.values()), got
    assert report.ok


def test_healthy_facts_without_stack_facts_raise_nothing(glm: Recipe, facts_for: Callable[..., HostFacts]) -> None:
    """An inventory of an older rigctl (no stack facts, an image never inspected) is judged as unknown, not bad."""
    report = run_preflight(glm, facts_for(glm, "pro6000-mixed"))
    assert {report.finding(i).severity for i in NEW} <= {Severity.OK, Severity.SKIP, Severity.WARN}
    assert report.ok


def test_image_newer_cuda_than_driver_is_refused(tp2: Recipe) -> None:
    env = ["CUDA_VERSION=13.1.0", "NCCL_VERSION=2.28.9-1"]  # the driver (580.95.05) says CUDA 13.0
    s, msg, fix = finding(tp2, clean(tp2, env=env), "image-cuda")
    assert s is Severity.FAIL and "CUDA 13.1" in msg and "13.0" in msg and "804" in msg
    assert fix and "driver for CUDA 13.1" in fix
    assert not run_preflight(tp2, clean(tp2, env=env)).ok


def test_image_cuda_from_nv_cuda_when_cuda_version_is_missing(tp2: Recipe) -> None:
    s, msg, _ = finding(tp2, clean(tp2, env=["NV_CUDA_CUDART_VERSION=13.2.51-1"]), "image-cuda")
    assert s is Severity.FAIL and "NV_CUDA_CUDART_VERSION=13.2.51-1" in msg


def test_image_declaring_no_cuda_is_not_judged(tp2: Recipe) -> None:
    """Nothing to judge is a skip that names the three ways to say it, not an all-clear."""
    s, msg, _ = finding(tp2, clean(tp2, env=["PATH=/usr/bin"]), "image-cuda")
    assert s is Severity.SKIP and "the local image's Env: declares none" in msg
    assert "pull the image" in msg and "registry's config" in msg and "image_declares.cuda" in msg


def test_known_bad_nccl_in_the_image_is_named(tp2: Recipe) -> None:
    env = ["CUDA_VERSION=12.8.1", "NCCL_VERSION=2.26.2-1"]
    s, msg, fix = finding(tp2, clean(tp2, env=env), "known-bad")
    assert s is Severity.FAIL and "nccl-2.26.2-illegal-memory-access" in msg and "NCCL 2.26.2" in msg
    assert "NVIDIA/nccl/issues/2418" in msg and fix and "--force known-bad" in fix


def test_custom_all_reduce_at_tp2_on_sm120_is_flagged(glm: Recipe) -> None:
    s, msg, fix = finding(glm, clean(glm), "known-bad")
    assert s is Severity.WARN and "vllm-custom-allreduce-sm12x-tp" in msg and "TP2" in msg and "sm_120" in msg
    assert "custom_all_reduce.cuh" in msg and fix and DISABLE in fix


def test_custom_all_reduce_flag_with_a_value_counts(glm: Recipe) -> None:
    assert finding(with_args(glm, f"{DISABLE}=true"), clean(glm), "known-bad")[0] is Severity.OK


def test_unknown_nccl_is_said_not_assumed(tp2: Recipe) -> None:
    s, msg, _ = finding(tp2, clean(tp2, env=["CUDA_VERSION=12.8.1"]), "known-bad")
    assert s is Severity.OK and "not judged: nccl-2.26.2-illegal-memory-access" in msg


def test_x4_link_of_x16_is_flagged(tp2: Recipe) -> None:
    box = box_capture("pro6000-mixed")
    box["devices"][1]["nvmlDeviceGetCurrPcieLinkWidth"] = {"ok": 4}
    s, msg, fix = finding(tp2, clean(tp2, box), "pcie-link")
    assert s is Severity.WARN and "GPU 1" in msg and "x4 of x16" in msg and fix and "x16" in fix


def test_proprietary_module_on_blackwell_fails(tp2: Recipe) -> None:
    module = KernelModule(flavour="proprietary", version="580.95.05")
    s, msg, fix = finding(tp2, clean(tp2, stack=StackFacts(kernel_module=module)), "kernel-module")
    assert s is Severity.FAIL and "proprietary" in msg and fix and "open" in fix


def test_proprietary_module_with_no_gpu_visible_names_the_cause(tp2: Recipe) -> None:
    module = KernelModule(flavour="proprietary", version="580.95.05")
    box = box_capture("pro6000-mixed") | {"count": 0, "devices": []}
    s, msg, _ = finding(tp2, clean(tp2, box, stack=StackFacts(kernel_module=module)), "kernel-module")
    assert s is Severity.FAIL and "no GPU the recipe accepts is visible" in msg


def test_acs_redirect_on_the_switch_between_the_gpus_fails(tp2: Recipe) -> None:
    stack = StackFacts(kernel_module=OPEN, gpu_paths=paths(acs=0x1D))
    s, msg, fix = finding(tp2, clean(tp2, stack=stack), "pcie-acs")
    assert s is Severity.FAIL and "0000:02:08.0" in msg and "switch downstream port" in msg
    assert fix and "setpci -s 0000:02:08.0 ECAP_ACS+6.w=0000" in fix and "pci=noacs" in fix


def test_acs_on_root_ports_only_is_no_finding(tp2: Recipe) -> None:
    stack = StackFacts(kernel_module=OPEN, gpu_paths=paths(acs=0x1D, port_type=4))
    s, msg, _ = finding(tp2, clean(tp2, stack=stack), "pcie-acs")
    assert s is Severity.OK and "root ports with ACS redirect" in msg


def test_unreadable_config_space_is_a_skip(tp2: Recipe) -> None:
    unread = [p.model_copy(update={"bridges": [PcieBridge(bdf=b.bdf, error="only 64 bytes of config space readable")
                                               for b in p.bridges]}) for p in paths()]
    s, msg, _ = finding(tp2, clean(tp2, stack=StackFacts(kernel_module=OPEN, gpu_paths=unread)), "pcie-acs")
    assert s is Severity.SKIP and "run as root" in msg


def test_translated_iommu_is_flagged(tp2: Recipe) -> None:
    stack = StackFacts(kernel_module=OPEN, gpu_paths=paths(iommu="DMA-FQ"), iommu_cmdline=["amd_iommu=on"])
    s, msg, fix = finding(tp2, clean(tp2, stack=stack), "iommu")
    assert s is Severity.WARN and "DMA-FQ" in msg and "amd_iommu=on" in msg and fix and "iommu=pt" in fix


def test_xid_on_a_chosen_gpu(tp2: Recipe) -> None:
    xid = XidLog(read=True, events=[XidEvent(pci="0000:01:00", xid=79, text="GPU has fallen off the bus"),
                                    XidEvent(pci="0000:44:00", xid=13, text="elsewhere")])
    s, msg, fix = finding(tp2, clean(tp2, stack=StackFacts(kernel_module=OPEN, xid=xid, gpu_paths=paths())),
                          "gpu-xid")
    assert s is Severity.FAIL and "GPU 0: Xid 79 (fallen off the bus)" in msg and "GPU 1" not in msg and fix


def test_application_xid_warns(tp2: Recipe) -> None:
    xid = XidLog(read=True, events=[XidEvent(pci="0000:41:00", xid=13, text="Graphics Exception")] * 3)
    s, msg, _ = finding(tp2, clean(tp2, stack=StackFacts(kernel_module=OPEN, xid=xid, gpu_paths=paths())), "gpu-xid")
    assert s is Severity.WARN and "GPU 1: Xid 13 x3" in msg


def test_bundled_table_rows_are_complete() -> None:
    rows = bundled()
    assert len({r.id for r in rows}) == len(rows) >= 2
    assert all(r.problem and r.fix and r.source and r.error for r in rows)


def test_recipe_rows_extend_the_table(recipe_with: Callable[..., Recipe], facts_for: Callable[..., HostFacts]) -> None:
    nvfp4 = recipe_with("glm53-flash-nvfp4")
    s, msg, _ = finding(nvfp4, clean(nvfp4), "known-bad")
    assert s is Severity.FAIL and "nvfp4-sparse-mla-sm120" in msg and "vllm-custom-allreduce-sm12x-tp" in msg
