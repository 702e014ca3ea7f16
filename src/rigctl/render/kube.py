"""Render a recipe as Kubernetes manifests (``--target kube``), or as the same manifests for ``podman kube
play`` plus a quadlet ``.kube`` unit that runs them under systemd (``--target podman-kube``).

Pure and deterministic (golden-tested against kube/): plain dicts dumped in a fixed order, no client
library, so what is rendered is what is reviewed. The engine's command line and environment come from
``units.engine_process``, the quadlet unit's own source. Every render is linted (``kubelint``); a failing
rule refuses the render.

Why the two flavours differ (facts in shared/reference/kube.md, and seen with podman 4.3.1 here):
- GPUs: Kubernetes' device plugin takes ``nvidia.com/gpu: N``; podman ignores that name and, from 5.4,
  takes a CDI device name as the key instead (``nvidia.com/gpu=0``), which Kubernetes refuses.
- Probes: podman turns an ``httpGet`` probe into ``curl`` inside the container (engine images often lack
  curl) and, before 4.4, resolves a named port to 0, ignores ``startupProbe`` and joins an ``exec``
  command with spaces for ``/bin/sh -c``. podman-kube probes are therefore ``exec`` probes running the
  quadlet unit's Python health check, written for the podman that runs them.
- Restarts: under systemd, an exit with status 0 (how vLLM's API server ends when its engine core dies)
  must end the pod so that ``Restart=always`` starts it again; podman's default restart policy (Always)
  would restart it in place, out of systemd's sight. podman-kube pods run ``restartPolicy: OnFailure``.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import yaml

from rigctl.errors import UsageError
from rigctl.render import escape
from rigctl.render.escape import RenderError
from rigctl.render.install import Scope
from rigctl.render.kubelint import GPU_RESOURCE, SHM_PATH, LintExpectations, LintResult, lint, require_clean
from rigctl.render.units import (
    HEALTH_INTERVAL,
    HEALTH_RETRIES,
    HEALTH_TIMEOUT,
    STOP_GRACE_S,
    EngineProcess,
    Note,
    UnitFile,
    engine_process,
    gpu_devices,
    http_probe_code,
)
from rigctl.render.versions import DEFAULT_PODMAN, PODMAN_FLOOR, QUADLET_FIRST, Version, fmt

if TYPE_CHECKING:
    from rigctl.recipe.model import Recipe

Target = Literal["kube", "podman-kube"]
TARGETS: tuple[Target, ...] = ("kube", "podman-kube")

# podman kube play, by version (see the module docstring)
KUBE_CDI: Version = (5, 4)  # a CDI device name as a resource key (containers/podman#25010)
KUBE_PROBES: Version = (4, 4)  # startupProbe honoured, exec commands kept as argv (containers/podman#16794)

CONTAINER = "engine"
PORT_NAME = "http"
MODELS_PATH = "/v1/models"
PRODUCT_LABEL = "nvidia.com/gpu.product"  # GPU Feature Discovery's node label
PROBE_TIMEOUT_S = int(HEALTH_TIMEOUT.removesuffix("s"))
LIVENESS_PERIOD_S = int(HEALTH_INTERVAL.removesuffix("s"))  # the quadlet unit's HealthInterval
STARTUP_PERIOD_S = 10
READY_PERIOD_S = 10
# progressDeadlineSeconds is the warmup budget plus time to schedule the pod and pull a large image.
PROGRESS_MARGIN_S = 600
# The verify Job: quick checks only (the needle and soak load a cluster for long); time for them.
VERIFY_CHECKS = "health,models,smoke,repetition,determinism"
VERIFY_BUDGET_S = 1800
# Kubernetes retries a failed Job pod after 10 s, doubling up to 6 minutes.
JOB_BACKOFF_FIRST_S = 10
JOB_BACKOFF_CAP_S = 360

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_SIZE = re.compile(r"([1-9][0-9]*)([bkmgBKMG]?)")
_BINARY_SUFFIX = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


@dataclass(frozen=True)
class RenderedKube:
    recipe: str
    target: Target
    podman_version: Version | None  # podman-kube only
    quadlet_version: Version | None  # podman-kube with a .kube unit only
    scope: Scope
    manifests: list[dict[str, Any]]
    files: list[UnitFile]  # the manifests' YAML first, then the .kube unit (podman-kube)
    notes: list[Note] = field(default_factory=list)
    lint: list[LintResult] = field(default_factory=list)

    @property
    def yaml_file(self) -> UnitFile:
        return self.files[0]

    @property
    def service_name(self) -> str | None:
        """The systemd unit quadlet generates from the .kube file, when there is one."""
        unit = next((f for f in self.files if f.name.endswith(".kube")), None)
        return unit.name.removesuffix(".kube") + ".service" if unit else None


def gpu_product_label(nvml_name: str) -> str:
    """The ``nvidia.com/gpu.product`` value GPU Feature Discovery writes for an NVML device name: every
    character outside ``[A-Za-z0-9-_. ]`` removed, then the words joined by single dashes
    (k8s-device-plugin, internal/lm/resource.go, ``sanitise``)."""
    return "-".join(re.sub(r"[^A-Za-z0-9\-_. ]", "", nvml_name).split())


def recipe_digest(recipe: Recipe) -> str:
    """sha256 of the effective recipe (overlays and --set applied) as canonical JSON: which recipe a
    running Deployment came from, whatever file it was read from."""
    text = json.dumps(recipe.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def object_name(recipe: Recipe) -> str:
    """The container name as a Kubernetes object name: a Service's name must be a DNS label (lowercase
    letters, digits and '-', starting with a letter, at most 63), which a recipe name need not be."""
    name = re.sub(r"[._]", "-", recipe.container_name)
    if not name[:1].isalpha():
        name = f"rigctl-{name}"
    return name[:63].rstrip("-")


def _label_value(value: str) -> str:
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)[:63].rstrip("-_.")


def shm_quantity(size: str) -> str:
    """podman's shm size (binary units: 8g is 8 GiB) as a Kubernetes quantity (8Gi)."""
    match = _SIZE.fullmatch(size)
    if match is None:  # the recipe model's pattern admits nothing else
        raise RenderError(f"container.shm_size {size!r} is not a size", fix="give it as e.g. 8g")
    return match.group(1) + _BINARY_SUFFIX[match.group(2).lower()]


