"""gpu-allreduce: command construction and the classifier, on CPU (the program itself needs GPUs)."""

from __future__ import annotations

import json
from collections.abc import Callable

from rigctl.host.facts import HostFacts
from rigctl.preflight.allreduce import (
    HANG_FIX,
    PROGRAM,
    RESULT_TAG,
    classify,
    deep_allreduce,
    describe,
    host_plan,
    podman_plan,
)
from rigctl.preflight.finding import Severity
from rigctl.preflight.layout import choose_gpus
from rigctl.recipe.model import Recipe
from rigctl.util.proc import Completed

Facts = Callable[..., HostFacts]


def test_podman_plan_runs_in_the_recipes_image_with_the_chosen_gpus(recipe_with: Callable[..., Recipe],
                                                                     facts_for: Facts) -> None:
    recipe = recipe_with("glm53-flash", "container.env.NCCL_P2P_DISABLE='1'")
    choice = choose_gpus(recipe, facts_for(recipe, "5090-and-two-pro6000"))
    plan = podman_plan(recipe, choice)
    argv = plan.argv
    assert argv[:3] == ["podman", "run", "--rm"] and "--pull=never" in argv
    devices = [argv[i + 1] for i, a in enumerate(argv) if a == "--device"]
    assert devices == [f"nvidia.com/gpu={u}" for u in choice.uuids] and len(devices) == 2
    assert "--ipc=host" in argv and not any(a.startswith("--shm-size") for a in argv)  # never both
    assert "NCCL_P2P_DISABLE=1" in argv  # tested with the environment the engine will have
    assert argv[argv.index("--entrypoint") + 1] == "python3"
    assert argv[-6:-3] == [recipe.image, "-c", PROGRAM] and argv[-3:] == ["2", "256", "20"]
    assert "<program>" in describe(plan)


def test_host_plan_pins_gpus_by_uuid(glm: Recipe, facts_for: Facts) -> None:
    choice = choose_gpus(glm, facts_for(glm, "pro6000-mixed"))
    plan = host_plan(glm, choice, "/usr/bin/python3")
    assert plan.argv[:3] == ["/usr/bin/python3", "-c", PROGRAM] and plan.argv[3] == "2"
    assert plan.env["CUDA_VISIBLE_DEVICES"] == ",".join(choice.uuids)
    assert plan.env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_program_compiles() -> None:
    compile(PROGRAM, "<allreduce>", "exec")


def _done(rc: int, result: dict[str, object] | None = None, stderr: str = "") -> Completed:
    out = RESULT_TAG + json.dumps(result) + "\n" if result is not None else ""
    return Completed(("python3",), rc, out, stderr)


def test_classifier(glm: Recipe, facts_for: Facts) -> None:
    plan = host_plan(glm, choose_gpus(glm, facts_for(glm, "pro6000-matched")))
    good = classify(_done(0, {"ok": True, "world": 2, "bytes": 256 << 20, "busbw_gbps": 41.57, "torch": "2.13",
                              "nccl": "2.28.3", "expected": 3.0, "got": 3.0}), plan)
    assert good.severity is Severity.OK and "41.6 GB/s" in good.message
    wrong = classify(_done(0, {"ok": False, "bad_elements": 12, "got": 2.0, "expected": 3.0}), plan)
    assert wrong.severity is Severity.FAIL and "WRONG RESULTS" in wrong.message and "NCCL_P2P_DISABLE=1" in (
        wrong.fix or "")
    hang = classify(Completed(("python3",), 124, "", "timed out"), plan)
    assert hang.severity is Severity.FAIL and "hang" in hang.message and hang.fix == HANG_FIX
    assert "iommu=pt" in HANG_FIX and "--disable-custom-all-reduce" in HANG_FIX
    self_killed = classify(_done(3, {"ok": False, "hang": True}), plan)
    assert self_killed.severity is Severity.FAIL and self_killed.fix == HANG_FIX
    crashed = classify(_done(1, None, stderr="RuntimeError: NCCL error: unhandled system error"), plan)
    assert crashed.severity is Severity.ERROR and "unhandled system error" in crashed.message


def test_deep_skips_one_gpu(recipe_with: Callable[..., Recipe], facts_for: Facts) -> None:
    qwen = recipe_with("qwen3-8b-vllm")
    facts = facts_for(qwen, "pro6000-single")
    verdict = deep_allreduce(qwen, facts, choose_gpus(qwen, facts))["gpu-allreduce"]
    assert verdict.severity is Severity.SKIP
