"""render chooses the GPUs as `up` does and pins their UUIDs; it guesses indices only without GPU facts,
and then says so as a warning (stderr in text, a note in JSON)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.support.nvml_fake import FakeNvml

from rigctl.host.facts import HostFacts
from rigctl.host.nvml import probe_gpus
from rigctl.plan.plan import make_plan, place_gpus
from rigctl.podman_versions import DEFAULT_PODMAN
from rigctl.recipe.load import load
from rigctl.recipe.model import Recipe
from rigctl.render.units import render_units

BOXES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "boxes"


def box(name: str) -> dict[str, Any]:
    capture: dict[str, Any] = json.loads((BOXES / f"{name}.json").read_text())
    return capture


def pro_5090_pro() -> dict[str, Any]:
    """The issue's box: a PRO 6000 at index 0, the RTX 5090 at 1, a PRO 6000 at 2 (the captured
    5090-and-two-pro6000 box with its first two devices swapped, the pair table following them)."""
    capture = box("5090-and-two-pro6000")
    d = capture["devices"]
    capture["devices"] = [d[1], d[0], d[2]]
    old = capture["topology"]  # 0 = 5090, 1 and 2 = PRO 6000 before the swap
    capture["topology"] = {"0,1": old["0,1"], "0,2": old["1,2"], "1,2": old["0,2"]}
    return capture


def facts(capture: dict[str, Any]) -> HostFacts:
    return HostFacts(gpu=probe_gpus(FakeNvml(capture), process_name=lambda pid: None))


@pytest.fixture
def glm() -> Recipe:
    return load("glm53-flash").recipe


def devices(text: str) -> list[str]:
    return [line.removeprefix("AddDevice=nvidia.com/gpu=") for line in text.split("\n")
            if line.startswith("AddDevice=")]


def test_the_5090_between_two_pro6000_is_not_in_the_unit(glm: Recipe) -> None:
    host = facts(pro_5090_pro())
    names = {g.uuid: g.name for g in host.gpu.devices}
    placement = place_gpus(glm, host)
    assert placement.ok and placement.warning is None
    assert placement.choice is not None and placement.choice.indices == [0, 2]
    unit = render_units(glm, podman_version=DEFAULT_PODMAN, gpu_ids=placement.ids).container_file.text
    pinned = devices(unit)
    assert pinned == [host.gpu.devices[0].uuid, host.gpu.devices[2].uuid]
    assert all(names[u].startswith("NVIDIA RTX PRO 6000") for u in pinned)


@pytest.mark.parametrize("capture", [pro_5090_pro(), box("5090-and-two-pro6000"), box("pro6000-mixed"),
                                     box("pro6000-busy")])
def test_render_and_up_pin_the_same_gpus(glm: Recipe, capture: dict[str, Any]) -> None:
    host = facts(capture)
    plan = make_plan(glm, host, scope="system")  # what `up --dry-run` would install
    assert plan.gpu_ids and all(u.startswith("GPU-") for u in plan.gpu_ids)
    assert place_gpus(glm, host).ids == plan.gpu_ids


def test_explicit_indices_are_pinned_by_uuid_when_nvml_answers(glm: Recipe) -> None:
    host = facts(pro_5090_pro())
    placement = place_gpus(glm, host, ["2", "0"])
    assert placement.ids == [host.gpu.devices[2].uuid, host.gpu.devices[0].uuid]
    refused = place_gpus(glm, host, ["0", "7"])
    assert not refused.ok and "no GPU with index 7" in refused.problems[0]


def test_no_layout_on_the_host_is_refused_not_guessed(glm: Recipe) -> None:
    placement = place_gpus(glm, facts(box("rtx6000d-pair")))
    assert not placement.ok and placement.ids is None
    assert "need 2 matching GPU(s), found 0" in placement.problems[0]
    assert any("NVIDIA RTX 6000D" in p for p in placement.problems)


def test_without_gpu_facts_indices_are_a_warned_guess(glm: Recipe) -> None:
    placement = place_gpus(glm, facts(box("no-nvml")))
    assert placement.ok and placement.ids is None and placement.choice is None
    assert placement.warning and "NVML is unavailable" in placement.warning and "indices 0, 1" in placement.warning
    unit = render_units(glm, podman_version=DEFAULT_PODMAN, gpu_ids=placement.ids).container_file.text
    assert devices(unit) == ["0", "1"]


def test_without_gpu_facts_named_gpus_are_no_guess() -> None:
    glm = load("glm53-flash").recipe
    no_nvml = facts(box("no-nvml"))
    given = place_gpus(glm, no_nvml, ["GPU-a", "GPU-b"])
    assert given.ids == ["GPU-a", "GPU-b"] and given.warning is None
    selected = load("glm53-flash", sets=["gpus.select=['1','2']"]).recipe
    by_recipe = place_gpus(selected, no_nvml)
    assert by_recipe.ids is None and by_recipe.warning is None  # render takes gpus.select
    cpu = load("qwen3-8b-vllm", sets=["gpus.count=0", "gpus.tensor_parallel=1"]).recipe
    assert place_gpus(cpu, no_nvml).ids == []


def rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_cli_render_of_a_replayed_box_pins_the_pro6000s(glm: Recipe, tmp_path: Path) -> None:
    host = facts(pro_5090_pro())
    inventory = tmp_path / "box.json"
    inventory.write_text(host.model_dump_json())
    done = rigctl("render", "glm53-flash", "--inventory", str(inventory), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert devices(data["files"][0]["text"]) == [host.gpu.devices[0].uuid, host.gpu.devices[2].uuid]
    assert [g["index"] for g in data["gpus"]] == [0, 2]
    assert not [n for n in data["notes"] if n["kind"] in ("warning", "assumed")]


def test_cli_render_on_this_host(glm: Recipe) -> None:
    text = rigctl("render", "glm53-flash")
    data = json.loads(rigctl("render", "glm53-flash", "--json").stdout)
    here = probe_gpus()
    if not here.available:  # this machine (CI): no GPU facts, so a guess, said on stderr and in the JSON
        assert text.returncode == 0, text.stderr
        assert "rigctl render: warning: no GPU facts here (NVML is unavailable" in text.stderr
        assert "warning" not in text.stdout and "AddDevice=nvidia.com/gpu=0" in text.stdout
        assert data["notes"][0]["kind"] == "warning" and "indices 0, 1" in data["notes"][0]["message"]
    else:  # a GPU host: the layout `up` would choose, or a refusal that says why
        choice = place_gpus(glm, HostFacts(gpu=here))
        if choice.ok:
            assert devices(data["files"][0]["text"]) == choice.ids
        else:
            assert text.returncode == 1 and data["error"]["code"] == "no-gpu-layout"
