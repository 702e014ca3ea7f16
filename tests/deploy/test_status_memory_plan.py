"""`status` shows, per GPU of a deployment, the memory the gpu-fit plan gives the engine beside what the
service's processes hold now (#22), from the recipe the deployment came from."""

from __future__ import annotations

from collections.abc import Sequence

from rigctl.deploy.state import DeploymentRecord
from rigctl.deploy.status import memory_plan
from rigctl.host.facts import Gpu, GpuProcess
from rigctl.places import Scope

H200_BYTES = 150_754_820_096  # memory.total of the captured H200 (nvml-h200.json)


class TwoGpus:
    """A GpuMemory that answers devices() as NVML would on a two-GPU box with the engine's workers on it."""

    def __init__(self, holders: dict[int, int] | None) -> None:
        self.holders = holders

    def devices(self, gpu_ids: Sequence[str]) -> list[Gpu] | None:
        if self.holders is None:
            return None  # no NVML
        return [Gpu(index=i, uuid=f"GPU-{i}", name="NVIDIA H200", memory_total_bytes=H200_BYTES,
                    processes=[GpuProcess(pid=pid, used_memory_bytes=120 << 30) for pid, gpu in self.holders.items()
                               if gpu == i]) for i in range(2)]

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        return None

    def used_by(self, pids: object) -> int | None:
        return None


def _record(gpu_ids: list[str]) -> DeploymentRecord:
    return DeploymentRecord(recipe="qwen3-8b-vllm", scope=Scope.USER, unit="rigctl-qwen3-8b-vllm.service",
                            container="rigctl-qwen3-8b-vllm", unit_dir="/x", unit_files=[], endpoint="http://127.0.0.1:1",
                            served_name="m", image="i", gpu_ids=gpu_ids, recipe_source="qwen3-8b-vllm")


def test_planned_beside_used_for_the_deployments_gpu() -> None:
    rows = memory_plan(_record(["1"]), {4242, 4243}, TwoGpus({4242: 1, 9999: 1}))  # type: ignore[arg-type]
    assert rows is not None and [r["gpu"] for r in rows] == [1]
    (row,) = rows
    assert row["used_bytes"] == 120 << 30  # only the service's own process, not pid 9999's
    assert row["planned_bytes"] is not None and 0 < row["planned_bytes"] <= H200_BYTES
    assert row["basis"]


def test_nothing_to_say_without_nvml_gpus_or_a_record() -> None:
    assert memory_plan(_record(["0"]), {1}, TwoGpus(None)) is None  # type: ignore[arg-type]
    assert memory_plan(_record([]), {1}, TwoGpus({1: 0})) is None  # type: ignore[arg-type]
    assert memory_plan(None, {1}, TwoGpus({1: 0})) is None  # type: ignore[arg-type]
    assert memory_plan(_record(["0"]), None, TwoGpus({1: 0})) is None  # type: ignore[arg-type]
