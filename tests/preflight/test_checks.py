"""Every required check, on the field's boxes and the story's failures."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from rigctl.errors import UsageError
from rigctl.host.facts import (
    Cdi,
    CdiSpec,
    HostFacts,
    Listener,
    PodmanFacts,
    Ports,
    SystemdFacts,
)
from rigctl.preflight import registry
from rigctl.preflight.finding import Check, Severity
from rigctl.preflight.registry import CHECKS, run_preflight
from rigctl.recipe.model import PODMAN_IPC_SHM_ERROR, Recipe

Facts = Callable[..., HostFacts]
Make = Callable[..., Recipe]

REQUIRED = ["gpu-driver", "gpu-count", "gpu-model", "gpu-memory", "gpu-compute-capability", "gpu-busy", "gpu-mig",
            "gpu-p2p", "gpu-power", "shm", "ipc-shm", "podman", "image", "cdi", "checkpoint", "license", "disk",
            "port", "systemd", "known-bad"]


def sev(recipe: Recipe, facts: HostFacts, check: str, **kw: object) -> tuple[Severity, str, str | None]:
    f = run_preflight(recipe, facts, **kw).finding(check)  # type: ignore[arg-type]
    return f.severity, f.message, f.fix


def test_registry_has_every_required_id_once() -> None:
    ids = [c.id for c in CHECKS]
    assert len(ids) == len(set(ids)) and set(REQUIRED) <= set(ids)
    assert all(c.id == c.id.lower() and " " not in c.id for c in CHECKS)


def test_healthy_mixed_box_is_ready(glm: Recipe, facts_for: Facts) -> None:
    report = run_preflight(glm, facts_for(glm, "pro6000-mixed"))
    bad = [(f.id, f.severity, f.message) for f in report.findings if f.severity in (Severity.FAIL, Severity.ERROR)]
    assert bad == [] and report.ok
    power = report.finding("gpu-power")
    assert power.severity is Severity.WARN and "300 W" in power.message and "600 W" in power.message
    assert report.finding("gpu-model").message.startswith("mixed pair (allowed)")


def test_matched_box_power_ok(glm: Recipe, facts_for: Facts) -> None:
    assert sev(glm, facts_for(glm, "pro6000-matched"), "gpu-power")[0] is Severity.OK


def test_rtx6000d_fails_model_and_count(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "rtx6000d-pair")
    s, msg, _ = sev(glm, facts, "gpu-count")
    assert s is Severity.FAIL and "RTX 6000D" in msg
    s, msg, fix = sev(glm, facts, "gpu-model", gpus=["0", "1"])
    assert s is Severity.FAIL and "0x2BB9" in msg and fix and "RTX 6000D is NOT" in fix


def test_explicit_5090_selection_is_checked(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "5090-and-two-pro6000")
    report = run_preflight(glm, facts, gpus=["0", "1"])
    assert report.finding("gpu-model").severity is Severity.FAIL
    assert report.finding("gpu-memory").severity is Severity.FAIL  # 32 GB card


def test_busy_names_pids(glm: Recipe, facts_for: Facts) -> None:
    s, msg, fix = sev(glm, facts_for(glm, "pro6000-busy"), "gpu-busy")
    assert s is Severity.FAIL and "PID 4242 vllm" in msg and fix and "kill 4242" in fix


def test_old_driver(glm: Recipe, facts_for: Facts) -> None:
    s, msg, fix = sev(glm, facts_for(glm, "pro6000-old-driver"), "gpu-driver")
    assert s is Severity.FAIL and "570.133.07" in msg and "580.65.06" in msg and fix


def test_mig_on(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-mig")
    s, _msg, fix = sev(glm, facts, "gpu-mig", gpus=["0", "1"])
    assert s is Severity.FAIL and fix and "-mig 0" in fix
    assert sev(glm, facts, "gpu-count")[0] is Severity.FAIL  # automatic choice refuses a MIG GPU


def test_no_p2p_warns_with_the_nccl_workaround(glm: Recipe, facts_for: Facts) -> None:
    s, msg, fix = sev(glm, facts_for(glm, "pro6000-no-p2p"), "gpu-p2p")
    assert s is Severity.WARN and "chipset not supported" in msg and fix and "NCCL_P2P_DISABLE=1" in fix


def test_p2p_ok_still_points_at_deep(glm: Recipe, facts_for: Facts) -> None:
    s, msg, _ = sev(glm, facts_for(glm, "pro6000-matched"), "gpu-p2p")
    assert s is Severity.OK and "--deep" in msg


def test_no_nvml(glm: Recipe, recipe_with: Make, facts_for: Facts) -> None:
    report = run_preflight(glm, facts_for(glm, "no-nvml"))
    assert report.finding("gpu-driver").severity is Severity.FAIL
    assert "NVMLError_LibraryNotFound" in report.finding("gpu-driver").message
    assert report.finding("gpu-memory").severity is Severity.SKIP
    cpu = recipe_with("qwen3-8b-vllm", "gpus.count=0", "gpus.tensor_parallel=1")
    cpu_report = run_preflight(cpu, facts_for(cpu, "no-nvml"))
    assert cpu_report.finding("gpu-driver").severity is Severity.OK
    assert cpu_report.finding("gpu-count").severity is Severity.OK


def test_single_card_fails_count(glm: Recipe, facts_for: Facts) -> None:
    assert sev(glm, facts_for(glm, "pro6000-single"), "gpu-count")[0] is Severity.FAIL


def test_ipc_host_with_shm_size_in_extra_args(recipe_with: Make, facts_for: Facts) -> None:
    # the recipe validator refuses ipc: host + shm_size; --ipc=host smuggled through extra args is caught here
    recipe = recipe_with("qwen3-8b-vllm", "container.extra_podman_args=['--ipc=host']")
    s, msg, fix = sev(recipe, facts_for(recipe, "pro6000-single"), "ipc-shm")
    assert s is Severity.FAIL and PODMAN_IPC_SHM_ERROR in msg and fix


def test_run_options_are_read_as_podman_reads_them(recipe_with: Make, facts_for: Facts) -> None:
    """The recipe model, preflight and doctor read extra_podman_args with one parser (``rigctl.podman_args``):
    ``--shm-size-systemd`` is not the /dev/shm size, and ``--ipc host`` in two words is host IPC."""
    systemd_tmpfs = recipe_with("qwen3-8b-vllm", "container.ipc=host", "container.shm_size=null",
                                "container.extra_podman_args=['--shm-size-systemd=1g']")  # was refused at load
    assert systemd_tmpfs.container.shm_given is None
    assert sev(systemd_tmpfs, facts_for(systemd_tmpfs, "pro6000-single"), "ipc-shm")[0] is Severity.OK
    two_words = recipe_with("qwen3-8b-vllm", "container.ipc=private", "container.shm_size=16g",
                            "container.extra_podman_args=['--ipc', 'host']")
    assert two_words.container.ipc_mode == "host"
    assert sev(two_words, facts_for(two_words, "pro6000-single"), "ipc-shm")[0] is Severity.FAIL
    with pytest.raises(Exception, match="ipc: host with --shm-size 8g in extra_podman_args"):
        recipe_with("qwen3-8b-vllm", "container.ipc=host", "container.shm_size=null",
                    "container.extra_podman_args=['--shm-size', '8g']")


def test_private_ipc_default_shm_for_tp2(recipe_with: Make, facts_for: Facts) -> None:
    recipe = recipe_with("glm53-flash", "container.ipc=private")
    s, msg, _ = sev(recipe, facts_for(recipe, "pro6000-matched"), "shm")
    assert s is Severity.FAIL and "podman default" in msg


@pytest.mark.parametrize(("version", "quadlet", "want"), [
    ("4.3.1", None, Severity.FAIL), ("4.3.1", "/q", Severity.WARN), ("4.9.3", "/q", Severity.WARN),
    ("5.4.2", "/q", Severity.OK)])
def test_podman_version_gating(glm: Recipe, facts_for: Facts, version: str, quadlet: str | None,
                               want: Severity) -> None:
    facts = facts_for(glm, "pro6000-matched")
    facts = facts.model_copy(update={"podman": facts.podman.model_copy(update={"version": version,
                                                                               "quadlet": quadlet})})
    s, msg, _ = sev(glm, facts, "podman")
    assert s is want, msg
    if version == "4.9.3":
        assert "Notify=healthy needs 5.0" in msg


def test_image_missing_says_how_to_pull(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched", podman=PodmanFacts(installed=True, version="5.4.2", images_via="cli"))
    s, _, fix = sev(glm, facts, "image")
    assert s is Severity.FAIL and fix and f"podman pull {glm.image}" in fix


def test_cdi_missing_stale_or_not_covering(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched")
    assert sev(glm, facts, "cdi")[0] is Severity.OK
    assert sev(glm, facts.model_copy(update={"cdi": Cdi()}), "cdi")[0] is Severity.FAIL
    stale = Cdi(specs=[CdiSpec(path="/etc/cdi/nvidia.yaml", kind="nvidia.com/gpu", devices=["all"],
                               driver_versions=["570.133.07"])])
    s, msg, fix = sev(glm, facts.model_copy(update={"cdi": stale}), "cdi")
    assert s is Severity.FAIL and "570.133.07" in msg and fix and "nvidia-ctk cdi generate" in fix
    older = Cdi(specs=[CdiSpec(path="/etc/cdi/n.yaml", kind="nvidia.com/gpu", devices=["all"], mtime_ns=1)],
                driver_library="/usr/lib/libnvidia-ml.so.580.95.05", driver_installed_ns=5)
    assert "older than the installed driver" in sev(glm, facts.model_copy(update={"cdi": older}), "cdi")[1]
    partial = Cdi(specs=[CdiSpec(path="/etc/cdi/n.yaml", kind="nvidia.com/gpu", devices=["0"])])
    assert "do not list GPU 1" in sev(glm, facts.model_copy(update={"cdi": partial}), "cdi")[1]


def test_checkpoint_shards_bytes_and_checksums(glm: Recipe, recipe_with: Make, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched")
    assert sev(glm, facts, "checkpoint")[0] is Severity.OK
    probe = facts.paths[0]
    files = list(probe.files or [])
    missing = facts.model_copy(update={"paths": [probe.model_copy(update={"files": files[:-2]})]})
    s, msg, _ = sev(glm, missing, "checkpoint")
    assert s is Severity.FAIL and "2 of 120 shards missing" in msg and "model-00119-of-00120" in msg
    shrunk = [f.model_copy(update={"size": f.size * 97 // 100}) for f in files]  # 3% short: another revision
    small = facts.model_copy(update={"paths": [probe.model_copy(update={"files": shrunk})]})
    assert "more than 2%" in sev(glm, small, "checkpoint")[1]
    gone = facts.model_copy(update={"paths": [probe.model_copy(update={"exists": False, "files": None})]})
    s, _, fix = sev(glm, gone, "checkpoint")
    assert s is Severity.FAIL and fix and "hf download brandonmusic/GLM-5.3-Flash-tr3-4bpw" in fix


def test_license_fails_closed_and_cannot_be_forced(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched", licenses=[])
    s, msg, fix = sev(glm, facts, "license", force=["license"])
    assert s is Severity.FAIL and "shapleymcg-license-1.0" in msg and fix and "--accept-license" in fix


def test_port_taken(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched",
                      ports=Ports(listening=[Listener(address="0.0.0.0", port=8001, pid=77, process="nginx")]))
    s, msg, _ = sev(glm, facts, "port")
    assert s is Severity.FAIL and "PID 77 nginx" in msg


def test_user_scope_without_linger_warns(glm: Recipe, facts_for: Facts) -> None:
    facts = facts_for(glm, "pro6000-matched",
                      systemd=SystemdFacts(system_manager=True, user_manager=True, user="op", uid=1000, linger=False))
    s, _, fix = sev(glm, facts, "systemd")
    assert s is Severity.WARN and fix and "enable-linger op" in fix


def test_known_bad_by_host_compute_capability(recipe_with: Make, facts_for: Facts) -> None:
    nvfp4 = recipe_with("glm53-flash-nvfp4")
    blackwell = facts_for(nvfp4, "pro6000-matched")
    s, msg, fix = sev(nvfp4, blackwell, "known-bad")
    assert s is Severity.FAIL and "nvfp4-sparse-mla-sm120" in msg and fix and "--force known-bad" in fix
    forced = run_preflight(nvfp4, blackwell, force=["known-bad"]).finding("known-bad")
    assert forced.severity is Severity.WARN and forced.message.startswith("(forced)")


def test_unknown_force_id_is_a_usage_error(glm: Recipe, facts_for: Facts) -> None:
    with pytest.raises(UsageError, match="no such check"):
        run_preflight(glm, facts_for(glm, "pro6000-matched"), force=["nope"])


def test_a_crashing_check_is_an_error_and_the_rest_still_run(glm: Recipe, facts_for: Facts,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(ctx: object) -> None:
        raise KeyError("oops")

    monkeypatch.setattr(registry, "CHECKS", (Check("gpu-busy", "x", boom), *CHECKS[:2]))  # type: ignore[arg-type]
    report = run_preflight(glm, facts_for(glm, "pro6000-matched"))
    assert [f.severity for f in report.findings] == [Severity.ERROR, Severity.OK, Severity.OK]
    assert "KeyError" in report.findings[0].message and not report.ok
