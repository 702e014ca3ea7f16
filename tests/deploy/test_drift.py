"""Drift (#34): a deployment keeps the host facts it was planned on; status and doctor say when the host changed."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from tests.preflight.conftest import healthy_facts
from tests.support.nvml_fake import FakeNvml

from rigctl.adapters.gpu_memory import NvmlGpuMemory
from rigctl.deploy import state as records
from rigctl.deploy import status
from rigctl.deploy.drift import CUDA_NOT_COMPARED, drift_of, host_now
from rigctl.deploy.state import PlannedHost, host_drift, planned_host
from rigctl.doctor import host_state
from rigctl.doctor.host_state import DoctorFacts
from rigctl.doctor.rules import REGISTRY
from rigctl.doctor.rules.host import host_drift as drift_rule
from rigctl.errors import InvalidInputError
from rigctl.host.facts import KernelModule, StackFacts
from rigctl.host.nvml_lib import read_cuda_version
from rigctl.places import Scope
from rigctl.recipe.load import load
from rigctl.severity import Severity

H100 = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h100-2026-12-07"
DIGEST = "sha256:" + "a" * 64
PLANNED = PlannedHost(driver_version="580.95.05", cuda_version="13.0", module_flavour="open",
                      module_version="580.95.05", cdi_driver_versions=["580.95.05"], image_digest=DIGEST)


def record(**changes: Any) -> records.DeploymentRecord:
    base = records.DeploymentRecord(recipe="glm53-flash", scope=Scope.USER, unit="rigctl-glm53-flash.service",
                                    container="rigctl-glm53-flash", unit_dir="/etc/containers/systemd",
                                    unit_files=["rigctl-glm53-flash.container"], endpoint="http://127.0.0.1:8001",
                                    served_name="glm", image=f"x@{DIGEST}", planned_on=PLANNED)
    for key, value in changes.items():
        setattr(base, key, value)
    return base


def test_planned_facts_from_the_plan() -> None:
    glm = load("glm53-flash").recipe
    facts = healthy_facts(glm, "pro6000-mixed")
    facts = facts.model_copy(update={"stack": StackFacts(kernel_module=KernelModule(flavour="open", version="580.95.05"))})
    got = planned_host(facts, glm.image_digest)
    assert got == PlannedHost(driver_version="580.95.05", cuda_version="13.0", module_flavour="open",
                              module_version="580.95.05", cdi_driver_versions=["580.95.05"],
                              image_digest=glm.image_digest)


def test_the_record_keeps_them(tmp_path: Path) -> None:
    records.save(tmp_path, record())
    assert records.load_record(tmp_path, "glm53-flash") == record()
    data = json.loads((tmp_path / "glm53-flash.json").read_text())
    assert data["planned_on"]["module_flavour"] == "open"
    del data["planned_on"]  # a record of an older rigctl
    (tmp_path / "glm53-flash.json").write_text(json.dumps(data))
    assert records.load_record(tmp_path, "glm53-flash") == record(planned_on=None)


@pytest.mark.parametrize("bad", [{"driver_version": "5" * 300}, {"cdi_driver_versions": ["1"] * 17},
                                 {"module_flavour": "open\nspoof"}, {"driver_version": 580}])
def test_a_hostile_planned_part_refuses_the_record(tmp_path: Path, bad: dict[str, Any]) -> None:
    data = json.loads(record().to_json())
    data["planned_on"].update(bad)
    (tmp_path / "glm53-flash.json").write_text(json.dumps(data))
    with pytest.raises(InvalidInputError):
        records.load_record(tmp_path, "glm53-flash")


def test_drift_names_each_change() -> None:
    now = PlannedHost(driver_version="590.44.01", module_flavour="open", module_version="590.44.01",
                      cdi_driver_versions=["580.95.05"], image_digest="sha256:" + "b" * 64)
    said = host_drift(PLANNED, now)
    assert "driver 580.95.05 when planned, 590.44.01 now" in said
    assert "the CDI spec names driver 580.95.05, the loaded one is 590.44.01" in said
    assert any(s.startswith("image sha256:aaaa") for s in said)
    assert not any("CUDA" in s for s in said)  # unknown now (no NVML here): not drift
    assert host_drift(PLANNED, PLANNED) == []


def test_status_side_reads_the_host_cheaply(tmp_path: Path) -> None:
    now = host_now(driver_file=str(H100 / "proc-driver-nvidia-version.txt"),
                   module_file=str(H100 / "proc-driver-nvidia-version.txt"), cdi_dirs=[str(tmp_path)])
    assert (now.driver_version, now.module_flavour) == ("580.159.04", "open")
    assert drift_of(record(), now, DIGEST) == ["driver 580.95.05 when planned, 580.159.04 now",
                                                "kernel module version 580.95.05 when planned, 580.159.04 now"]
    assert drift_of(record(planned_on=None), now) is None


def test_doctor_rule_reports_drift_per_unit() -> None:
    assert any(r.id == "host-drift" for r in REGISTRY)
    path = "/etc/containers/systemd/rigctl-glm53-flash.container"
    unit = cast(Any, SimpleNamespace(unit=SimpleNamespace(path=path), spec=SimpleNamespace(image=f"x@{DIGEST}")))
    now = PlannedHost(driver_version="590.44.01", module_flavour="open", cdi_driver_versions=["590.44.01"])
    facts = DoctorFacts(planned={path: ("glm53-flash", PLANNED)}, now=now)
    (hit,) = drift_rule([unit], facts)
    assert hit.subject == path and "580.95.05 when planned, 590.44.01 now" in hit.message
    assert "rigctl preflight glm53-flash" in hit.fix
    assert drift_rule([unit], DoctorFacts(planned={path: ("glm53-flash", PLANNED)}, now=PLANNED)) == []
    assert drift_rule([unit], DoctorFacts()) == []


# --- the driver's CUDA, through NVML where it answers ---------------------------------------------------------

INVENTORY = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def fake_nvml(name: str) -> FakeNvml:
    return FakeNvml(json.loads((INVENTORY / name).read_text(encoding="utf-8")))


def test_status_compares_the_drivers_cuda_through_the_nvml_it_already_holds() -> None:
    """Before, status never compared the CUDA the record keeps: it read the host without NVML. Now the GPU
    memory adapter's one NVML start answers it (the real H200 capture says 13000: CUDA 13.0)."""
    lib = fake_nvml("nvml-h200-capture.json")
    gpu = NvmlGpuMemory(lib)
    older = replace(PLANNED, cuda_version="12.8")
    found = status._drift(record(planned_on=older), DIGEST, gpu)
    assert found is not None and "CUDA 12.8 when planned, 13.0 now" in found.changes and found.not_compared == []
    assert lib.calls.count("nvmlInit") == 1
    gpu.used_by({1})  # status's memory figures: the same start, not a second one
    assert lib.calls.count("nvmlInit") == 1
    same = status._drift(record(planned_on=replace(PLANNED, cuda_version="13.0")), DIGEST, NvmlGpuMemory(lib))
    assert same is not None and not any("CUDA" in c for c in same.changes)


