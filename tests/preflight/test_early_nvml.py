"""`rigctl preflight` and `inventory` start NVML on a thread before the models load (``host.early``): the
GPU facts must be what the probe finds by itself, a failed start must be reported as the probe reports
it, and NVML's reference count must come back to zero however the command ends. NVML is the one fake
(a real capture replayed, counting initialisations as NVML does)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
from tests.support.nvml_fake import FakeNvml

from rigctl.host import nvml_lib
from rigctl.host.early import EarlyProbes, NvmlStart, probes_started
from rigctl.host.gather import facts_for_recipe, gather_facts
from rigctl.host.nvml import probe_gpus
from rigctl.recipe.load import load

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    lib = FakeNvml(json.loads((FIXTURES / "nvml-h200x2-capture.json").read_text()))
    monkeypatch.setattr(nvml_lib, "nvml_library_loads", lambda: True)
    monkeypatch.setattr(nvml_lib, "load_pynvml", lambda: lib)
    return lib


def early_probes() -> EarlyProbes:
    return EarlyProbes(None, NvmlStart())


def test_gpu_facts_with_nvml_started_early_are_the_probes_own(fake: FakeNvml) -> None:
    itself = probe_gpus()
    assert fake.inits == 0
    early = early_probes()
    try:
        facts = gather_facts([], include_cache_dirs=False, podman_sockets=[], early=early)
        assert fake.inits == 1  # the probe's own init and shutdown pair left the early one standing
    finally:
        early.cancel()
    assert facts.gpu == itself
    assert len(facts.gpu.devices) == 2 and facts.gpu.pairs
    assert fake.inits == 0
    assert fake.calls.count("nvmlInit") == 3  # the probe alone, then the early start and the gather's probe


def test_a_start_that_fails_is_reported_by_the_probe(fake: FakeNvml) -> None:
    fake.capture["init"] = {"error": "NVMLError_DriverNotLoaded"}
    itself = probe_gpus()
    assert not itself.available and itself.error
    early = early_probes()
    assert early.nvml.lib() is None
    try:
        facts = gather_facts([], include_cache_dirs=False, podman_sockets=[], early=early)
    finally:
        early.cancel()
    assert facts.gpu == itself
    assert fake.inits == 0


def test_nvml_is_let_go_when_nothing_is_gathered(fake: FakeNvml) -> None:
    early = early_probes()
    assert early.nvml.lib() is fake and fake.inits == 1
    early.cancel()  # e.g. the recipe failed to load
    early.cancel()  # and again, from a second cleanup path: harmless
    assert fake.inits == 0


def test_a_replayed_inventory_lets_nvml_go(fake: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    early = early_probes()
    facts = facts_for_recipe(load("qwen3-8b-vllm").recipe, FIXTURES / "h200.json", early=early)
    assert facts.gpu.devices[0].name == "NVIDIA H200"
    assert fake.inits == 0


def fail_with_probes_started(fake: FakeNvml) -> None:
    with probes_started() as early:
        assert early is not None and early.nvml.lib() is fake and fake.inits == 1
        raise RuntimeError("the recipe did not load")


def test_what_was_started_is_let_go_when_the_command_fails(fake: FakeNvml) -> None:
    with pytest.raises(RuntimeError, match="did not load"):
        fail_with_probes_started(fake)
    assert fake.inits == 0
    with probes_started(wanted=False) as nothing:  # a replayed inventory: nothing of this host is asked
        assert nothing is None
    assert fake.calls.count("nvmlInit") == 1


class _HungDriver(FakeNvml):
    """nvmlInit() that returns only when the test lets it: a driver stuck in its start."""

    def __init__(self, capture: dict[str, object], gate: threading.Event) -> None:
        super().__init__(capture)
        self.gate = gate

    def nvmlInit(self) -> None:
        assert self.gate.wait(30)
        super().nvmlInit()


def test_a_driver_that_hangs_in_its_start_does_not_hold_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    gate = threading.Event()
    lib = _HungDriver(json.loads((FIXTURES / "nvml-h200x2-capture.json").read_text()), gate)
    monkeypatch.setattr(nvml_lib, "nvml_library_loads", lambda: True)
    monkeypatch.setattr(nvml_lib, "load_pynvml", lambda: lib)
    start = NvmlStart()
    begun = time.monotonic()
    start.release()  # e.g. the recipe did not load: the command ends now, not when the driver answers
    assert time.monotonic() - begun < 5 and start.is_alive() and start.daemon
    gate.set()  # the driver answers after all: the thread lets NVML go itself
    start.join(30)
    assert not start.is_alive() and lib.calls.count("nvmlInit") == 1 and lib.inits == 0
