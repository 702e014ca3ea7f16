"""doctor: real-looking unit files in tests/fleet/units, audited, fixed, and re-audited."""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigctl.cli.app import app
from rigctl.doctor.audit import audit, serving_units
from rigctl.doctor.checkup import doctor
from rigctl.doctor.discover import path_roots
from rigctl.doctor.fix import FileChange, plan_fixes, rewrite
from rigctl.doctor.host_state import DoctorFacts, local_facts, snapshot_facts
from rigctl.host.unit import Unit
from rigctl.host.unitdirs import collect
from rigctl.host.unitsnapshot import local_snapshot
from rigctl.recipe.model import PODMAN_IPC_SHM_ERROR

UNITS = Path(__file__).parents[1] / "fleet" / "units"
NO_HOST = DoctorFacts()


def load(name: str) -> Unit:
    roots = path_roots([str(UNITS)])
    units = collect(local_snapshot(roots).files, roots)
    return next(u for u in units if Path(u.path).name == name)


def ids(name: str, facts: DoctorFacts = NO_HOST) -> set[str]:
    return {f.id for f in audit([load(name)], facts)}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("glm53-flash.container", {"restart-not-always"}),  # the story's unit
        ("glm53-flash-fixed.container", set()),  # after the one-word fix
        ("v4flash.container", set()),  # the unit that already had Restart=always
        ("ipc-shm.container", {"ipc-host-with-shm-size"}),
        ("shmsize-key.container", {"ipc-host-with-shm-size"}),
        ("notify-healthy.container", {"notify-healthy-short-timeout"}),
        ("unpinned.container", {"image-not-pinned"}),
        ("public.container", {"published-without-auth"}),
        ("public-keyed.container", set()),
        ("container-qwen.service", {"restart-not-always", "image-not-pinned", "published-without-auth"}),
        ("vllm-baremetal.service", {"restart-not-always", "published-without-auth"}),
        ("llama-server.service", set()),
        ("dropin-weakens.container", {"restart-not-always"}),
        ("dropin-fixes.container", set()),
        ("podman-restart.container", {"podman-restart-policy"}),
        (
            "rigctl-qwen3-8b.container",
            {"restart-not-always", "ipc-host-with-shm-size", "notify-healthy-short-timeout", "published-without-auth"},
        ),
    ],
)
def test_fixture_findings(name: str, expected: set[str]) -> None:
    assert ids(name) == expected


def test_plain_service_without_container_or_engine_is_not_a_serving_unit() -> None:
    roots = path_roots([str(UNITS)])
    names = {Path(u.path).name for u in serving_units(collect(local_snapshot(roots).files, roots))}
    assert "backup.service" not in names
    assert {"container-qwen.service", "vllm-baremetal.service", "llama-server.service"} <= names


def test_story_restart_finding_explains_exit_zero() -> None:
    (finding,) = audit([load("glm53-flash.container")], NO_HOST)
    assert finding.severity == "fail"
    assert "Restart=on-failure" in finding.message
    assert "vllm-project/vllm#48966" in finding.message
    assert "exits 0" in finding.message
    assert "Restart=always" in finding.fix
    assert finding.line == 21
    assert finding.unit.endswith("glm53-flash.container")


def test_missing_restart_in_quadlet_says_quadlet_writes_none() -> None:
    unit = Unit.of("/etc/containers/systemd/x.container", "[Container]\nImage=a/b@sha256:" + "0" * 64 + "\n")
    (finding,) = audit([unit], NO_HOST)
    assert finding.id == "restart-not-always"
    assert "quadlet writes none" in finding.message


def test_ipc_shm_quotes_podman_error() -> None:
    (finding,) = audit([load("ipc-shm.container")], NO_HOST)
    assert PODMAN_IPC_SHM_ERROR in finding.message
    assert finding.line == 8  # the PodmanArgs= that carries --shm-size


def test_dropin_finding_points_at_the_dropin() -> None:
    (finding,) = audit([load("dropin-weakens.container")], NO_HOST)
    assert finding.where is not None
    assert finding.where.endswith("dropin-weakens.container.d/50-restart.conf")


def test_notify_healthy_with_long_timeout_passes() -> None:
    text = (UNITS / "notify-healthy.container").read_text().replace("Restart=always", "Restart=always\nTimeoutStartSec=45min")
    assert audit([Unit.of("/u/n.container", text)], NO_HOST) == []
    short = text.replace("45min", "5min")
    assert {f.id for f in audit([Unit.of("/u/n.container", short)], NO_HOST)} == {"notify-healthy-short-timeout"}