def test_status_says_cuda_not_compared_without_nvml() -> None:
    gpu = NvmlGpuMemory(fake_nvml("boxes/no-nvml.json"))
    found = status._drift(record(), DIGEST, gpu)
    assert found is not None and found.not_compared == [CUDA_NOT_COMPARED] == ["the driver's CUDA not compared: "
                                                                                "NVML unavailable"]
    assert not any("CUDA" in c for c in found.changes)
    lib = fake_nvml("nvml-h200-capture.json")  # a record without a planned CUDA never opens NVML
    unasked = status._drift(record(planned_on=replace(PLANNED, cuda_version=None)), DIGEST, NvmlGpuMemory(lib))
    assert unasked is not None and unasked.not_compared == [] and lib.calls == []


def test_read_cuda_version_is_bounded_and_never_raises() -> None:
    assert read_cuda_version(fake_nvml("nvml-h200-capture.json")) == "13.0"
    assert read_cuda_version(fake_nvml("boxes/no-nvml.json")) is None
    assert read_cuda_version(fake_nvml("boxes/no-driver.json")) is None
    old = json.loads((INVENTORY / "nvml-h200-capture.json").read_text(encoding="utf-8"))
    old["cuda_driver_version"] = {"error": "NVMLError_FunctionNotFound"}
    lib = FakeNvml(old)
    assert read_cuda_version(lib) is None and lib.inits == 0  # shut down again

    class Wedged(FakeNvml):
        def nvmlInit(self) -> None:
            time.sleep(5)

    started = time.monotonic()
    assert read_cuda_version(Wedged(old), timeout_s=0.2) is None
    assert time.monotonic() - started < 2


