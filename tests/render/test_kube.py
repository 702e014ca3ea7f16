"""rigctl render --target kube / podman-kube: every bundled recipe validates offline against the Kubernetes
schemas (kubernetes-validate, strict), kube/ is in sync, the engine runs exactly as in the quadlet unit, and
each manifest field the issue names is derived from the recipe as it should be."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.support.recipes import recipe_with
from tools.regen_kube import README, bundled_manifests, differences
from typer.testing import CliRunner

from rigctl.cli.app import app
from rigctl.errors import UsageError
from rigctl.places import ENGINE_CACHE_MOUNT
from rigctl.recipe.catalog import bundled_recipes_dir
from rigctl.recipe.load import load
from rigctl.render.escape import RenderError
from rigctl.render.kube import (
    DEFAULT_SHM_LIMIT,
    PRODUCT_LABEL,
    RenderedKube,
    gpu_product_label,
    job_backoff_limit,
    object_name,
    recipe_digest,
    render_kube,
    shm_quantity,
)
from rigctl.render.kubelint import RULES
from rigctl.render.units import engine_process, render_units
from rigctl.util.proc import run

K8S_VERSION = "1.33.0"  # the pinned Kubernetes the schemas are checked against
BUNDLED = sorted(p.stem for p in bundled_recipes_dir().glob("*.yaml"))
PINNED = "ghcr.io/example/rigctl@sha256:" + "ab" * 32
runner = CliRunner()


def _validate(documents: list[dict[str, Any]]) -> list[str]:
    """Every document against the pinned Kubernetes schemas in strict mode (unknown fields refused). A
    kind without a schema is a failure too: nothing may pass unchecked."""
    kinds = []
    for document in documents:
        kubernetes_validate.validate(document, K8S_VERSION, strict=True)
        kinds.append(document["kind"])
    return kinds


def _deployment(rendered: RenderedKube) -> dict[str, Any]:
    return next(d for d in rendered.manifests if d["kind"] == "Deployment")


def _engine(rendered: RenderedKube) -> dict[str, Any]:
    (container,) = _deployment(rendered)["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "engine"
    return container


def _env(container: dict[str, Any]) -> list[tuple[str, str]]:
    return [(e["name"], e["value"]) for e in container.get("env", []) if "value" in e]


# --- offline schema validation -------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["kube", "podman-kube"])
@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_recipe_validates_against_kubernetes_schemas(name: str, target: str) -> None:
    rendered = render_kube(load(name).recipe, target=target)
    assert _validate(rendered.manifests) == ["Deployment", "Service"]
    # the printed YAML is the same documents (what `kubectl apply -f` reads)
    assert list(yaml.safe_load_all(rendered.yaml_file.text)) == rendered.manifests


@pytest.mark.parametrize("name", BUNDLED)
def test_every_option_validates_too(name: str) -> None:
    rendered = render_kube(load(name).recipe, verify_image=PINNED, model_pvc="models-glm",
                           node_products=["NVIDIA-H200"], namespace="llm-serving")
    assert _validate(rendered.manifests) == ["Deployment", "Service", "Job"]
    for podman in ((4, 3), (4, 7), (5, 3), (5, 4)):
        kube_play = render_kube(load(name).recipe, target="podman-kube", podman_version=podman,
                                quadlet_version=(5, 4), model_pvc="models-glm", namespace="llm")
        assert _validate(kube_play.manifests) == ["Deployment", "Service"]


def test_the_schema_check_is_strict() -> None:
    """The validator this file relies on refuses a misspelt field (so a pass above means something)."""
    deployment = _deployment(render_kube(load("qwen3-8b-vllm").recipe))
    probe = deployment["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    probe["failureThresold"] = probe.pop("failureThreshold")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


# --- golden files --------------------------------------------------------------------------------------


def test_kube_dir_matches_bundled_recipes(repo: Path) -> None:
    problems = differences(repo / "kube")
    assert problems == [], "kube/ is out of sync; run `uv run python tools/regen_kube.py`: " + "; ".join(problems)


def test_every_bundled_recipe_has_its_files(repo: Path) -> None:
    expected = sorted(f"rigctl-{n}{suffix}" for n in BUNDLED for suffix in (".yaml", ".podman.yaml", ".kube"))
    assert sorted(bundled_manifests()) == expected
    assert sorted(p.name for p in (repo / "kube").iterdir() if p.name != README) == expected


def test_rendering_is_deterministic() -> None:
    assert {n: f.text for n, f in bundled_manifests().items()} == {n: f.text for n, f in bundled_manifests().items()}


# --- one source for the engine's command line ------------------------------------------------------------


@pytest.mark.parametrize("target", ["kube", "podman-kube"])
@pytest.mark.parametrize("name", BUNDLED)
def test_args_and_env_come_from_the_quadlet_units_source(name: str, target: str) -> None:
    recipe = load(name).recipe
    container = _engine(render_kube(recipe, target=target))
    process = engine_process(recipe)
    assert container["args"] == process.args
    assert container.get("command") == process.entrypoint
    assert _env(container) == process.env
    assert container["image"] == recipe.image


def test_entrypoint_override_becomes_command() -> None:
    recipe = recipe_with("qwen3-8b-vllm", engine__command=["python3", "-m", "vllm.entrypoints.openai.api_server"])
    container = _engine(render_kube(recipe))
    assert container["command"] == ["python3"]
    assert container["args"][:2] == ["-m", "vllm.entrypoints.openai.api_server"]


@pytest.mark.integration
@pytest.mark.parametrize("name", BUNDLED)
def test_args_and_env_equal_what_quadlet_hands_podman(
    name: str, tmp_path: Path, generate: Callable[..., Any], exec_argv: Callable[[str], list[str]],
) -> None:
    """The real quadlet generator's ExecStart for the .container unit carries exactly the manifest's args
    (after the image) and env (as --env)."""
    recipe = load(name).recipe
    argv = exec_argv(generate(render_units(recipe, podman_version=(5, 4)), tmp_path, False).exec_start())
    container = _engine(render_kube(recipe))
    assert argv[argv.index(recipe.image) + 1 :] == container["args"]
    env = [argv[i + 1] for i, word in enumerate(argv[:-1]) if word == "--env"]
    # the unit's engine cache (a host directory per image and GPU) is the quadlet target's own: a pod keeps
    # its caches where the image puts them
    env = [e for e in env if f"={ENGINE_CACHE_MOUNT}/" not in e]
    assert sorted(env) == sorted(f"{k}={v}" for k, v in _env(container))  # quadlet sorts them


# --- the Deployment and its pod ----------------------------------------------------------------------------


def test_deployment_fields() -> None:
    recipe = load("glm53-flash").recipe
    deployment = _deployment(render_kube(recipe))
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    assert spec["progressDeadlineSeconds"] > recipe.service.warmup_budget_s
    labels = deployment["metadata"]["labels"]
    assert labels["app.kubernetes.io/name"] == "glm53-flash"
    assert labels["app.kubernetes.io/instance"] == "rigctl-glm53-flash"
    assert labels["app.kubernetes.io/managed-by"] == "rigctl"
    assert deployment["metadata"]["annotations"]["rigctl/recipe-digest"] == recipe_digest(recipe)
    assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    pod = spec["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == recipe.service.stop_timeout_s == 120
    assert "restartPolicy" not in pod  # a Deployment's pods restart Always


def test_recipe_digest_follows_the_effective_recipe() -> None:
    base = load("qwen3-8b-vllm").recipe
    assert recipe_digest(base) == recipe_digest(load("qwen3-8b-vllm").recipe)
    assert recipe_digest(base).startswith("sha256:") and len(recipe_digest(base)) == 7 + 64
    changed = load("qwen3-8b-vllm", sets=["verify.request_timeout_s=61"]).recipe
    assert recipe_digest(changed) != recipe_digest(base)


@pytest.mark.parametrize(("nvml", "label"), [
    ("NVIDIA A100-SXM4-80GB", "NVIDIA-A100-SXM4-80GB"),
    ("NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"),
    ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
    ("  Tesla  V100-PCIE-32GB ", "Tesla-V100-PCIE-32GB"),  # runs of spaces: one dash; ends trimmed
    ("NVIDIA GeForce RTX 4090 (rev. a1)", "NVIDIA-GeForce-RTX-4090-rev.-a1"),  # () removed, '.' kept
    ("Quadro RTX 8000/Max+Q", "Quadro-RTX-8000MaxQ"),
    ("NVIDIA_L40S", "NVIDIA_L40S"),
])
def test_gpu_product_label_is_gfds_sanitised_name(nvml: str, label: str) -> None:
    assert gpu_product_label(nvml) == label


def test_one_product_is_a_node_selector() -> None:
    recipe = recipe_with("qwen3-8b-vllm", gpus__products=["NVIDIA H200"])
    pod = _deployment(render_kube(recipe))["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {PRODUCT_LABEL: "NVIDIA-H200"}
    assert "affinity" not in pod


def test_several_products_are_node_affinity_in() -> None:
    rendered = render_kube(load("glm53-flash").recipe)
    pod = _deployment(rendered)["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod
    (term,) = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": PRODUCT_LABEL, "operator": "In", "values": [
        "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
        "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition",
        "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
    ]}]
    assert any("k8s-device-plugin#731" in n.message for n in rendered.notes)  # the mixed pair's caveat


def test_node_product_override() -> None:
    pod = _deployment(render_kube(load("glm53-flash").recipe, node_products=["NVIDIA-RTX-PRO-6000-SHARED"]))
    assert pod["spec"]["template"]["spec"]["nodeSelector"] == {PRODUCT_LABEL: "NVIDIA-RTX-PRO-6000-SHARED"}
    with pytest.raises(UsageError):
        render_kube(load("glm53-flash").recipe, node_products=["has space"])


def test_no_products_no_selection_and_a_note() -> None:
    rendered = render_kube(load("qwen3-8b-vllm").recipe)
    pod = _deployment(rendered)["spec"]["template"]["spec"]
    assert "nodeSelector" not in pod and "affinity" not in pod
    assert any(n.kind == "assumed" and "--node-product" in n.message for n in rendered.notes)


def test_gpu_count_port_and_probes() -> None:
    recipe = load("glm53-flash").recipe
    container = _engine(render_kube(recipe))
    assert container["resources"]["limits"] == {"nvidia.com/gpu": 2}
    assert container["ports"] == [{"name": "http", "containerPort": 8001, "protocol": "TCP"}]
    startup, ready, live = container["startupProbe"], container["readinessProbe"], container["livenessProbe"]
    assert startup["httpGet"] == {"path": "/health", "port": "http"}
    assert startup["periodSeconds"] * startup["failureThreshold"] >= recipe.service.warmup_budget_s
    assert ready["httpGet"] == {"path": "/v1/models", "port": "http"}
    assert live["httpGet"] == {"path": "/health", "port": "http"}


@pytest.mark.parametrize("warmup", [10, 15, 95, 901, 3600, 86400])
def test_startup_probe_outlasts_any_warmup_budget(warmup: int) -> None:
    rendered = render_kube(recipe_with("qwen3-8b-vllm", service__warmup_budget_s=warmup))
    startup = _engine(rendered)["startupProbe"]
    assert warmup <= startup["periodSeconds"] * startup["failureThreshold"] < warmup + startup["periodSeconds"]
    assert _deployment(rendered)["spec"]["progressDeadlineSeconds"] > warmup


def test_shm_from_the_recipe_and_host_ipc_note() -> None:
    qwen = render_kube(load("qwen3-8b-vllm").recipe)
    volumes = {v["name"]: v for v in _deployment(qwen)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert {"name": "shm", "mountPath": "/dev/shm"} in _engine(qwen)["volumeMounts"]
    glm = render_kube(load("glm53-flash").recipe)  # ipc host, two GPUs, no shm_size
    volumes = {v["name"]: v for v in _deployment(glm)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["shm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": DEFAULT_SHM_LIMIT}  # bounded all the same
    assert any(n.kind == "assumed" and DEFAULT_SHM_LIMIT in n.message for n in glm.notes)
    assert any(n.kind == "adapted" and "hostIPC" in n.message for n in glm.notes)
    single = render_kube(recipe_with("qwen3-8b-vllm", container__shm_size=None))  # one GPU, nothing asked
    assert "shm" not in {v["name"] for v in _deployment(single)["spec"]["template"]["spec"]["volumes"]}


@pytest.mark.parametrize(("size", "quantity"), [("8g", "8Gi"), ("512m", "512Mi"), ("64k", "64Ki"),
                                                 ("1G", "1Gi"), ("1000", "1000"), ("4096b", "4096")])
def test_shm_quantity(size: str, quantity: str) -> None:
    assert shm_quantity(size) == quantity


def test_checkpoint_is_a_read_only_host_directory_or_a_claim() -> None:
    recipe = load("glm53-flash").recipe
    host = render_kube(recipe)
    volumes = {v["name"]: v for v in _deployment(host)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["checkpoint"] == {"name": "checkpoint", "hostPath": {
        "path": "/srv/models/GLM-5.3-Flash-tr3-4bpw", "type": "Directory"}}
    mount = next(m for m in _engine(host)["volumeMounts"] if m["name"] == "checkpoint")
    assert mount == {"name": "checkpoint", "mountPath": "/models/GLM-5.3-Flash-tr3-4bpw", "readOnly": True}
    claim = render_kube(recipe, model_pvc="glm-weights")
    volumes = {v["name"]: v for v in _deployment(claim)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["checkpoint"]["persistentVolumeClaim"] == {"claimName": "glm-weights", "readOnly": True}
    with pytest.raises(UsageError):
        render_kube(recipe, model_pvc="Not_A_Claim")


def test_service_is_cluster_ip_on_the_named_port() -> None:
    rendered = render_kube(load("glm53-flash").recipe)
    service = next(d for d in rendered.manifests if d["kind"] == "Service")
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8001, "targetPort": "http", "protocol": "TCP"}]
    assert service["spec"]["selector"] == _deployment(rendered)["spec"]["selector"]["matchLabels"]


def test_verify_job_runs_rigctl_verify_against_the_service() -> None:
    recipe = load("glm53-flash").recipe
    rendered = render_kube(recipe, verify_image=PINNED)
    job = next(d for d in rendered.manifests if d["kind"] == "Job")
    assert job["apiVersion"] == "batch/v1"
    pod = job["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == PINNED
    assert [*container["command"], *container["args"][:4]] == [
        "rigctl", "verify", "glm53-flash", "--url", "http://rigctl-glm53-flash:8001/v1"]
    assert pod["restartPolicy"] == "Never"
    # its pod must not be picked by the Service (no traffic to the verifier)
    selector = next(d for d in rendered.manifests if d["kind"] == "Service")["spec"]["selector"]
    assert not selector.items() <= job["spec"]["template"]["metadata"]["labels"].items()
    assert job["spec"]["activeDeadlineSeconds"] > recipe.service.warmup_budget_s


@pytest.mark.parametrize("warmup", [10, 90, 900, 3600, 86400])
def test_job_retries_outlast_the_warmup(warmup: int) -> None:
    retries = job_backoff_limit(warmup)
    waits = [min(10 * 2**i, 360) for i in range(retries)]
    assert sum(waits[:-2]) >= warmup  # two spare retries once the engine is warm


# --- a shared cluster: requests, securityContext, toleration, namespace, bounded /dev/shm ------------------


def test_requests_cover_what_the_engine_loads() -> None:
    recipe = load("glm53-flash").recipe
    rendered = render_kube(recipe)
    requests = _engine(rendered)["resources"]["requests"]
    loaded = recipe.checkpoint.total_bytes or recipe.checkpoint.approx_bytes or 0
    assert loaded > 170 * 2**30  # the "171 GB load"
    assert requests["cpu"] == "4"  # 2 + one per GPU worker
    gib = int(requests["memory"].removesuffix("Gi"))
    # the checkpoint + 10%, 4 GiB, 2 GiB per GPU, and the 16Gi /dev/shm, rounded up to a GiB
    assert gib == -(-(int(loaded * 1.1) + (4 + 2 * 2 + 16) * 2**30) // 2**30)
    basis = _deployment(rendered)["metadata"]["annotations"]["rigctl/requests"]
    assert basis.startswith(f"memory {requests['memory']}: checkpoint 171.8 GiB") and "/dev/shm 16Gi" in basis


def test_a_draft_model_counts_in_the_memory_request() -> None:
    draft = load("glm53-flash-k3-dflash2").recipe
    plain = recipe_with("glm53-flash-k3-dflash2", speculative={"method": "none"})
    more = int(_engine(render_kube(draft))["resources"]["requests"]["memory"].removesuffix("Gi"))
    less = int(_engine(render_kube(plain))["resources"]["requests"]["memory"].removesuffix("Gi"))
    assert more > less
    assert "checkpoint and draft" in _deployment(render_kube(draft))["metadata"]["annotations"]["rigctl/requests"]


@pytest.mark.parametrize("target", ["kube", "podman-kube"])
def test_every_container_has_a_security_context(target: str) -> None:
    rendered = render_kube(load("glm53-flash").recipe, target=target,
                           verify_image=PINNED if target == "kube" else None)
    containers = [c for d in rendered.manifests if d["kind"] in ("Deployment", "Job")
                  for c in d["spec"]["template"]["spec"]["containers"]]
    assert len(containers) == (2 if target == "kube" else 1)
    for container in containers:
        assert container["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
                                                "readOnlyRootFilesystem": False,
                                                "seccompProfile": {"type": "RuntimeDefault"}}
    why = _deployment(rendered)["metadata"]["annotations"]["rigctl/security-context"]
    assert why.startswith("readOnlyRootFilesystem false: ")


def test_the_verify_job_requests_a_little() -> None:
    job = next(d for d in render_kube(load("glm53-flash").recipe, verify_image=PINNED).manifests if d["kind"] == "Job")
    assert job["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "512Mi"}}


def test_gpu_pods_tolerate_the_gpu_taint_and_others_do_not() -> None:
    pod = _deployment(render_kube(load("glm53-flash").recipe))["spec"]["template"]["spec"]
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    cpu_only = recipe_with("qwen3-8b-vllm", gpus={"count": 0}, container__shm_size=None)
    assert "tolerations" not in _deployment(render_kube(cpu_only))["spec"]["template"]["spec"]
    podman = _deployment(render_kube(load("glm53-flash").recipe, target="podman-kube"))
    assert "tolerations" not in podman["spec"]["template"]["spec"]  # no scheduler on one box


@pytest.mark.parametrize("target", ["kube", "podman-kube"])
def test_namespace_on_every_object(target: str) -> None:
    rendered = render_kube(load("glm53-flash").recipe, target=target, namespace="llm-serving",
                           verify_image=PINNED if target == "kube" else None)
    assert {d["metadata"]["namespace"] for d in rendered.manifests} == {"llm-serving"}
    assert rendered.namespace == "llm-serving"
    assert next(r for r in rendered.lint if r.id == "namespace").message.endswith("llm-serving")
    plain = render_kube(load("glm53-flash").recipe)
    assert all("namespace" not in d["metadata"] for d in plain.manifests)
    assert any(n.kind == "assumed" and "--namespace" in n.message for n in plain.notes)


@pytest.mark.parametrize("namespace", ["LLM", "llm_serving", "-llm", "llm-", "", "a" * 64, "llm.serving"])
def test_namespace_must_be_a_dns_1123_label(namespace: str) -> None:
    with pytest.raises(UsageError, match="DNS-1123"):
        render_kube(load("glm53-flash").recipe, namespace=namespace)


def test_namespace_may_start_with_a_digit() -> None:  # a DNS-1123 label, unlike a Service name
    assert render_kube(load("glm53-flash").recipe, namespace="9-" + "a" * 61).namespace == "9-" + "a" * 61


def test_object_names_are_dns_labels() -> None:
    assert object_name(recipe_with("qwen3-8b-vllm", container__name="my_box.v2")) == "my-box-v2"
    assert object_name(recipe_with("qwen3-8b-vllm", container__name="9lives")) == "rigctl-9lives"


# --- podman kube play ----------------------------------------------------------------------------------


def test_podman_kube_gpus_by_cdi_name_from_54() -> None:
    recipe = load("glm53-flash").recipe
    container = _engine(render_kube(recipe, target="podman-kube", gpu_ids=["GPU-a", "GPU-b"]))
    assert container["resources"] == {"limits": {"nvidia.com/gpu=GPU-a": 1, "nvidia.com/gpu=GPU-b": 1}}
    older = render_kube(recipe, target="podman-kube", podman_version=(5, 3))
    assert "resources" not in _engine(older)
    assert any(n.kind == "adapted" and "passes no GPUs" in n.message for n in older.notes)


def test_podman_kube_publishes_on_the_recipes_address() -> None:
    recipe = recipe_with("qwen3-8b-vllm", container__publish={"address": "127.0.0.1", "port": 18444})
    (port,) = _engine(render_kube(recipe, target="podman-kube"))["ports"]
    assert port == {"name": "http", "containerPort": 8000, "protocol": "TCP", "hostPort": 18444, "hostIP": "127.0.0.1"}


def test_podman_kube_probes_follow_the_podman_that_runs_them() -> None:
    recipe = load("qwen3-8b-vllm").recipe
    new = _engine(render_kube(recipe, target="podman-kube"))
    assert new["startupProbe"]["exec"]["command"][:2] == ["python3", "-c"]
    assert "http://127.0.0.1:8000/health" in new["startupProbe"]["exec"]["command"][2]
    assert "initialDelaySeconds" not in new["livenessProbe"]
    old_render = render_kube(recipe, target="podman-kube", podman_version=(4, 3), quadlet_version=(5, 4))
    old = _engine(old_render)
    # podman 4.3 joins the words with spaces and runs them through /bin/sh -c: that must be a shell command
    shell = " ".join(old["livenessProbe"]["exec"]["command"])
    assert shell == "python3 -c 'import urllib.request as u; u.urlopen(\"http://127.0.0.1:8000/health\", timeout=4)'"
    assert old["livenessProbe"]["initialDelaySeconds"] == recipe.service.warmup_budget_s  # no startupProbe there
    assert any(n.kind == "adapted" and "startupProbe" in n.message for n in old_render.notes)


def test_podman_kube_pod_restarts_on_failure_only() -> None:
    deployment = _deployment(render_kube(load("qwen3-8b-vllm").recipe, target="podman-kube"))
    assert deployment["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"


def test_podman_kube_unit() -> None:
    recipe = load("qwen3-8b-vllm").recipe
    rendered = render_kube(recipe, target="podman-kube", scope="user")
    assert [f.name for f in rendered.files] == ["rigctl-qwen3-8b-vllm.podman.yaml", "rigctl-qwen3-8b-vllm.kube"]
    unit = rendered.files[1].text
    assert "[Kube]\n" in unit and "\nYaml=rigctl-qwen3-8b-vllm.podman.yaml\n" in unit
    assert "\nRestart=always\n" in unit
    assert f"\nTimeoutStartSec={recipe.service.warmup_budget_s}\n" in unit
    assert "[Install]\nWantedBy=default.target\n" in unit
    assert rendered.service_name == "rigctl-qwen3-8b-vllm.service"


def test_podman_kube_without_a_generator_has_no_unit() -> None:
    rendered = render_kube(load("qwen3-8b-vllm").recipe, target="podman-kube", podman_version=(4, 3))
    assert [f.name for f in rendered.files] == ["rigctl-qwen3-8b-vllm.podman.yaml"]
    assert any("no .kube unit" in n.message for n in rendered.notes)
    with pytest.raises(RenderError):
        render_kube(load("qwen3-8b-vllm").recipe, target="podman-kube", podman_version=(4, 2))


def test_podman_kube_refuses_a_job_and_node_products() -> None:
    with pytest.raises(UsageError, match="Jobs"):
        render_kube(load("qwen3-8b-vllm").recipe, target="podman-kube", verify_image=PINNED)
    with pytest.raises(UsageError, match="--target kube"):
        render_kube(load("glm53-flash").recipe, target="podman-kube", node_products=["NVIDIA-H200"])


def _quadlet() -> str | None:
    for candidate in (os.environ.get("RIGCTL_QUADLET", ""), "/usr/local/libexec/rigctl/quadlet"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("quadlet")


@pytest.mark.integration
@pytest.mark.parametrize("name", BUNDLED)
def test_kube_unit_passes_the_real_quadlet_generator(name: str, tmp_path: Path,
                                                     need: Callable[[bool, str], None]) -> None:
    quadlet = _quadlet()
    need(quadlet is not None, "quadlet binary not found (run .ci/get-quadlet.sh)")
    assert quadlet is not None
    rendered = render_kube(load(name).recipe, target="podman-kube", scope="user")
    for file in rendered.files:
        (tmp_path / file.name).write_text(file.text)
    done = run([quadlet, "-no-kmsg-log", "-user", "-dryrun"], env={**os.environ, "QUADLET_UNIT_DIRS": str(tmp_path)},
               timeout=30)
    assert done.rc == 0 and "unsupported key" not in done.stderr, done.describe()
    yaml_path = tmp_path / rendered.files[0].name
    assert f"ExecStart=/usr/bin/podman kube play --replace --service-container=true {yaml_path}\n" in done.stdout
    assert "\nRestart=always\n" in done.stdout
    assert f"\nTimeoutStartSec={load(name).recipe.service.warmup_budget_s}\n" in done.stdout


# --- the command line ------------------------------------------------------------------------------------


def test_cli_text_is_the_yaml_alone_and_notes_go_to_stderr() -> None:
    result = runner.invoke(app, ["render", "glm53-flash", "--target", "kube"])
    assert result.exit_code == 0, result.output
    documents = list(yaml.safe_load_all(result.stdout))
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]
    assert "rigctl render: note (adapted)" in result.stderr and "rigctl render:" not in result.stdout


def test_cli_json_is_one_object_with_manifests_lint_and_notes() -> None:
    result = runner.invoke(app, ["render", "glm53-flash", "--target", "kube", "--json", "--verify-job", PINNED])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["command"] == "render" and data["ok"] is True and data["target"] == "kube"
    assert [d["kind"] for d in data["manifests"]] == ["Deployment", "Service", "Job"]
    rules = [r["rule"] for r in data["lint"]]
    assert rules[:5] == ["gpu-count", "shm", "probe-budget", "image-pinned", "resource-names"]  # additive
    assert rules == list(RULES)
    assert all(r["ok"] for r in data["lint"])
    assert data["files"][0]["name"] == "rigctl-glm53-flash.yaml"
    assert list(yaml.safe_load_all(data["files"][0]["text"])) == data["manifests"]
    assert any(n["kind"] == "adapted" for n in data["notes"])


def test_cli_podman_kube_out_writes_the_yaml_and_the_unit(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "qwen3-8b-vllm", "--target", "podman-kube", "--out", str(tmp_path),
                                 "--podman-version", "4.3", "--quadlet-version", "5.4", "--scope", "user",
                                 "--gpus", "0"])
    assert result.exit_code == 0, result.output
    written = result.stdout.split()
    assert written == [str(tmp_path / "rigctl-qwen3-8b-vllm.podman.yaml"), str(tmp_path / "rigctl-qwen3-8b-vllm.kube")]
    assert "Yaml=rigctl-qwen3-8b-vllm.podman.yaml" in (tmp_path / "rigctl-qwen3-8b-vllm.kube").read_text()
    documents = yaml.safe_load_all((tmp_path / "rigctl-qwen3-8b-vllm.podman.yaml").read_text())
    assert [d["kind"] for d in documents] == ["Deployment", "Service"]


def test_cli_namespace(tmp_path: Path) -> None:
    result = runner.invoke(app, ["render", "glm53-flash", "--target", "kube", "--namespace", "llm", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["namespace"] == "llm"
    assert {d["metadata"]["namespace"] for d in data["manifests"]} == {"llm"}
    result = runner.invoke(app, ["render", "qwen3-8b-vllm", "--target", "podman-kube", "--namespace", "llm",
                                 "--podman-version", "5.4", "--gpus", "0"])
    assert result.exit_code == 0, result.output
    assert [d["metadata"]["namespace"] for d in yaml.safe_load_all(result.stdout)] == ["llm", "llm"]
    result = runner.invoke(app, ["render", "glm53-flash", "--target", "kube", "--json"])
    assert "namespace" not in json.loads(result.stdout)  # additive: only when asked


@pytest.mark.parametrize("args", [
    ["--namespace", "llm"],  # a kube option on the quadlet target
    ["--target", "kube", "--namespace", "Bad_Name"],
    ["--target", "helm"],
    ["--target", "kube", "--gpus", "0,1"],
    ["--target", "kube", "--podman-version", "5.4"],
    ["--model-pvc", "weights"],  # a kube option on the quadlet target
    ["--target", "kube", "--model-pvc", "Bad_Name"],
    ["--target", "podman-kube", "--verify-job", PINNED],
])
def test_cli_bad_usage_is_exit_2_with_one_json_object(args: list[str]) -> None:
    result = runner.invoke(app, ["render", "glm53-flash", *args, "--json"])
    assert result.exit_code == 2, result.output
    data = json.loads(result.stdout)
    assert data["ok"] is False and data["error"]["code"] == "usage"


def test_cli_lint_failure_is_exit_3_naming_the_rule() -> None:
    result = runner.invoke(app, ["render", "glm53-flash", "--target", "kube", "--verify-job", "rigctl:latest", "--json"])
    assert result.exit_code == 3, result.output
    data = json.loads(result.stdout)
    assert data["error"]["code"] == "lint-failed"
    assert "image-pinned" in data["error"]["message"]
