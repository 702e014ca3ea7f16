"""The link between GPUs, named right (issue #12, point 3): in `rigctl inventory` (text and JSON) and gpu-p2p.

NVLink from the real two-H200 NVML capture through the fake (boxes/h200x2-nvlink.json) and a two-H200
inventory with link facts (h200x2-links.json: `rigctl inventory --json` on the real two-H200 box, with
nvml-h200x2-capture.json beside it; tests/host/test_facts.py holds it to what the fake gathers); the real two-H200
inventory of an older rigctl (h200x2.json, no link fields); PCIe from the field's boxes; a card without
NVLink from the real single-H200 capture.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest
from tests.support.nvml_fake import FakeNvml

from rigctl.cli.views import facts as _facts_view
from rigctl.host.facts import HostFacts
from rigctl.host.gather import load_inventory
from rigctl.host.nvml import probe_gpus
from rigctl.preflight.finding import Severity
from rigctl.preflight.links import NVLINK_LINK_GBPS, PCIE_LANE_GBPS, chosen_links, describe_pair, slowest
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.model import Recipe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
Facts = Callable[..., HostFacts]
TP2 = ("gpus.count=2", "gpus.tensor_parallel=2")


@pytest.fixture
def qwen2(recipe_with: Callable[..., Recipe]) -> Recipe:
    return recipe_with("qwen3-8b-vllm", *TP2)


def _view(facts: HostFacts) -> str:
    out = io.StringIO()
    _facts_view(facts)(out)
    return out.getvalue()


def test_two_h200s_on_18_nvlinks_are_named_nvlink(qwen2: Recipe, facts_for: Facts) -> None:
    facts = facts_for(qwen2, "h200x2-nvlink")
    (link,) = chosen_links(facts.gpu, [0, 1])
    assert link.kind == "nvlink" and link.name == "NVLink 4.0, 18 links (NV18)"
    assert link.ceiling_gbps == pytest.approx(18 * 26.562) and link.basis == "18 links x 26.562 GB/s"
    assert link.text == "GPU 0<->1: NVLink 4.0, 18 links (NV18), 478.1 GB/s each way, P2P ok"
    assert "host bridge" not in link.text  # what the common ancestor alone said before


def test_gpu_p2p_names_the_nvlink_with_figures(qwen2: Recipe, facts_for: Facts) -> None:
    finding = run_preflight(qwen2, facts_for(qwen2, "h200x2-nvlink")).finding("gpu-p2p")
    assert finding.severity is Severity.OK
    assert finding.message.startswith("GPU 0<->1: NVLink 4.0, 18 links (NV18), 478.1 GB/s each way, P2P ok.")
    assert "--deep" in finding.message and "host bridge" not in finding.message
    assert finding.figures == {"pairs": [{"a": 0, "b": 1, "link": "nvlink", "name": "NVLink 4.0, 18 links (NV18)",
                                          "p2p": "ok", "gbps_each_way": 478.1}]}


def test_pcie_pair_names_the_common_ancestor_and_the_speed(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched")
    (link,) = chosen_links(facts.gpu, [0, 1])
    assert link.kind == "pcie" and link.name == "PCIe Gen5 x16, PHB: same PCIe host bridge"
    assert link.ceiling_gbps == pytest.approx(16 * PCIE_LANE_GBPS[5]) and link.basis.startswith("PCIe Gen5 x16")
    finding = run_preflight(glm, facts).finding("gpu-p2p")
    assert finding.severity is Severity.OK
    assert finding.message.startswith("GPU 0<->1: PCIe Gen5 x16, PHB: same PCIe host bridge, 63.0 GB/s each way, "
                                      "P2P ok.")


def test_pcie_pair_across_sockets_without_p2p(glm: Recipe, facts_for: Facts) -> None:
    finding = run_preflight(glm, facts_for(glm, "pro6000-no-p2p")).finding("gpu-p2p")
    assert finding.severity is Severity.WARN
    assert ("GPU 0<->1: P2P read chipset not supported (PCIe Gen5 x16, SYS: across NUMA nodes (SMP interconnect))"
            in finding.message)
    assert finding.figures and finding.figures["pairs"][0]["link"] == "pcie"


def test_a_pcie_switch_pair_beside_a_5090(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "5090-and-two-pro6000")
    texts = [describe_pair(facts.gpu, p).text for p in facts.gpu.pairs]
    assert texts[2] == "GPU 1<->2: PCIe Gen5 x16, PIX: single PCIe switch, 63.0 GB/s each way, P2P ok"
    assert "SYS: across NUMA nodes" in texts[0]


def test_a_card_below_its_pcie_max_is_named(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched")
    slow = facts.gpu.devices[1].model_copy(update={"pcie_generation": 3, "pcie_width": 4})
    gpu = facts.gpu.model_copy(update={"devices": [facts.gpu.devices[0], slow]})
    (link,) = chosen_links(gpu, [0, 1])
    assert link.name == "PCIe (GPU 0 Gen5 x16, GPU 1 Gen3 x4), PHB: same PCIe host bridge"
    assert link.slow_lanes == ("GPU 1 at PCIe Gen3 x4 (of Gen5 x16)",)
    assert link.ceiling_gbps == pytest.approx(63.0, abs=0.1)  # what the slot allows, not the idle reading


def test_an_inventory_from_an_older_rigctl_says_the_link_is_not_recorded(qwen2: Recipe) -> None:
    facts = load_inventory(FIXTURES / "h200x2.json")  # the real two-H200 inventory, made before links
    (link,) = chosen_links(facts.gpu, [0, 1])
    assert link.kind == "unknown" and link.ceiling_gbps is None and slowest([link]) is None
    assert link.text == ("GPU 0<->1: link not recorded (an inventory from an older rigctl); PHB: same PCIe host "
                         "bridge; PCIe Gen5 x16, P2P ok")
    assert run_preflight(qwen2, facts).finding("gpu-p2p").severity is Severity.OK


def test_a_card_without_nvlink_is_on_pcie() -> None:
    capture = json.loads((FIXTURES / "nvml-h200-capture.json").read_text())  # the real single H200
    two = {**capture, "count": 2, "devices": [capture["devices"][0], {
        **capture["devices"][0], "nvmlDeviceGetUUID": {"ok": "GPU-00000000-0000-4000-8000-000000000001"}}],
        "p2p": {"*": {"ok": 0}}, "topology": {"*": {"ok": 30}}}
    inv = probe_gpus(FakeNvml(two), process_name=lambda pid: None)
    (pair,) = inv.pairs
    assert pair.link == "pcie" and pair.p2p_nvlink is None
    assert describe_pair(inv, pair).name == "PCIe Gen5 x16, PHB: same PCIe host bridge"


def test_nvlink_up_but_not_between_these_two(qwen2: Recipe, facts_for: Facts) -> None:
    """Both GPUs have links up (to other GPUs), the driver says NVLink P2P is not supported between them."""
    facts = facts_for(qwen2, "h200x2-nvlink")
    pair = facts.gpu.pairs[0].model_copy(update={"link": "pcie", "nvlink_links": None, "nvlink_version": None,
                                                 "p2p_nvlink": 5})
    gpu = facts.gpu.model_copy(update={"pairs": [pair]})
    link = describe_pair(gpu, pair)
    assert link.kind == "pcie" and "NVLinks are up on both GPUs but NVLink P2P between them is not supported" in (
        link.notes)
    finding = run_preflight(qwen2, facts.model_copy(update={"gpu": gpu})).finding("gpu-p2p")
    assert finding.severity is Severity.WARN and "traffic takes PCIe" in finding.message


def test_inventory_text_and_json_name_the_link() -> None:
    facts = load_inventory(FIXTURES / "h200x2-links.json")
    text = _view(facts)
    assert "GPU 0<->1: NVLink 4.0, 18 links (NV18), 478.1 GB/s each way, P2P ok" in text
    data = json.loads(facts.model_dump_json())
    assert data["gpu"]["pairs"][0] | {"unsupported": []} == {
        "a": 0, "b": 1, "p2p_read": 0, "topology": 30, "p2p_nvlink": 0, "link": "nvlink", "nvlink_links": 18,
        "nvlink_version": 6, "unsupported": []}
    assert data["gpu"]["devices"][0]["nvlink"] == {"supported": True, "active": 18, "inactive": 0, "version": 6}
    assert "link not recorded" in _view(load_inventory(FIXTURES / "h200x2.json"))


def test_preflight_replay_of_the_nvlink_inventory(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "s"), "XDG_CACHE_HOME": str(tmp_path / "c")}
    done = subprocess.run([sys.executable, "-m", "rigctl", "preflight", "qwen3-8b-vllm", "--set", TP2[0], "--set",
                           TP2[1], "--inventory", str(FIXTURES / "h200x2-links.json"), "--json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)
    p2p = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "gpu-p2p")
    assert p2p["severity"] == "ok" and p2p["message"].startswith("GPU 0<->1: NVLink 4.0, 18 links (NV18)")
    assert p2p["figures"]["pairs"][0]["gbps_each_way"] == 478.1


def test_rate_tables_cover_what_nvml_names() -> None:
    assert NVLINK_LINK_GBPS[pynvml.NVML_NVLINK_VERSION_4_0] == 26.562  # nvlink-status.txt of the real H200 pair
    assert set(PCIE_LANE_GBPS) == {1, 2, 3, 4, 5, 6}
