"""When no layout fits, the reason each GPU was left out fails under that reason's own check id, naming the
GPUs (and gpu-count fails too); when a layout fits, a GPU left out is no failure of anyone's."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from tests.preflight.conftest import box_capture

from rigctl.host.facts import Gpu, HostFacts, Unsupported
from rigctl.preflight.finding import Severity
from rigctl.preflight.layout import LEFT_OUT_CHECKS, choose_gpus
from rigctl.preflight.registry import PreflightReport, check_ids, run_preflight
from rigctl.recipe.model import Recipe

Facts = Callable[..., HostFacts]
Make = Callable[..., Recipe]


def failing(report: PreflightReport) -> dict[str, str]:
    return {f.id: f.message for f in report.findings if f.severity is Severity.FAIL}


def test_every_left_out_reason_has_a_check_of_its_own() -> None:
    assert set(LEFT_OUT_CHECKS) <= set(check_ids())


def test_rtx6000d_pair_fails_gpu_model_naming_both_cards(glm: Recipe, facts_for: Facts) -> None:
    report = run_preflight(glm, facts_for(glm, "rtx6000d-pair"))
    model = report.finding("gpu-model")
    assert model.severity is Severity.FAIL  # it was `skip` ("no GPUs chosen")
    assert "GPU 0, 1 (NVIDIA RTX 6000D [0x2BB9])" in model.message and "not one of the recipe's" in model.message
    assert model.fix and "RTX 6000D is NOT" in model.fix
    count = report.finding("gpu-count")
    assert count.severity is Severity.FAIL and "GPU 0 (NVIDIA RTX 6000D) left out" in count.message


def test_mig_on_one_of_two_pro6000_fails_gpu_mig_about_that_card(glm: Recipe, facts_for: Facts) -> None:
    report = run_preflight(glm, facts_for(glm, "pro6000-mig"))
    mig = report.finding("gpu-mig")
    assert mig.severity is Severity.FAIL and mig.message != "MIG off"
    assert mig.message.startswith("GPU 0 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition): MIG mode is on")
    assert "no layout of 2 GPU(s) fits" in mig.message
    assert mig.fix and "nvidia-smi -i 0 -mig 0" in mig.fix
    assert "MIG mode is on" in report.finding("gpu-count").message
    # the card that was chosen is fine on every other count: only the cause and gpu-count fail
    assert set(failing(report)) == {"gpu-count", "gpu-mig"}


def test_too_little_memory_fails_gpu_memory(glm: Recipe, facts_for: Facts) -> None:
    capture = box_capture("pro6000-matched")
    capture["devices"][1]["nvmlDeviceGetMemoryInfo"]["ok"] = {"total": 48 * 1024**3, "free": 48 * 1024**3, "used": 0}
    report = run_preflight(glm, facts_for(glm, capture))
    bad = failing(report)
    assert set(bad) == {"gpu-count", "gpu-memory"}
    assert bad["gpu-memory"].startswith("GPU 1 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition): 49,152 MiB < 97,000")
    assert "97,000 MiB per GPU" in bad["gpu-memory"]


def test_wrong_compute_capability_fails_its_check(glm: Recipe, facts_for: Facts) -> None:
    capture = box_capture("pro6000-matched")
    capture["devices"][0]["nvmlDeviceGetCudaComputeCapability"]["ok"] = [10, 0]
    report = run_preflight(glm, facts_for(glm, capture))
    bad = failing(report)
    assert set(bad) == {"gpu-count", "gpu-compute-capability"}
    assert "GPU 0 (NVIDIA RTX PRO 6000 Blackwell Workstation Edition): compute capability 10.0 not in 12.0" in (
        bad["gpu-compute-capability"])


def test_busy_card_of_a_short_set_fails_gpu_busy_with_its_pid(glm: Recipe, facts_for: Facts) -> None:
    capture = box_capture("pro6000-busy")  # GPU 1 holds a 90 GB process
    capture["devices"][0]["nvmlDeviceGetName"]["ok"] = "NVIDIA RTX 6000D"
    report = run_preflight(glm, facts_for(glm, capture))
    bad = failing(report)
    assert set(bad) == {"gpu-count", "gpu-model", "gpu-busy"}
    assert "GPU 0 (NVIDIA RTX 6000D [" in bad["gpu-model"]
    assert "GPU 1:" in bad["gpu-busy"] and "PID 4242 vllm" in bad["gpu-busy"]


def test_a_gpu_the_driver_lost_fails_gpu_driver(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched")
    # what probe_gpus records for a GPU whose handle NVML cannot give (fell off the bus)
    lost = Gpu(index=1, uuid="", name="(unreachable)", unsupported=[
        Unsupported(call="nvmlDeviceGetHandleByIndex", error="NVMLError_GpuIsLost", message="GPU is lost")])
    gpu = facts.gpu.model_copy(update={"devices": [facts.gpu.devices[0], lost], "pairs": []})
    report = run_preflight(glm, facts.model_copy(update={"gpu": gpu}))
    driver = report.finding("gpu-driver")
    assert driver.severity is Severity.FAIL
    assert "GPU 1 ((unreachable)): the driver cannot reach it (NVMLError_GpuIsLost: GPU is lost)" in driver.message
    assert driver.fix and "nvidia-smi -r -i 1" in driver.fix
    assert set(failing(report)) == {"gpu-count", "gpu-driver"}  # not also "product (unreachable)"


def test_other_product_of_a_no_mix_recipe_fails_gpu_model(recipe_with: Make, facts_for: Facts) -> None:
    recipe = recipe_with("glm53-flash", "gpus.allow_mixed=false")
    report = run_preflight(recipe, facts_for(recipe, "pro6000-mixed"))
    bad = failing(report)
    assert set(bad) == {"gpu-count", "gpu-model"}
    assert "does not allow a mix" in bad["gpu-model"]
    fix = report.finding("gpu-model").fix
    assert fix and "allow_mixed: true" in fix


@pytest.mark.parametrize("box", ["5090-and-two-pro6000", "pro6000-matched"])
def test_left_out_gpus_are_no_failure_when_a_layout_fits(glm: Recipe, facts_for: Facts, box: str) -> None:
    report = run_preflight(glm, facts_for(glm, box))
    assert failing(report) == {} and report.ok


def test_left_out_records_each_reason_under_its_check(glm: Recipe, facts_for: Facts) -> None:
    capture: dict[str, Any] = box_capture("rtx6000d-pair")
    capture["devices"][1]["nvmlDeviceGetMigMode"]["ok"] = [1, 1]
    choice = choose_gpus(glm, facts_for(glm, capture))
    assert [(x.index, x.check) for x in choice.left_out] == [(0, "gpu-model"), (1, "gpu-model"), (1, "gpu-mig")]
    report = run_preflight(glm, facts_for(glm, capture))
    assert {"gpu-model", "gpu-mig", "gpu-count"} == set(failing(report))


def test_explicit_selection_is_judged_as_before(glm: Recipe, facts_for: Facts) -> None:
    report = run_preflight(glm, facts_for(glm, "pro6000-mig"), gpus=["1"])  # one GPU where two are needed
    assert report.finding("gpu-mig").message == "MIG off"  # nothing was left out: the operator chose
    assert report.finding("gpu-count").severity is Severity.FAIL