def node_product_values(recipe: Recipe, override: Sequence[str] | None, notes: list[Note]) -> list[str]:
    """The GFD product label values a node must carry: the override as given, else the recipe's accepted
    products through GFD's sanitising rule."""
    if override:
        values = list(dict.fromkeys(override))
        source = "--node-product"
    else:
        values = list(dict.fromkeys(gpu_product_label(p) for p in recipe.gpus.products))
        source = "gpus.products"
    for value in values:
        if len(value) > 63 or not _LABEL_VALUE.fullmatch(value):
            problem = (f"{source}: {value!r} cannot be a node label value (letters, digits, '-', '_', '.', at most "
                       "63, starting and ending with a letter or digit)")
            if override:
                raise UsageError(problem)
            raise RenderError(problem, fix=f"pass the node's {PRODUCT_LABEL} label as --node-product")
    if not values and recipe.gpus.count > 0:
        notes.append(Note("assumed", (
            "the recipe accepts any GPU product: no node selection; --node-product NAME pins the GPU Feature "
            f"Discovery label {PRODUCT_LABEL}"
        )))
    elif values and not override:
        notes.append(Note("info", (
            f"nodes are selected by GPU Feature Discovery's {PRODUCT_LABEL} ({', '.join(values)}); GFD appends "
            "-SHARED under time-slicing or MPS and -MIG-<profile> under the MIG single strategy: pass "
            "--node-product with that value there"
        )))
    if len(values) > 1 and recipe.gpus.allow_mixed and not override:
        notes.append(Note("info", (
            "on a node with two different products GFD labels one of them only, arbitrarily "
            "(NVIDIA/k8s-device-plugin#731): node affinity over every accepted name still matches it"
        )))
    return values


def _node_selection(values: list[str]) -> dict[str, Any]:
    if not values:
        return {}
    if len(values) == 1:
        return {"nodeSelector": {PRODUCT_LABEL: values[0]}}
    term = {"matchExpressions": [{"key": PRODUCT_LABEL, "operator": "In", "values": values}]}
    return {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [term]}}}}


