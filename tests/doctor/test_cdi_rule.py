"""One CDI staleness rule (issue #11): preflight and doctor read the same spec files through the same host
probe and judge them by ``rigctl.host.cdi.stale``, so they cannot disagree on a spec.

Before, doctor had its own regex and took the most common library version as "the" spec's driver, while
preflight asked whether the loaded driver was among the versions at all. So a spec with one library of the
old driver among current ones passed both (the container still fails on the one file that is gone), a spec
mostly of the old driver failed doctor but passed preflight, and a spec whose libraries with their own
version (libnvidia-egl-wayland.so.1.1.13) outnumbered the driver's failed doctor alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.preflight.conftest import healthy_facts

from rigctl.doctor.audit import audit
from rigctl.doctor.host_state import DoctorFacts, local_facts
from rigctl.host.facts import Cdi, CdiSpec
from rigctl.host.probes import probe_cdi
from rigctl.preflight.finding import Severity
from rigctl.preflight.registry import run_preflight
from rigctl.recipe.load import load

DRIVER = "580.95.05"  # the driver of the pro6000-matched box (tests/fixtures/inventory/boxes)
OLD = "570.86.15"
LIB = "/usr/lib/x86_64-linux-gnu"


def spec(*libraries: str) -> str:
    mounts = "".join(f"  - hostPath: {LIB}/{name}\n    containerPath: {LIB}/{name}\n" for name in libraries)
    return ("cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n"
            "    deviceNodes:\n    - path: /dev/nvidia0\ncontainerEdits:\n  mounts:\n" + mounts)


CASES = {  # name: (spec, stale?)
    "current": (spec(f"libcuda.so.{DRIVER}", f"libnvidia-ml.so.{DRIVER}"), False),
    "old": (spec(f"libcuda.so.{OLD}", f"libnvidia-ml.so.{OLD}"), True),
    "mostly-old": (spec(f"libcuda.so.{OLD}", f"libEGL_nvidia.so.{OLD}", f"libnvidia-ml.so.{DRIVER}"), True),
    "one-old-library": (spec(f"libcuda.so.{DRIVER}", f"libEGL_nvidia.so.{DRIVER}", f"libnvidia-ml.so.{OLD}"), True),
    "own-versioned-libraries": (spec(f"libcuda.so.{DRIVER}", "libnvidia-egl-wayland.so.1.1.13",
                                     "libnvidia-egl-gbm.so.1.1.13", "libnvidia-egl-xlib.so.1.1.13"), False),
}


@pytest.mark.parametrize("case", CASES)
def test_preflight_and_doctor_judge_a_spec_alike(case: str, tmp_path: Path) -> None:
    text, stale = CASES[case]
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    (cdi_dir / "nvidia.yaml").write_text(text)
    proc = tmp_path / "version"
    proc.write_text(f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {DRIVER}  Release Build\n")

    doctor_facts = local_facts([], driver_file=str(proc), cdi_dirs=[str(cdi_dir)])
    assert doctor_facts.cdi == probe_cdi(DRIVER, [str(cdi_dir)])  # the preflight probe, not one of doctor's own
    doctor_stale = "cdi-spec-stale" in {f.id for f in audit([], doctor_facts)}

    recipe = load("glm53-flash").recipe
    facts = healthy_facts(recipe, "pro6000-matched", cdi=probe_cdi(DRIVER, [str(cdi_dir)]))
    assert facts.gpu.driver_version == DRIVER
    preflight_stale = run_preflight(recipe, facts).finding("cdi").severity is Severity.FAIL

    assert (doctor_stale, preflight_stale) == (stale, stale)


def test_doctor_also_sees_a_spec_older_than_the_installed_driver() -> None:
    """The install-time half of the rule, which only preflight applied before."""
    cdi = Cdi(specs=[CdiSpec(path="/etc/cdi/nvidia.yaml", kind="nvidia.com/gpu", devices=["all"], mtime_ns=1,
                             driver_versions=[DRIVER])],
              driver_library=f"{LIB}/libnvidia-ml.so.{DRIVER}", driver_installed_ns=5)
    (finding,) = audit([], DoctorFacts(driver_version=DRIVER, cdi=cdi))
    assert (finding.id, finding.unit) == ("cdi-spec-stale", "/etc/cdi/nvidia.yaml")
    assert "older than the installed driver" in finding.message