def test_doctor_asks_nvml_only_for_a_record_that_keeps_a_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    path = "/etc/containers/systemd/rigctl-glm53-flash.container"
    asked: list[bool] = []

    def cuda() -> str | None:
        asked.append(True)
        return "13.0"

    for planned, want in ((PLANNED, True), (replace(PLANNED, cuda_version=None), False)):
        asked.clear()
        monkeypatch.setattr(host_state, "planned_facts", lambda _scopes, p=planned: {path: ("glm53-flash", p)})
        facts = host_state.local_facts([], driver_file="/nonexistent/version", cdi_dirs=[], cuda=cuda)
        assert bool(asked) is want and facts.now is not None
        assert facts.now.cuda_version == ("13.0" if want else None)


def test_doctor_rule_compares_cuda_and_says_when_it_could_not() -> None:
    path = "/etc/containers/systemd/rigctl-glm53-flash.container"
    unit = cast(Any, SimpleNamespace(unit=SimpleNamespace(path=path), spec=SimpleNamespace(image=f"x@{DIGEST}")))
    planned = {path: ("glm53-flash", PLANNED)}
    (hit,) = drift_rule([unit], DoctorFacts(planned=planned, now=replace(PLANNED, cuda_version="13.1")))
    assert "CUDA 13.0 when planned, 13.1 now" in hit.message and hit.severity is None  # the rule's warn
    (unsaid,) = drift_rule([unit], DoctorFacts(planned=planned, now=replace(PLANNED, cuda_version=None)))
    assert unsaid.severity == Severity.INFO and CUDA_NOT_COMPARED in unsaid.message
    (both,) = drift_rule([unit], DoctorFacts(planned=planned, now=replace(PLANNED, driver_version="590.44.01",
                                                                          cuda_version=None)))
    assert both.severity is None and "590.44.01 now" in both.message and CUDA_NOT_COMPARED in both.message
    assert drift_rule([unit], DoctorFacts(planned=planned, now=PLANNED)) == []


def test_status_text_says_the_drift_and_what_it_could_not_compare() -> None:
    import io

    from rigctl.cli.views.deploy import status as status_view
    from rigctl.deploy.status import ServiceStatus
    from rigctl.places import Scope

    row = ServiceStatus(recipe="glm53-flash", scope=Scope.USER, unit="rigctl-glm53-flash.service", unit_file=None,
                        active="active", sub="running", restarts=0, restart_policy="always", exit_status=None,
                        health="ready", endpoint="http://127.0.0.1:8001", model="m", image="i", image_digest=None,
                        uptime_s=10.0, gpu_memory_mib=None, host_drift=["driver 580.65.06 -> 590.10"],
                        host_drift_not_compared=["the driver's CUDA not compared: NVML unavailable"])
    out = io.StringIO()
    status_view([row])(out)
    text = out.getvalue()
    assert "the host changed since it was planned: driver 580.65.06 -> 590.10" in text
    assert "note: the driver's CUDA not compared: NVML unavailable" in text