def test_env_file_downgrades_exposure_to_warning() -> None:
    text = (UNITS / "public.container").read_text().replace("[Container]", "[Container]\nEnvironmentFile=/etc/llm.env")
    (finding,) = audit([Unit.of("/u/p.container", text)], NO_HOST)
    assert (finding.id, finding.severity) == ("published-without-auth", "warn")


def test_host_network_vllm_without_host_flag_is_exposed() -> None:
    text = "[Container]\nImage=docker.io/vllm/vllm-openai:v1@sha256:" + "1" * 64 + "\nNetwork=host\n"
    text += "Exec=--model /m\n[Service]\nRestart=always\n"
    assert {f.id for f in audit([Unit.of("/u/h.container", text)], NO_HOST)} == {"published-without-auth"}
    loopback = text.replace("Exec=--model /m", "Exec=--model /m --host 127.0.0.1")
    assert audit([Unit.of("/u/h.container", loopback)], NO_HOST) == []


# --- CDI against the driver --------------------------------------------------------------------------

CDI_570 = """---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices:
- name: "0"
  containerEdits:
    deviceNodes:
    - path: /dev/nvidia0
containerEdits:
  mounts:
  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15
    containerPath: /usr/lib/x86_64-linux-gnu/libcuda.so.570.86.15
  - hostPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15
    containerPath: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.570.86.15
  - hostPath: /usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.570.86.15
    containerPath: /usr/lib/x86_64-linux-gnu/libEGL_nvidia.so.570.86.15
"""
PROC_580 = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16-I1-N08-12-1)\n"
    "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
)


def test_stale_cdi_spec_is_a_finding_on_the_spec() -> None:
    facts = snapshot_facts(PROC_580, {"/etc/cdi/nvidia.yaml": CDI_570})
    findings = audit([load("glm53-flash-fixed.container")], facts)
    (stale,) = findings
    assert (stale.id, stale.unit, stale.severity) == ("cdi-spec-stale", "/etc/cdi/nvidia.yaml", "fail")
    assert "570.86.15" in stale.message
    assert "older than" in stale.message
    assert "glm53-flash-fixed.container" in stale.message  # who is hit
    assert "nvidia-ctk cdi generate" in stale.fix


def test_matching_cdi_and_no_driver_are_quiet() -> None:
    spec = snapshot_facts("", {"/etc/cdi/nvidia.yaml": CDI_570}).cdi
    assert audit([load("v4flash.container")], DoctorFacts(driver_version="570.86.15", cdi=spec)) == []
    assert audit([load("v4flash.container")], DoctorFacts(driver_version=None, cdi=spec)) == []


def test_gpu_unit_without_any_cdi_spec() -> None:
    findings = audit([load("v4flash.container")], DoctorFacts(driver_version="580.65.06"))
    assert [f.id for f in findings] == ["cdi-spec-missing"]


def test_local_facts_reads_proc_and_cdi_dirs(tmp_path: Path) -> None:
    proc = tmp_path / "version"
    proc.write_text(PROC_580)
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "nvidia.yaml").write_text(CDI_570)
    facts = local_facts([], driver_file=str(proc), cdi_dirs=[str(cdi), str(tmp_path / "absent")])
    assert facts.driver_version == "580.65.06"
    assert facts.driver_source == str(proc)
    assert [s.path for s in facts.cdi_specs] == [str(cdi / "nvidia.yaml")]
    assert {f.id for f in audit([], facts)} == {"cdi-spec-stale"}


def test_no_driver_here_means_cdi_checks_skipped(tmp_path: Path) -> None:
    facts = local_facts([], driver_file=str(tmp_path / "missing"), cdi_dirs=[str(tmp_path)])
    assert facts.driver_version is None  # no /proc/driver/nvidia and NVML reports no library here


# --- fixes -------------------------------------------------------------------------------------------


def test_fix_plan_for_managed_unit_reaudits_clean() -> None:
    (plan,) = plan_fixes([load("rigctl-qwen3-8b.container")], NO_HOST)
    assert plan.managed
    fixed = plan.fixed_unit()
    assert audit([fixed], NO_HOST) == []
    assert "Restart=always" in fixed.text
    assert "--shm-size" not in fixed.text
    assert "TimeoutStartSec=1800" in fixed.text
    assert "PublishPort=127.0.0.1:8000:8000" in fixed.text
    assert plan.patch().startswith("--- a/")


def test_fix_pins_image_when_the_host_knows_its_digest() -> None:
    digest = "sha256:" + "ab" * 32
    facts = DoctorFacts(image_digests={"docker.io/vllm/vllm-openai:latest": digest})
    (plan,) = plan_fixes([load("unpinned.container")], facts)
    assert f"Image=docker.io/vllm/vllm-openai:latest@{digest}" in plan.fixed_unit().text
    assert audit([plan.fixed_unit()], facts) == []


