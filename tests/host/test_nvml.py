"""The fake NVML agrees with real captures, and NVML facts are probed faithfully from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest
from tests.support.nvml_fake import DEVICE_CALLS, RETURN_TYPES, FakeNvml, capture_nvml, to_json

from rigctl.host.facts import GpuInventory
from rigctl.host.nvml import probe_gpus

REPO = Path(__file__).resolve().parents[2]
REFERENCE = REPO.parent / "shared" / "reference" / "nvml-h200.json"
FIXTURES = REPO / "tests" / "fixtures" / "inventory"
TYPED_CAPTURE = FIXTURES / "nvml-h200-capture.json"  # taken on the lent H200 by capture-on-gpu.sh


def _load(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def box(name: str) -> dict[str, Any]:
    return _load(FIXTURES / "boxes" / f"{name}.json")


@pytest.fixture
def reference() -> dict[str, Any]:
    if not REFERENCE.exists():
        pytest.skip(f"{REFERENCE} is not in this checkout")
    return _load(REFERENCE)


def test_fake_answers_exactly_what_the_real_h200_answered(reference: dict[str, Any]) -> None:
    lib = FakeNvml(reference)
    lib.nvmlInit()
    assert lib.nvmlSystemGetDriverVersion() == reference["driver"]["ok"]
    assert lib.nvmlSystemGetCudaDriverVersion() == reference["cuda_driver_version"]["ok"]
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    checked = 0
    for call, answer in reference["devices"][0].items():
        fn = getattr(lib, call, None)
        if fn is None:
            continue  # the capture holds calls rigctl does not make (serial, vbios, ...)
        if "error" in answer:
            with pytest.raises(pynvml.NVMLError) as info:
                fn(handle)
            assert type(info.value).__name__ == answer["error"]
            assert str(info.value) == answer["message"]
        else:
            assert to_json(fn(handle)) == answer["ok"], call
        checked += 1
    assert checked == len(DEVICE_CALLS)
    bad_class, bad_message = reference["bad_index_error"]
    with pytest.raises(pynvml.NVMLError) as info:
        lib.nvmlDeviceGetHandleByIndex(5)
    assert (type(info.value).__name__, str(info.value)) == (bad_class, bad_message)


def test_fake_returns_the_types_the_real_library_returned() -> None:
    capture = _load(TYPED_CAPTURE)
    lib = FakeNvml(capture)
    lib.nvmlInit()
    handle = lib.nvmlDeviceGetHandleByIndex(0)
    for call, answer in capture["devices"][0].items():
        if "ok" in answer:
            assert type(getattr(lib, call)(handle)).__name__ == answer["type"], call
    for call, type_name in RETURN_TYPES.items():
        assert capture["devices"][0][call]["type"] == type_name


def test_capture_of_the_fake_reproduces_the_capture() -> None:
    capture = _load(TYPED_CAPTURE)
    again = capture_nvml(FakeNvml(capture))
    assert again["devices"] == capture["devices"]
    assert again["bad_index_error"] == capture["bad_index_error"]


def test_h200_facts(reference: dict[str, Any]) -> None:
    inv = probe_gpus(FakeNvml(reference), process_name=lambda pid: None)
    assert inv.available and inv.driver_version == "580.159.04" and inv.cuda_version == "13.0"
    (gpu,) = inv.devices
    assert gpu.name == "NVIDIA H200" and gpu.pci_device_hex == "0x2335" and gpu.pci_vendor_id == 0x10DE
    assert gpu.compute_capability == "9.0" and gpu.architecture == 9
    assert gpu.memory_total_bytes == 150754820096
    assert gpu.power.max_mw == 700000 and gpu.mig_enabled is False and gpu.ecc_enabled is True
    assert gpu.numa_node is None
    assert [(u.call, u.error) for u in gpu.unsupported] == [("nvmlDeviceGetNumaNodeId", "NVMLError_NotSupported")]


def test_no_nvml_library_is_a_fact_not_a_crash(need: Any) -> None:
    real = probe_gpus()
    need(not real.available, "this machine has an NVIDIA driver; the no-library case cannot be seen here")
    assert real.error == "NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    assert probe_gpus(FakeNvml(box("no-nvml"))) == real  # the fake fails exactly like the real library


def test_driver_not_loaded() -> None:
    inv = probe_gpus(FakeNvml(box("no-driver")))
    assert inv == GpuInventory(available=False, error="NVMLError_DriverNotLoaded: Driver Not Loaded")


def test_mixed_pro6000_facts() -> None:
    inv = probe_gpus(FakeNvml(box("pro6000-mixed")), process_name=lambda pid: None)
    maxq, ws = inv.devices
    assert maxq.name == "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition" and maxq.pci_device_hex == "0x2BB4"
    assert ws.name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition" and ws.pci_device_hex == "0x2BB1"
    assert (maxq.power.current_mw, maxq.power.max_mw, ws.power.current_mw) == (300000, 325000, 600000)
    assert maxq.memory_total_mib == ws.memory_total_mib == 97887
    assert maxq.compute_capability == "12.0" and maxq.architecture == 10
    (pair,) = inv.pairs
    assert (pair.a, pair.b, pair.p2p_ok, pair.topology) == (0, 1, True, 30)


def test_p2p_status_is_asked_with_an_int_index() -> None:
    lib = FakeNvml(box("pro6000-matched"))
    lib.nvmlInit()
    a, b = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(TypeError):
        lib.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_READ if isinstance(
            pynvml.NVML_P2P_CAPS_INDEX_READ, tuple) else (0,))
    inv = probe_gpus(FakeNvml(box("pro6000-matched")))
    assert inv.pairs[0].p2p_read == 0 and not inv.pairs[0].unsupported


def test_busy_gpu_names_its_process() -> None:
    inv = probe_gpus(FakeNvml(box("pro6000-busy")), process_name={4242: "vllm"}.get)
    (proc,) = inv.devices[1].processes
    assert (proc.pid, proc.name, proc.used_memory_bytes) == (4242, "vllm", 90500 * 1024 * 1024)


def test_unsupported_calls_are_recorded_per_device() -> None:
    inv = probe_gpus(FakeNvml(box("5090-and-two-pro6000")), process_name=lambda pid: None)
    g5090 = inv.devices[0]
    assert g5090.mig_enabled is None and g5090.ecc_enabled is None
    assert {u.call for u in g5090.unsupported} == {"nvmlDeviceGetEccMode", "nvmlDeviceGetMigMode"}
    assert inv.pair(1, 2) is not None and inv.pair(1, 2).topology == 10  # type: ignore[union-attr]
    assert len(inv.pairs) == 3


# --- NVLink: the real two-H200 capture, and cards without NVLink -------------------------------------

REFERENCE_X2 = REPO.parent / "shared" / "reference" / "h200x2" / "nvml-h200x2.json"
X2 = "h200x2-nvlink"  # that capture as a box fixture (boxes/h200x2-nvlink.json; its "note" says what differs)


def test_the_x2_fixture_is_the_real_capture_but_for_the_read_the_script_never_asked() -> None:
    if not REFERENCE_X2.exists():
        pytest.skip(f"{REFERENCE_X2} is not in this checkout")
    real, fixture = _load(REFERENCE_X2), box(X2)
    assert fixture.pop("note") and all("exception" in e["read"] for e in real["p2p"].values())
    for entry in real["p2p"].values():
        entry["read"] = {"ok": 0}  # what rigctl's own int-index READ got on the two-H200 box (h200x2.json)
    assert fixture == real


def test_fake_answers_every_nvlink_and_p2p_call_as_the_real_h200_pair_did() -> None:
    capture = box(X2)
    lib = FakeNvml(capture)
    lib.nvmlInit()
    handles = [lib.nvmlDeviceGetHandleByIndex(i) for i in range(2)]
    asked = 0
    for handle, device in zip(handles, capture["devices"], strict=True):
        for link, entry in device["nvlink"].items():
            for what, call in (("state", lib.nvmlDeviceGetNvLinkState), ("version", lib.nvmlDeviceGetNvLinkVersion)):
                answer = entry.get(what, entry)  # links 18-35 answered one error for the whole link
                if "error" in answer:
                    with pytest.raises(pynvml.NVMLError) as info:
                        call(handle, int(link))
                    assert (type(info.value).__name__, str(info.value)) == (answer["error"], answer["message"])
                else:
                    assert call(handle, int(link)) == answer["ok"]
                asked += 1
    assert asked == 2 * 36 * 2
    indices = {"write": 1, "nvlink": pynvml.NVML_P2P_CAPS_INDEX_NVLINK, "atomics": 3, "prop": 4}
    for key, entry in capture["p2p"].items():
        a, b = (handles[int(i)] for i in key.split("-"))
        for cap, index in indices.items():
            assert lib.nvmlDeviceGetP2PStatus(a, b, index) == entry[cap]["ok"], (key, cap)
        assert lib.nvmlDeviceGetP2PStatus(a, b, 0) == 0
        assert lib.nvmlDeviceGetTopologyCommonAncestor(a, b) == entry["topology"]["ok"] == pynvml.NVML_TOPOLOGY_HOSTBRIDGE


def test_the_fake_never_invents_an_answer_the_capture_lacks() -> None:
    capture = box(X2)
    capture["p2p"]["0-1"]["read"] = {"exception": "ArgumentError", "message": "argument 3"}  # as captured
    lib = FakeNvml(capture)
    lib.nvmlInit()
    a, b = lib.nvmlDeviceGetHandleByIndex(0), lib.nvmlDeviceGetHandleByIndex(1)
    with pytest.raises(ValueError, match="no driver answer"):
        lib.nvmlDeviceGetP2PStatus(a, b, 0)
    plain = FakeNvml(box("pro6000-matched"))  # a hand-made box records the READ capability only
    plain.nvmlInit()
    with pytest.raises(ValueError, match="only the READ"):
        plain.nvmlDeviceGetP2PStatus(plain.nvmlDeviceGetHandleByIndex(0), plain.nvmlDeviceGetHandleByIndex(1), 2)


def test_two_h200s_on_18_nvlinks_are_an_nvlink_pair() -> None:
    inv = probe_gpus(FakeNvml(box(X2)), process_name=lambda pid: None)
    for gpu in inv.devices:
        assert gpu.nvlink is not None
        assert (gpu.nvlink.supported, gpu.nvlink.active, gpu.nvlink.inactive) == (True, 18, 0)
        assert gpu.nvlink.version == pynvml.NVML_NVLINK_VERSION_4_0 and gpu.nvlink.version_text == "4.0"
        assert [u.call for u in gpu.unsupported] == ["nvmlDeviceGetNumaNodeId"]  # links past 17 are no error
        assert (gpu.pcie_generation, gpu.pcie_width) == (5, 16)
    (pair,) = inv.pairs
    assert (pair.link, pair.nvlink_links, pair.nvlink_version, pair.p2p_nvlink) == ("nvlink", 18, 6, 0)
    assert (pair.p2p_ok, pair.topology) == (True, 30)  # the common ancestor alone says "host bridge"


def test_a_card_without_nvlink_answers_not_supported() -> None:
    capture = _load(TYPED_CAPTURE)  # the real single H200, captured by capture-on-gpu.sh: no NVLink answers
    lib = FakeNvml(capture)
    lib.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        lib.nvmlDeviceGetNvLinkState(lib.nvmlDeviceGetHandleByIndex(0), 0)
    inv = probe_gpus(FakeNvml(capture), process_name=lambda pid: None)
    nvlink = inv.devices[0].nvlink
    assert nvlink is not None and not nvlink.supported and nvlink.active == 0 and nvlink.version is None


def test_pcie_pairs_never_ask_for_nvlink_p2p() -> None:
    lib = FakeNvml(box("pro6000-no-p2p"))
    inv = probe_gpus(lib, process_name=lambda pid: None)
    (pair,) = inv.pairs
    assert (pair.link, pair.p2p_nvlink, pair.nvlink_links, pair.p2p_read, pair.topology) == ("pcie", None, None, 1, 50)
    assert lib.calls.count("nvmlDeviceGetNvLinkState") == 2  # link 0 of each card: NotSupported, then done
    assert "nvmlDeviceGetNvLinkVersion" not in lib.calls and lib.calls.count("nvmlDeviceGetP2PStatus") == 1
    assert all(g.nvlink is not None and not g.nvlink.supported for g in inv.devices)


def test_a_link_that_fails_midway_is_recorded() -> None:
    capture = box(X2)
    capture["devices"][1]["nvlink"]["5"] = {"error": "NVMLError_GpuIsLost", "message": "GPU is lost"}
    inv = probe_gpus(FakeNvml(capture), process_name=lambda pid: None)
    gpu = inv.devices[1]
    assert gpu.nvlink is not None and gpu.nvlink.active == 5  # links 0-4, then the error ends the count
    assert ("nvmlDeviceGetNvLinkState", "NVMLError_GpuIsLost") in [(u.call, u.error) for u in gpu.unsupported]
    assert inv.pairs[0].nvlink_links == 5  # the pair is as wide as its narrower end


def test_capture_of_the_fake_pair_reproduces_the_nvlink_answers() -> None:
    capture = box(X2)
    again = capture_nvml(FakeNvml(capture))

    def untyped(entry: dict[str, Any]) -> dict[str, Any]:
        return {k: ({kk: vv for kk, vv in v.items() if kk != "type"} if isinstance(v, dict) else v)
                for k, v in entry.items() if k != "type"}

    for new, old in zip(again["devices"], capture["devices"], strict=True):
        recorded = {k: untyped(v) for k, v in new["nvlink"].items()}
        assert list(recorded) == [str(i) for i in range(19)]  # 18 links, then the InvalidArgument that ends them
        assert all(recorded[k] == {"state": old["nvlink"][k]["state"], "version": old["nvlink"][k]["version"]}
                   for k in map(str, range(18)))
        assert recorded["18"] == old["nvlink"]["18"]
    for key in ("0-1", "1-0"):
        assert {k: untyped(v) for k, v in again["p2p"][key].items()} == capture["p2p"][key]
