"""The fake NVML agrees with real captures, and NVML facts are probed faithfully from it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pynvml
import pytest

from rigctl.host.facts import GpuInventory
from rigctl.host.nvml import probe_gpus
from rigctl.host.nvml_fake import DEVICE_CALLS, RETURN_TYPES, FakeNvml, capture_nvml, to_json

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