def test_fix_dropin_is_edited_where_the_weak_value_lives() -> None:
    (plan,) = plan_fixes([load("dropin-weakens.container")], NO_HOST)
    changed = {Path(c.path).name: c for c in plan.changes}
    assert "Restart=always" in changed["50-restart.conf"].after
    assert audit([plan.fixed_unit()], NO_HOST) == []


def test_fix_continuation_lines_keep_their_shape() -> None:
    (plan,) = plan_fixes([load("ipc-shm.container")], NO_HOST)
    after = plan.fixed_unit().text
    assert "PodmanArgs=--ipc=host \\\n    --ulimit memlock=-1\n" in after
    assert audit([plan.fixed_unit()], NO_HOST) == []


@pytest.mark.parametrize(
    "name", [p.name for p in sorted(UNITS.iterdir()) if p.suffix in (".container", ".service") and p.name != "backup.service"]
)
def test_every_fixture_fix_reaudits_without_the_fixed_ids(name: str) -> None:
    unit = load(name)
    for plan in plan_fixes([unit], NO_HOST):
        remaining = {f.id for f in audit([plan.fixed_unit()], NO_HOST)}
        assert not remaining & set(plan.fixed), f"{name}: {remaining & set(plan.fixed)} survived --fix"


def test_rewrite_keeps_backup_and_mode(tmp_path: Path) -> None:
    target = tmp_path / "a.container"
    target.write_text("old\n")
    target.chmod(0o640)
    snap = local_snapshot(path_roots([str(tmp_path)]))
    backups = rewrite([FileChange(str(target), "old\n", "new\n")], snap)
    assert target.read_text() == "new\n"
    assert Path(backups[str(target)]).read_text() == "old\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert stat.S_IMODE(Path(backups[str(target)]).stat().st_mode) == 0o640
    assert not [p for p in tmp_path.iterdir() if p.name.endswith("tmp")]


# --- the command -------------------------------------------------------------------------------------


def _copy_units(tmp_path: Path) -> Path:
    dest = tmp_path / "units"
    shutil.copytree(UNITS, dest)
    return dest


def test_cli_fix_rewrites_managed_and_patches_the_rest(tmp_path: Path) -> None:
    units = _copy_units(tmp_path)
    before = {p: p.read_bytes() for p in units.rglob("*") if p.is_file()}
    result = CliRunner().invoke(app, ["doctor", "--path", str(units), "--fix", "--json"])
    assert result.exit_code == 1, result.output  # units rigctl does not manage still fail
    data = json.loads(result.stdout)
    assert (data["rigctl"], data["command"], data["ok"]) == ("1", "doctor", False)
    managed = units / "rigctl-qwen3-8b.container"
    (applied,) = data["fix"]["applied"]
    assert applied["unit"] == str(managed)
    assert Path(applied["backups"][0]).read_bytes() == before[managed]
    assert "Restart=always" in managed.read_text()
    for path, content in before.items():
        if path != managed:
            assert path.read_bytes() == content, f"{path} was touched"
    patched = {p["unit"]: p["patch"] for p in data["fix"]["patches"]}
    assert str(units / "glm53-flash.container") in patched
    assert "+Restart=always" in patched[str(units / "glm53-flash.container")]
    assert str(managed) not in {f["unit"] for f in data["fix"]["remaining"]}
    # the rewritten unit audits clean on its own
    again = CliRunner().invoke(app, ["doctor", "--path", str(managed), "--json"])
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["findings"] == []


def test_cli_text_output_names_unit_id_and_fix(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["doctor", "--path", str(UNITS / "glm53-flash.container")])
    assert result.exit_code == 1
    assert "glm53-flash.container" in result.stdout
    assert "FAIL restart-not-always" in result.stdout
    assert "fix: set Restart=always" in result.stdout