def _volumes(recipe: Recipe, target: Target, model_pvc: str | None, notes: list[Note]) -> tuple[list[Any], list[Any]]:
    """(pod volumes, the engine's mounts): the recipe's volumes, the checkpoint read-only (a host
    directory, or the claim given), and /dev/shm in memory where the engine shares memory across GPUs."""
    volumes: list[Any] = []
    mounts: list[Any] = []
    for index, volume in enumerate(recipe.container.volumes):
        checkpoint = volume.host == recipe.checkpoint.path
        name = "checkpoint" if checkpoint else f"volume-{index}"
        if checkpoint and model_pvc is not None:
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": model_pvc, "readOnly": True}})
            notes.append(Note("info", (
                f"the checkpoint comes from claim {model_pvc}, mounted at {volume.container}: its files must sit "
                "at the root of that volume"
            )))
        elif checkpoint:
            volumes.append({"name": name, "hostPath": {"path": volume.host, "type": "Directory"}})
            if target == "kube":
                notes.append(Note("info", (
                    f"the checkpoint is the host directory {volume.host} on whichever node runs the pod "
                    "(--model-pvc NAME takes it from a claim instead)"
                )))
        else:
            volumes.append({"name": name, "hostPath": {"path": volume.host}})
        mount: dict[str, Any] = {"name": name, "mountPath": volume.container}
        if checkpoint or volume.read_only:
            mount["readOnly"] = True
        mounts.append(mount)
    container = recipe.container
    if container.ipc == "host":
        notes.append(Note("adapted", (
            "container.ipc host has no pod equivalent short of hostIPC: true, a security exception the Baseline "
            "Pod Security Standard disallows: /dev/shm is a memory-backed emptyDir instead"
        )))
    if container.shm_size is not None or recipe.gpus.count > 1 or container.ipc == "host":
        empty_dir: dict[str, Any] = {"medium": "Memory"}
        if container.shm_size is not None:
            empty_dir["sizeLimit"] = shm_quantity(container.shm_size)
        else:
            notes.append(Note("assumed", (
                "no container.shm_size: the /dev/shm emptyDir has no sizeLimit and counts against the pod's "
                "memory; set container.ipc private and container.shm_size to bound it"
            )))
        volumes.append({"name": "shm", "emptyDir": empty_dir})
        mounts.append({"name": "shm", "mountPath": SHM_PATH})
    return volumes, mounts


