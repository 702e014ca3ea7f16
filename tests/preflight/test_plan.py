"""The dry run's plan: preflight, the GPUs chosen, and the unit rendered for the facts' podman."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rigctl.host.facts import HostFacts, PodmanFacts, SystemdFacts
from rigctl.places import Scope
from rigctl.plan.plan import make_plan
from rigctl.recipe.model import Recipe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def test_mixed_pair_plan_pins_both_cards_by_uuid(glm: Recipe, facts_for: Callable[..., HostFacts]) -> None:
    facts = facts_for(glm, "pro6000-mixed")
    plan = make_plan(glm, facts, scope="system")
    assert plan.ok, [f for f in plan.report.findings if f.severity.value in {"fail", "error"}]
    uuids = [g.uuid for g in facts.gpu.devices]
    unit = plan.rendered.files[0].text if plan.rendered else ""
    for uuid in uuids[:2]:
        assert f"AddDevice=nvidia.com/gpu={uuid}" in unit
    assert "AddDevice=nvidia.com/gpu=0" not in unit
    assert plan.report.finding("gpu-power").severity.value == "warn"  # the slower card paces the pair
    doc = plan.to_dict()
    assert doc["would_install"] is True
    assert doc["files"][0]["path"] == "/etc/containers/systemd/rigctl-glm53-flash.container"


def test_the_5090_is_left_out(glm: Recipe, facts_for: Callable[..., HostFacts]) -> None:
    facts = facts_for(glm, "5090-and-two-pro6000")
    plan = make_plan(glm, facts, scope="user")
    chosen = {g.name for g in plan.report.choice.gpus}
    assert chosen and all("RTX PRO 6000" in name for name in chosen)
    assert plan.unit_dir.endswith("containers/systemd")


def test_failing_preflight_still_shows_the_unit_but_would_not_install(
    glm: Recipe, facts_for: Callable[..., HostFacts]
) -> None:
    facts = facts_for(glm, "rtx6000d-pair")  # same chip, wrong card: never matches a PRO 6000 recipe
    plan = make_plan(glm, facts, scope="system")
    assert not plan.ok
    assert plan.rendered is not None
    assert "AddDevice=nvidia.com/gpu=0" in plan.rendered.files[0].text  # placeholders, and said so
    assert any("placeholders" in n for n in plan.notes)


def test_podman_without_quadlet_renders_for_a_newer_one_and_says_so(
    glm: Recipe, facts_for: Callable[..., HostFacts]
) -> None:
    facts = facts_for(glm, "pro6000-matched", podman=PodmanFacts(installed=True, version="4.3.1"))
    plan = make_plan(glm, facts, scope="system")
    assert plan.render_error and "quadlet" in plan.render_error
    assert plan.rendered is not None and not plan.ok
    assert any("rendered for podman 5.4" in n for n in plan.notes)


def test_up_dry_run_replays_the_real_h200_inventory() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rigctl", "up", "qwen3-8b-vllm", "--dry-run", "--inventory",
         str(FIXTURES / "h200.json"), "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    doc = json.loads(done.stdout)
    assert doc["command"] == "up" and doc["dry_run"] is True
    by_id = {f["id"]: f["severity"] for f in doc["findings"]}
    assert by_id["gpu-count"] == "ok" and by_id["gpu-driver"] == "ok"
    (gpu,) = doc["gpus"]
    assert gpu["name"] == "NVIDIA H200"
    assert f"AddDevice=nvidia.com/gpu={gpu['uuid']}" in doc["files"][0]["text"]
    assert done.returncode == (0 if doc["ok"] else 1)


def test_inventory_without_dry_run_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "rigctl", "up", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 2
    assert "--inventory" in done.stderr


def test_systemd_check_follows_the_scope(glm: Recipe, facts_for: Callable[..., HostFacts]) -> None:
    from rigctl.host.facts import SystemdFacts

    # root on a box whose PID 1 is not systemd, with a `systemd --user` manager running (this testbed)
    facts = facts_for(glm, "pro6000-matched",
                      systemd=SystemdFacts(system_manager=False, user_manager=True, user="root", uid=0, linger=True))
    assert make_plan(glm, facts, scope="system").report.finding("systemd").severity.value == "fail"
    assert make_plan(glm, facts, scope="user").report.finding("systemd").severity.value == "ok"


def test_render_for_a_captured_inventory_pins_its_gpus() -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "rigctl", "render", *args, "--inventory",
                               str(FIXTURES / "h200.json"), "--json"],
                              capture_output=True, text=True, timeout=60, check=False)

    inventory = json.loads((FIXTURES / "h200.json").read_text())
    uuid = inventory["gpu"]["devices"][0]["uuid"]
    done = run("qwen3-8b-vllm")
    assert done.returncode == 0, done.stderr
    assert f"AddDevice=nvidia.com/gpu={uuid}" in json.loads(done.stdout)["files"][0]["text"]
    refused = run("glm53-flash")  # an H200 is no RTX PRO 6000
    assert refused.returncode == 3
    assert "no GPU layout" in json.loads(refused.stdout)["error"]["message"]


def test_up_dry_run_replays_the_real_two_h200_inventory() -> None:
    """tests/fixtures/inventory/h200x2.json: `rigctl inventory --json` on two NVLink-linked H200s (device
    machine, driver 580.159.04). A TP2 plan takes both, each pinned by its UUID."""
    done = subprocess.run(
        [sys.executable, "-m", "rigctl", "up", "qwen3-8b-vllm", "--dry-run", "--inventory",
         str(FIXTURES / "h200x2.json"), "--set", "gpus.count=2", "--set", "gpus.tensor_parallel=2", "--json"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    doc = json.loads(done.stdout)
    by_id = {f["id"]: f["severity"] for f in doc["findings"]}
    assert by_id["gpu-count"] == "ok" and by_id["gpu-driver"] == "ok", by_id
    assert [g["name"] for g in doc["gpus"]] == ["NVIDIA H200", "NVIDIA H200"]
    uuids = {g["uuid"] for g in doc["gpus"]}
    assert uuids == {"GPU-e479aa74-b61a-2630-c11e-553d40ea9ef3", "GPU-1cd41d90-91d4-f85d-9d83-503fb1fdc24f"}
    for uuid in uuids:
        assert f"AddDevice=nvidia.com/gpu={uuid}" in doc["files"][0]["text"]


def test_the_other_scope_is_judged_from_the_facts_gathered(glm: Recipe, facts_for: Callable[..., HostFacts]) -> None:
    """The `--user` hint of a failed system-scope plan comes from the facts gathered once (the other manager's
    generator, the managers that answer), not from asking this host again."""
    none_here = PodmanFacts(installed=True, version="5.4.2", quadlet_scope="system",
                            quadlet_elsewhere="/usr/lib/systemd/user-generators/podman-user-generator")
    facts = facts_for(glm, "pro6000-matched", podman=none_here)
    plan = make_plan(glm, facts, scope=Scope.SYSTEM)
    assert plan.report.other_scope is not None and "user manager has one" in plan.report.other_scope
    assert "podman-user-generator" in plan.report.other_scope
    assert make_plan(glm, facts, scope=Scope.USER).report.other_scope is None  # a user cannot take the system's
    found = none_here.model_copy(update={"quadlet": "/usr/libexec/podman/quadlet"})
    assert make_plan(glm, facts_for(glm, "pro6000-matched", podman=found), scope=Scope.SYSTEM).report.other_scope is None
    no_system = facts_for(glm, "pro6000-matched", systemd=SystemdFacts(system_manager=False, user_manager=True))
    assert make_plan(glm, no_system, scope=Scope.SYSTEM).report.other_scope == (
        "no systemd system manager runs here, a user manager does")
    captured_for_user = none_here.model_copy(update={"quadlet_scope": "user"})  # says nothing of the system's
    assert make_plan(glm, facts_for(glm, "pro6000-matched", podman=captured_for_user),
                     scope=Scope.SYSTEM).report.other_scope is None


def test_the_dry_run_pins_the_gpus_render_pins(glm: Recipe, facts_for: Callable[..., HostFacts]) -> None:
    """One rule for a unit's GPUs (plan.plan.place_gpus): the dry run's unit names the GPUs `render` would,
    and shows placeholders exactly where render could not pin any."""
    from rigctl.host.facts import GpuInventory
    from rigctl.plan.plan import place_gpus

    seen = facts_for(glm, "pro6000-mixed")
    blind = seen.model_copy(update={"gpu": GpuInventory(available=False, error="NVML Shared Library Not Found")})
    named = ["GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"]
    # NVML unavailable and --gpus given: the operator's GPUs, as `render --gpus` writes them (the dry run
    # used to show indices 0 and 1 instead)
    plan = make_plan(glm, blind, scope="system", gpus=named)
    unit = plan.rendered.files[0].text if plan.rendered else ""
    assert all(f"AddDevice=nvidia.com/gpu={g}" in unit for g in named) and "AddDevice=nvidia.com/gpu=0" not in unit
    assert not plan.ok  # preflight still fails without NVML: nothing would be installed
    cases = [(seen, None), (seen, [g.uuid for g in seen.gpu.devices[:2]]), (blind, named), (blind, None),
             (facts_for(glm, "rtx6000d-pair"), None)]
    for facts, gpus in cases:
        plan = make_plan(glm, facts, scope="system", gpus=gpus)
        placed = place_gpus(glm, facts, gpus)
        unit = plan.rendered.files[0].text if plan.rendered else ""
        assert plan.placeholders is not placed.pinned, (gpus, placed)
        if placed.pinned:
            assert placed.ids and all(f"AddDevice=nvidia.com/gpu={i}" in unit for i in placed.ids), (gpus, unit)
            assert plan.gpu_ids == placed.ids