def test_cli_clean_directory_exits_zero(tmp_path: Path) -> None:
    for name in ("glm53-flash-fixed.container", "v4flash.container", "llama-server.service"):
        shutil.copy(UNITS / name, tmp_path / name)
    result = CliRunner().invoke(app, ["doctor", "--path", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert len(data["units"]) == 3
    assert data["counts"] == {"fail": 0, "warn": 0, "info": 0}


def test_report_counts_the_whole_fixture_set() -> None:
    report = doctor([str(UNITS)], facts=NO_HOST)
    assert not report.ok
    assert report.counts()["fail"] == 17


# --- the real quadlet generator ----------------------------------------------------------------------

QUADLET_CANDIDATES = ("/usr/local/libexec/rigctl/quadlet", "/usr/libexec/podman/quadlet", "/usr/lib/podman/quadlet")


def _quadlet() -> str | None:
    return next((p for p in QUADLET_CANDIDATES if os.access(p, os.X_OK)), None)


def _dryrun(quadlet: str, unit_dir: Path) -> tuple[int, str, str]:
    from rigctl.util.proc import run

    env = {**os.environ, "QUADLET_UNIT_DIRS": str(unit_dir)}
    done = run([quadlet, "-dryrun"], env=env, timeout=30)
    return done.rc, done.stdout, done.stderr


@pytest.mark.integration
def test_fixed_quadlet_goes_through_the_real_generator(tmp_path: Path, need: Callable[[bool, str], None]) -> None:
    quadlet = _quadlet()
    need(quadlet is not None, "no quadlet binary (.ci/get-quadlet.sh installs one)")
    assert quadlet is not None
    (plan,) = plan_fixes([load("rigctl-qwen3-8b.container")], NO_HOST)
    (tmp_path / "rigctl-qwen3-8b.container").write_text(plan.fixed_unit().text)
    rc, out, err = _dryrun(quadlet, tmp_path)
    assert rc == 0, err
    service = out.split("---rigctl-qwen3-8b.service---", 1)[-1]
    assert "Restart=always" in service
    assert "TimeoutStartSec=1800" in service
    assert "--ipc=host" in service
    assert "--shm-size" not in service
    assert "127.0.0.1:8000:8000" in service


@pytest.mark.integration
def test_fixture_quadlets_are_ones_the_generator_accepts(tmp_path: Path, need: Callable[[bool, str], None]) -> None:
    quadlet = _quadlet()
    need(quadlet is not None, "no quadlet binary (.ci/get-quadlet.sh installs one)")
    assert quadlet is not None
    for path in UNITS.glob("*.container"):
        shutil.copy(path, tmp_path / path.name)
    rc, out, err = _dryrun(quadlet, tmp_path)
    assert rc == 0, err
    # quadlet itself writes no Restart=: the one in the generated glm53-flash service is the unit's own
    glm = out.split("---glm53-flash.service---", 1)[1].split("---", 1)[0]
    assert "Restart=on-failure" in glm


@pytest.mark.integration
def test_local_image_digest_pins_for_real(tmp_path: Path, need: Callable[[bool, str], None]) -> None:
    need(shutil.which("podman") is not None, "podman not installed")
    import tarfile

    from rigctl.host.probes import local_image_digests
    from rigctl.util.proc import run

    rootfs = tmp_path / "rootfs.tar"
    (tmp_path / "hello").write_text("hi\n")
    with tarfile.open(rootfs, "w") as tar:
        tar.add(tmp_path / "hello", arcname="hello")
    name = "localhost/rigctl-doctor-test:latest"
    imported = run(["podman", "import", str(rootfs), name], timeout=60)
    need(imported.ok, f"podman import failed here: {imported.describe()}")
    try:
        digests = local_image_digests([name])
        assert digests[name].startswith("sha256:")
        text = f"[Container]\nImage={name}\n[Service]\nRestart=always\n"
        unit = Unit.of(str(tmp_path / "l.container"), text)
        facts = DoctorFacts(image_digests=digests)
        (plan,) = plan_fixes([unit], facts)
        pinned = plan.fixed_unit()
        assert audit([pinned], facts) == []
        ref = pinned.text.split("Image=", 1)[1].split()[0]
        inspect = run(["podman", "image", "inspect", "--format", "{{.Id}}", ref], timeout=30)
        assert inspect.ok, inspect.describe()  # podman resolves the pinned reference to the same image
    finally:
        run(["podman", "rmi", "-f", name], timeout=60)


def test_doctor_accepts_the_warmup_budget_rigctl_rendered(tmp_path: Path) -> None:
    """A recipe may give its model a short warmup (300 s for an 8B model): the unit rigctl renders from it
    (Notify=healthy, TimeoutStartSec=300) is rigctl's own decision, which `up`'s watch and `status` judge by,
    and doctor no longer fails it nor "fixes" it to 1800 s; a unit that is not rigctl's still gets the rule."""
    out = tmp_path / "units"
    rendered = CliRunner().invoke(app, ["render", "qwen3-8b-vllm", "--set", "service.warmup_budget_s=300",
                                        "--podman-version", "5.4", "--quadlet-version", "5.4", "--gpus", "GPU-x",
                                        "--out", str(out)])
    assert rendered.exit_code == 0, rendered.output
    (unit,) = out.iterdir()
    text = unit.read_text()
    assert "Notify=healthy" in text and "TimeoutStartSec=300" in text
    assert audit([Unit.of(str(unit), text)], NO_HOST) == []
    foreign = text.replace("Label=rigctl.managed=true\n", "")
    assert {f.id for f in audit([Unit.of(str(unit), foreign)], NO_HOST)} == {"notify-healthy-short-timeout"}