def _env(recipe: Recipe, process: EngineProcess, target: Target, notes: list[Note]) -> list[Any]:
    env: list[Any] = [{"name": name, "value": value} for name, value in process.env]
    for secret in recipe.container.secrets:
        if len(secret.name) > 253 or not _DNS_SUBDOMAIN.fullmatch(secret.name):
            raise RenderError(
                f"container.secrets: {secret.name!r} cannot name a Kubernetes Secret (lowercase letters, digits, "
                "'-' and '.')",
                fix="rename the secret",
            )
        env.append({"name": secret.env, "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.env}}})
        how = ("`kubectl create secret generic {n} --from-literal={e}=...`" if target == "kube" else
               "`podman kube play` of a Secret manifest named {n} with the key {e}")
        notes.append(Note("info", f"{secret.env} comes from Secret {secret.name}, key {secret.env}: create it with "
                                  + how.format(n=secret.name, e=secret.env)))
    return env


def _http_probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": PORT_NAME}, "periodSeconds": period,
            "timeoutSeconds": PROBE_TIMEOUT_S, "failureThreshold": failures}


def _exec_probe(recipe: Recipe, path: str, podman: Version, period: int, failures: int) -> dict[str, Any]:
    code = http_probe_code(recipe.engine.port, path)
    # before 4.4 podman joins the words with spaces and hands them to /bin/sh -c: give it shell words
    command = ["python3", "-c", code] if podman >= KUBE_PROBES else f"python3 -c '{code}'".split(" ")
    return {"exec": {"command": command}, "periodSeconds": period, "timeoutSeconds": PROBE_TIMEOUT_S,
            "failureThreshold": failures}


def _probes(recipe: Recipe, target: Target, podman: Version, notes: list[Note]) -> dict[str, Any]:
    """Startup on the health path for the whole warmup budget (periodSeconds x failureThreshold), then
    readiness on /v1/models (the model is listed) and liveness on health, as the quadlet unit's check."""
    health = recipe.engine.health_path
    warmup = recipe.service.warmup_budget_s
    startup_failures = math.ceil(warmup / STARTUP_PERIOD_S)
    if target == "kube":
        return {
            "startupProbe": _http_probe(health, STARTUP_PERIOD_S, startup_failures),
            "readinessProbe": _http_probe(MODELS_PATH, READY_PERIOD_S, 3),
            "livenessProbe": _http_probe(health, LIVENESS_PERIOD_S, HEALTH_RETRIES),
        }
    probes = {
        "startupProbe": _exec_probe(recipe, health, podman, STARTUP_PERIOD_S, startup_failures),
        "readinessProbe": _exec_probe(recipe, MODELS_PATH, podman, READY_PERIOD_S, 3),
        "livenessProbe": _exec_probe(recipe, health, podman, LIVENESS_PERIOD_S, HEALTH_RETRIES),
    }
    if podman < KUBE_PROBES:
        probes["livenessProbe"]["initialDelaySeconds"] = warmup
        notes.append(Note("adapted", (
            f"podman {fmt(podman)} ignores startupProbe and runs an exec probe's words through /bin/sh -c (both "
            f"{fmt(KUBE_PROBES)}): the probes are shell words, and the liveness probe waits out the warmup budget "
            "(initialDelaySeconds)"
        )))
    return probes


def _gpu_limits(recipe: Recipe, target: Target, podman: Version, gpu_ids: Sequence[str] | None,
                notes: list[Note]) -> dict[str, Any]:
    if recipe.gpus.count == 0:
        return {}
    if target == "kube":
        return {GPU_RESOURCE: recipe.gpus.count}
    if podman < KUBE_CDI:
        notes.append(Note("adapted", (
            f"podman {fmt(podman)} passes no GPUs through kube play (CDI names as resources arrived in "
            f"{fmt(KUBE_CDI)}): the pod gets none; on this podman use the .container unit (rigctl render RECIPE)"
        )))
        return {}
    return dict.fromkeys(gpu_devices(recipe, gpu_ids, notes), 1)  # podman reads the name; the number is ignored


def _labels(recipe: Recipe, name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": _label_value(recipe.name),
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/component": component,
        "app.kubernetes.io/managed-by": "rigctl",
    }


def _engine_container(recipe: Recipe, target: Target, podman: Version, *, gpu_ids: Sequence[str] | None,
                      mounts: list[Any], notes: list[Note]) -> dict[str, Any]:
    process = engine_process(recipe)
    notes.extend(Note("info", n) for n in process.notes)
    container: dict[str, Any] = {"name": CONTAINER, "image": recipe.image}
    if process.entrypoint is not None:
        container["command"] = list(process.entrypoint)
    if process.args:
        container["args"] = list(process.args)
    env = _env(recipe, process, target, notes)
    if env:
        container["env"] = env
    port: dict[str, Any] = {"name": PORT_NAME, "containerPort": recipe.engine.port, "protocol": "TCP"}
    if target == "podman-kube":
        port.update(hostPort=recipe.publish.port, hostIP=recipe.publish.address)
    container["ports"] = [port]
    limits = _gpu_limits(recipe, target, podman, gpu_ids, notes)
    if limits:
        container["resources"] = {"limits": limits}
    container.update(_probes(recipe, target, podman, notes))
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _deployment(recipe: Recipe, name: str, target: Target, podman: Version, *, gpu_ids: Sequence[str] | None,
                products: Sequence[str] | None, model_pvc: str | None, notes: list[Note]) -> dict[str, Any]:
    labels = _labels(recipe, name, "engine")
    volumes, mounts = _volumes(recipe, target, model_pvc, notes)
    pod: dict[str, Any] = {}
    if target == "podman-kube":
        pod["restartPolicy"] = "OnFailure"
    if target == "kube" and recipe.gpus.count > 0:  # one box has no scheduler: podman ignores it
        pod.update(_node_selection(node_product_values(recipe, products, notes)))
    pod["terminationGracePeriodSeconds"] = recipe.service.stop_timeout_s
    pod["containers"] = [_engine_container(recipe, target, podman, gpu_ids=gpu_ids, mounts=mounts, notes=notes)]
    if volumes:
        pod["volumes"] = volumes
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {
                "rigctl/recipe": recipe.name,
                "rigctl/recipe-digest": recipe_digest(recipe),
                "rigctl/image-digest": recipe.image_digest,
            },
        },
        "spec": {
            "replicas": 1,
            # a rolling update starts the new pod first: it needs spare GPUs and sits Pending on a full box
            "strategy": {"type": "Recreate"},
            "progressDeadlineSeconds": recipe.service.warmup_budget_s + PROGRESS_MARGIN_S,
            "selector": {"matchLabels": {k: labels[k] for k in (
                "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")}},
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }


