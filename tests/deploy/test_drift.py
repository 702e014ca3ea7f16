"""Drift (#34): a deployment keeps the host facts it was planned on; status and doctor say when the host changed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
from tests.preflight.conftest import healthy_facts

from rigctl.deploy import state as records
from rigctl.deploy.drift import drift_of, host_now
from rigctl.deploy.state import PlannedHost, host_drift, planned_host
from rigctl.doctor.host_state import DoctorFacts
from rigctl.doctor.rules import REGISTRY
from rigctl.doctor.rules.host import host_drift as drift_rule
from rigctl.errors import InvalidInputError
from rigctl.host.facts import KernelModule, StackFacts
from rigctl.places import Scope
from rigctl.recipe.load import load

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