def _service(recipe: Recipe, name: str) -> dict[str, Any]:
    labels = _labels(recipe, name, "engine")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "type": "ClusterIP",
            "selector": {k: labels[k] for k in (
                "app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component")},
            "ports": [{"name": PORT_NAME, "port": recipe.engine.port, "targetPort": PORT_NAME, "protocol": "TCP"}],
        },
    }


def job_backoff_limit(warmup_s: int) -> int:
    """Retries enough for Kubernetes' doubling back-off between them to outlast the warmup budget (the
    Job may be applied with the Deployment), plus two for a verify that fails on a blip."""
    waited, delay, retries = 0, JOB_BACKOFF_FIRST_S, 0
    while waited < warmup_s:
        waited += delay
        delay = min(delay * 2, JOB_BACKOFF_CAP_S)
        retries += 1
    return retries + 2


def _verify_job(recipe: Recipe, name: str, image: str, notes: list[Note]) -> dict[str, Any]:
    labels = _labels(recipe, name, "verify")
    job_name = f"{name[:56].rstrip('-')}-verify"
    url = f"http://{name}:{recipe.engine.port}/v1"
    notes.append(Note("info", (
        f"the Job runs `rigctl verify {recipe.name}` from {image} against {url}: the image needs rigctl and the "
        f"recipe (bundled ones are there); it retries until the engine is warm ({VERIFY_CHECKS})"
    )))
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": job_name, "labels": labels},
        "spec": {
            "backoffLimit": job_backoff_limit(recipe.service.warmup_budget_s),
            "activeDeadlineSeconds": recipe.service.warmup_budget_s + PROGRESS_MARGIN_S + VERIFY_BUDGET_S,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{
                        "name": "verify",
                        "image": image,
                        "command": ["rigctl"],
                        "args": ["verify", recipe.name, "--url", url, "--model", recipe.served_name,
                                 "--checks", VERIFY_CHECKS, "--json"],
                    }],
                },
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # a dict used twice (labels) is written out twice, not as an &anchor


def manifests_yaml(documents: Sequence[dict[str, Any]], header: Sequence[str]) -> str:
    """Multi-document YAML in the dicts' own order, long strings kept on one line."""
    body = yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, explicit_start=True, allow_unicode=True,
                         width=1 << 20)
    return "".join(f"# {line}\n" for line in header) + body


def _kube_unit(recipe: Recipe, unit_name: str, yaml_name: str, *, podman: Version, quadlet: Version,
               scope: Scope) -> str:
    service = recipe.service
    lines = [
        f"# {unit_name}: rendered by rigctl from recipe {recipe.name} for podman {fmt(podman)}",
        f"# (quadlet {fmt(quadlet)}). Do not edit: change the recipe and run",
        f"# `rigctl render {recipe.name} --target podman-kube --out DIR`.",
        "[Unit]",
        f"Description={escape.text(f'rigctl: {recipe.description}', 'description')}",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Kube]",
        f"# relative to this file's directory: {yaml_name} is installed next to it",
        f"Yaml={escape.raw(yaml_name, 'yaml file')}",
        "",
        "[Service]",
        "# always, not on-failure: a vLLM engine crash can end with exit status 0 (vllm-project/vllm#48966);",
        "# the pod's restartPolicy OnFailure lets that exit end the pod, and systemd starts it again.",
        f"Restart={service.restart}",
        f"RestartSec={service.restart_sec}",
        "# Long warmups (TP warmup, CUDA graph capture) must not hit systemd's default 90 s start timeout.",
        f"TimeoutStartSec={service.warmup_budget_s}",
        f"TimeoutStopSec={service.stop_timeout_s + STOP_GRACE_S}",
        "",
        "[Install]",
        f"WantedBy={'multi-user.target' if scope == 'system' else 'default.target'}",
    ]
    return "\n".join(lines) + "\n"


def _check_versions(podman: Version, quadlet: Version | None, notes: list[Note]) -> Version | None:
    """The quadlet version the .kube unit is for, or None when there is no generator to read one."""
    if podman < PODMAN_FLOOR:
        raise RenderError(f"podman {fmt(podman)} is too old: rigctl renders for podman >= {fmt(PODMAN_FLOOR)}",
                          fix="upgrade podman")
    if quadlet is None:
        if podman < QUADLET_FIRST:
            notes.append(Note("adapted", (
                f"podman {fmt(podman)} has no quadlet generator ({fmt(QUADLET_FIRST)}): no .kube unit; run "
                "`podman kube play FILE` yourself, or give --quadlet-version for a newer generator"
            )))
            return None
        return podman
    if quadlet < QUADLET_FIRST:
        raise RenderError(f"quadlet {fmt(quadlet)} does not exist: quadlet arrived in podman {fmt(QUADLET_FIRST)}",
                          fix="give the version of the podman release the quadlet binary comes from")
    return quadlet


def render_kube(
    recipe: Recipe,
    *,
    target: Target = "kube",
    podman_version: Version = DEFAULT_PODMAN,
    quadlet_version: Version | None = None,
    gpu_ids: Sequence[str] | None = None,
    node_products: Sequence[str] | None = None,
    model_pvc: str | None = None,
    verify_image: str | None = None,
    scope: Scope = Scope.SYSTEM,
) -> RenderedKube:
    """Manifests for ``recipe``: a Deployment and a ClusterIP Service (and a verify Job with
    ``verify_image``), linted. podman-kube also gets a ``.kube`` unit, and reads ``podman_version``,
    ``quadlet_version``, ``gpu_ids`` (CDI names, as for the quadlet unit) and ``scope``."""
    if target not in TARGETS:
        raise UsageError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    notes: list[Note] = []
    quadlet: Version | None = None
    if target == "podman-kube":
        quadlet = _check_versions(podman_version, quadlet_version, notes)
        if verify_image is not None:
            raise UsageError("--verify-job is for Kubernetes: podman kube play runs no Jobs",
                             fix=f"on the box, run `rigctl verify {recipe.name}` once it is up")
    if model_pvc is not None and (len(model_pvc) > 253 or not _DNS_SUBDOMAIN.fullmatch(model_pvc)):
        raise UsageError(f"--model-pvc {model_pvc!r}: not a claim name (lowercase letters, digits, '-' and '.')")
    if node_products and (target != "kube" or recipe.gpus.count == 0):
        raise UsageError("--node-product selects Kubernetes nodes by GPU product: it needs --target kube and a "
                         "recipe with GPUs")
    name = object_name(recipe)
    if name != recipe.container_name:
        notes.append(Note("adapted", f"objects are named {name}: {recipe.container_name} is not a DNS label"))
    documents = [
        _deployment(recipe, name, target, podman_version, gpu_ids=gpu_ids, products=node_products,
                    model_pvc=model_pvc, notes=notes),
        _service(recipe, name),
    ]
    if verify_image is not None:
        documents.append(_verify_job(recipe, name, verify_image, notes))
    if recipe.container.extra_podman_args:
        notes.append(Note("warning", "container.extra_podman_args are podman flags: the manifests do not carry them"))

    gpus = recipe.gpus
    results = lint(documents, LintExpectations(
        world=gpus.tensor_parallel * gpus.pipeline_parallel * gpus.data_parallel if gpus.count else 0,
        warmup_budget_s=recipe.service.warmup_budget_s,
        cdi_names=target == "podman-kube",
        gpus_passed=target == "kube" or podman_version >= KUBE_CDI,
    ))
    require_clean(results)

    if target == "kube":
        yaml_name = f"{name}.yaml"
        header = [f"{yaml_name}: Kubernetes manifests rendered by rigctl from recipe {recipe.name}.",
                  f"Do not edit: change the recipe and run `rigctl render {recipe.name} --target kube`."]
        files = [UnitFile(yaml_name, manifests_yaml(documents, header))]
        return RenderedKube(recipe.name, target, None, None, scope, documents, files, notes, results)

    notes.append(Note("info", (
        f"the Service is for Kubernetes (podman ignores it); here the engine listens on "
        f"{recipe.publish.address}:{recipe.publish.port}"
    )))
    yaml_name = f"{name}.podman.yaml"
    header = [f"{yaml_name}: manifests for `podman kube play` (podman {fmt(podman_version)}), rendered by rigctl",
              f"from recipe {recipe.name}. Do not edit: change the recipe and run",
              f"`rigctl render {recipe.name} --target podman-kube`. Not for Kubernetes: see --target kube."]
    files = [UnitFile(yaml_name, manifests_yaml(documents, header))]
    if quadlet is not None:
        unit_name = f"{name}.kube"
        unit = _kube_unit(recipe, unit_name, yaml_name, podman=podman_version, quadlet=quadlet, scope=scope)
        files.append(UnitFile(unit_name, unit))
    return RenderedKube(recipe.name, target, podman_version, quadlet, scope, documents, files, notes, results)
