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
- ``$``: Kubernetes expands ``$(NAME)`` and reads ``$$`` as ``$`` in command, args and env values; podman
  kube play does so in command and args from 4.7 (containers/podman#19630) and nowhere before (seen with
  4.3.1: ``$$`` and ``$(HOME)`` reach the container as written). Each ``$`` is doubled where the runtime
  expands, so the engine gets the recipe's value.
- Scheduling (Kubernetes only; one box has no scheduler): cpu and memory requests, the toleration for the
  ``nvidia.com/gpu:NoSchedule`` taint GPU nodes carry, GPU product selection.

Strings are written plain only where every YAML reader (YAML 1.1 and 1.2, Go's yaml.v2 and yaml.v3, which
Kubernetes and podman read with) takes them for the same string, double-quoted everywhere else: ``1e6`` or
``0o17`` written plain reach a container as ``1e+06`` and ``15``.
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
from rigctl.findings import Finding
from rigctl.places import Scope
from rigctl.podman_versions import DEFAULT_PODMAN, PODMAN_FLOOR, QUADLET_FIRST, Version, fmt
from rigctl.recipe.model import SpecDraft
from rigctl.render import escape
from rigctl.render.escape import RenderError
from rigctl.render.kubelint import (
    DNS_LABEL_1123,
    DNS_SUBDOMAIN,
    EXPANDED_FIELDS,
    GPU_RESOURCE,
    NAME_PART,
    SHM_PATH,
    LintExpectations,
    lint,
    memory_bytes,
    plain_is_string,
    require_clean,
)
from rigctl.render.units import (
    HEALTH_INTERVAL,
    HEALTH_RETRIES,
    HEALTH_TIMEOUT,
    EngineProcess,
    Note,
    RenderedFile,
    engine_process,
    gpu_devices,
    http_probe_code,
)
from rigctl.util.publish import MODELS_PATH

if TYPE_CHECKING:
    from rigctl.recipe.model import Recipe

KubeTarget = Literal["kube", "podman-kube"]
TARGETS: tuple[KubeTarget, ...] = ("kube", "podman-kube")

# podman kube play, by version (see the module docstring)
KUBE_CDI: Version = (5, 4)  # a CDI device name as a resource key (containers/podman#25010)
KUBE_PROBES: Version = (4, 4)  # startupProbe honoured, exec commands kept as argv (containers/podman#16794)
KUBE_EXPANDS: Version = (4, 7)  # $(NAME) and $$ expanded in command and args (containers/podman#19630)

CONTAINER = "engine"
PORT_NAME = "http"
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
# /dev/shm where the recipe gives no size (host IPC, or several GPUs): NCCL's buffers between a few GPUs
# take well under this; the emptyDir counts against the pod's memory, so it is bounded.
DEFAULT_SHM_LIMIT = "16Gi"
# The engine's requests. Memory: what it loads (checkpoint and draft model: their pages sit in the node's
# memory while the engine reads them) plus a tenth, a base for the server (Python, tokenizer, CUDA runtime),
# some per GPU worker (its CUDA context and pinned buffers), and the /dev/shm limit. CPU: the API server and
# the engine core, plus one per GPU worker.
MEMORY_MARGIN = 0.10
MEMORY_BASE = 4 << 30
MEMORY_PER_GPU = 2 << 30
CPU_BASE = 2
VERIFY_REQUESTS = {"cpu": "500m", "memory": "512Mi"}
# Every container: no privilege escalation, no capability, the runtime's default seccomp profile. The root
# filesystem stays writable: vLLM, SGLang and TabbyAPI write caches (torch.compile, Triton, FlashInfer and
# Hugging Face) under HOME and /tmp inside the image, and where HOME is differs from image to image.
READ_ONLY_ROOT_WHY = (
    "readOnlyRootFilesystem false: the engines write caches (torch.compile, Triton, FlashInfer, Hugging Face) "
    "under HOME and /tmp inside the image, and rigctl cannot know where HOME is in every image"
)


def security_context() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": False,
        "seccompProfile": {"type": "RuntimeDefault"},
    }

_DNS_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_SIZE = re.compile(r"([1-9][0-9]*)([bkmgBKMG]?)")
_BINARY_SUFFIX = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}


@dataclass(frozen=True)
class RenderedKube:
    recipe: str
    target: KubeTarget
    podman_version: Version | None  # podman-kube only
    quadlet_version: Version | None  # podman-kube with a .kube unit only
    scope: Scope
    manifests: list[dict[str, Any]]
    files: list[RenderedFile]  # the manifests' YAML first, then the .kube unit (podman-kube)
    notes: list[Note] = field(default_factory=list)
    lint: list[Finding] = field(default_factory=list)  # one per lint rule (kubelint.RULES)
    namespace: str | None = None  # --namespace: every object's

    @property
    def yaml_file(self) -> RenderedFile:
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
    text = json.dumps(recipe.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
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
        if len(value) > 63 or not NAME_PART.fullmatch(value):
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


def _volumes(
    recipe: Recipe, target: KubeTarget, model_pvc: str | None, notes: list[Note],
) -> tuple[list[Any], list[Any]]:
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
    limit = shm_limit(recipe)
    if limit is not None:
        if container.shm_size is None:
            notes.append(Note("assumed", (
                f"no container.shm_size: the /dev/shm emptyDir is limited to {DEFAULT_SHM_LIMIT} (it counts against "
                "the pod's memory); set container.ipc private and container.shm_size to choose"
            )))
        volumes.append({"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": limit}})
        mounts.append({"name": "shm", "mountPath": SHM_PATH})
    return volumes, mounts


def shm_limit(recipe: Recipe) -> str | None:
    """The /dev/shm emptyDir's sizeLimit, or None where the pod needs none (one GPU, no size asked)."""
    container = recipe.container
    if container.shm_size is not None:
        return shm_quantity(container.shm_size)
    if recipe.gpus.count > 1 or container.ipc == "host":
        return DEFAULT_SHM_LIMIT
    return None


def loaded_bytes(recipe: Recipe) -> int:
    """What the engine reads into memory: the checkpoint and any draft model."""
    checkpoint = recipe.checkpoint
    total = checkpoint.total_bytes or checkpoint.approx_bytes or 0
    if isinstance(recipe.speculative, SpecDraft):
        total += recipe.speculative.draft.total_bytes
    return total


def engine_requests(recipe: Recipe) -> tuple[dict[str, str], str]:
    """(the engine's cpu and memory requests, how they were derived, for the Deployment's annotation)."""
    gpus = recipe.gpus.count
    loaded = loaded_bytes(recipe)
    shm = shm_limit(recipe)
    shm_bytes = memory_bytes(shm) or 0
    total = math.ceil(loaded * (1 + MEMORY_MARGIN)) + MEMORY_BASE + MEMORY_PER_GPU * gpus + shm_bytes
    memory = f"{math.ceil(total / (1 << 30))}Gi"
    cpu = str(CPU_BASE + gpus)
    basis = (
        f"memory {memory}: checkpoint{' and draft' if isinstance(recipe.speculative, SpecDraft) else ''} "
        f"{loaded / (1 << 30):.1f} GiB + {MEMORY_MARGIN:.0%} + {MEMORY_BASE >> 30} GiB + {MEMORY_PER_GPU >> 30} GiB "
        f"x {gpus} GPU worker(s) + /dev/shm {shm or '0'}; cpu {cpu}: {CPU_BASE} + 1 per GPU worker"
    )
    return {"cpu": cpu, "memory": memory}, basis


def expanded_fields(target: KubeTarget, podman: Version) -> tuple[str, ...]:
    """Where the runtime expands $(NAME) and $$: Kubernetes in command, args and env values; podman kube
    play in command and args from 4.7, nowhere before."""
    if target == "kube":
        return EXPANDED_FIELDS
    return ("command", "args") if podman >= KUBE_EXPANDS else ()


def dollars(value: str) -> str:
    """A value the runtime expands, written so that it reaches the container as it is: every $ doubled
    ($$ is a literal $, so no $(NAME) is left to expand)."""
    return value.replace("$", "$$")


def _env(recipe: Recipe, process: EngineProcess, target: KubeTarget, expanded: tuple[str, ...],
         notes: list[Note]) -> list[Any]:
    env: list[Any] = [{"name": name, "value": dollars(value) if "env" in expanded else value}
                      for name, value in process.env]
    for secret in recipe.container.secrets:
        if len(secret.name) > 253 or not DNS_SUBDOMAIN.fullmatch(secret.name):
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


def _probes(recipe: Recipe, target: KubeTarget, podman: Version, notes: list[Note]) -> dict[str, Any]:
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


def _gpu_limits(recipe: Recipe, target: KubeTarget, podman: Version, gpu_ids: Sequence[str] | None,
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


def _engine_container(recipe: Recipe, target: KubeTarget, podman: Version, *, gpu_ids: Sequence[str] | None,
                      mounts: list[Any], notes: list[Note]) -> dict[str, Any]:
    process = engine_process(recipe)
    notes.extend(Note("info", n) for n in process.notes)
    expanded = expanded_fields(target, podman)
    container: dict[str, Any] = {"name": CONTAINER, "image": recipe.image}
    if process.entrypoint is not None:
        container["command"] = [dollars(w) if "command" in expanded else w for w in process.entrypoint]
    if process.args:
        container["args"] = [dollars(w) if "args" in expanded else w for w in process.args]
    env = _env(recipe, process, target, expanded, notes)
    if env:
        container["env"] = env
    port: dict[str, Any] = {"name": PORT_NAME, "containerPort": recipe.engine.port, "protocol": "TCP"}
    if target == "podman-kube":
        port.update(hostPort=recipe.publish.port, hostIP=recipe.publish.address)
    container["ports"] = [port]
    resources: dict[str, Any] = {}
    if target == "kube":
        resources["requests"] = engine_requests(recipe)[0]
    limits = _gpu_limits(recipe, target, podman, gpu_ids, notes)
    if limits:
        resources["limits"] = limits
    if resources:
        container["resources"] = resources
    container.update(_probes(recipe, target, podman, notes))
    container["securityContext"] = security_context()
    if mounts:
        container["volumeMounts"] = mounts
    return container


def _metadata(name: str, namespace: str | None, **more: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    metadata.update(more)
    return metadata


def _deployment(recipe: Recipe, name: str, target: KubeTarget, podman: Version, *, gpu_ids: Sequence[str] | None,
                products: Sequence[str] | None, model_pvc: str | None, namespace: str | None,
                notes: list[Note]) -> dict[str, Any]:
    labels = _labels(recipe, name, "engine")
    volumes, mounts = _volumes(recipe, target, model_pvc, notes)
    pod: dict[str, Any] = {}
    if target == "podman-kube":
        pod["restartPolicy"] = "OnFailure"
    if target == "kube" and recipe.gpus.count > 0:  # one box has no scheduler: podman ignores it
        pod.update(_node_selection(node_product_values(recipe, products, notes)))
        # GPU nodes are commonly tainted so that only pods asking for GPUs land there
        pod["tolerations"] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
    pod["terminationGracePeriodSeconds"] = recipe.service.stop_timeout_s
    pod["containers"] = [_engine_container(recipe, target, podman, gpu_ids=gpu_ids, mounts=mounts, notes=notes)]
    if volumes:
        pod["volumes"] = volumes
    annotations = {
        "rigctl/recipe": recipe.name,
        "rigctl/recipe-digest": recipe_digest(recipe),
        "rigctl/image-digest": recipe.image_digest,
    }
    if target == "kube":
        annotations["rigctl/requests"] = engine_requests(recipe)[1]
    annotations["rigctl/security-context"] = READ_ONLY_ROOT_WHY
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(name, namespace, labels=labels, annotations=annotations),
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


def _service(recipe: Recipe, name: str, namespace: str | None) -> dict[str, Any]:
    labels = _labels(recipe, name, "engine")
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(name, namespace, labels=labels),
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


def _verify_job(recipe: Recipe, name: str, image: str, namespace: str | None, notes: list[Note]) -> dict[str, Any]:
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
        "metadata": _metadata(job_name, namespace, labels=labels),
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
                        "args": [dollars(a) for a in ("verify", recipe.name, "--url", url, "--model",
                                                      recipe.served_name, "--checks", VERIFY_CHECKS, "--json")],
                        "resources": {"requests": dict(VERIFY_REQUESTS)},
                        "securityContext": security_context(),
                    }],
                },
            },
        },
    }


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True  # a dict used twice (labels) is written out twice, not as an &anchor


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # plain only where every reader sees this string (kubelint.plain_is_string); double quotes elsewhere
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=None if plain_is_string(value) else '"')


_Dumper.add_representer(str, _represent_str)


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
        f"TimeoutStopSec={service.unit_stop_timeout_s}",
        "",
        "[Install]",
        f"WantedBy={Scope(scope).boot_target}",
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


def lint_expectations(recipe: Recipe, target: KubeTarget, podman: Version = DEFAULT_PODMAN,
                      namespace: str | None = None) -> LintExpectations:
    """What ``recipe`` fixes for the lint of its manifests for ``target``."""
    gpus = recipe.gpus
    process = engine_process(recipe)
    return LintExpectations(
        world=gpus.tensor_parallel * gpus.pipeline_parallel * gpus.data_parallel if gpus.count else 0,
        warmup_budget_s=recipe.service.warmup_budget_s,
        cdi_names=target == "podman-kube",
        gpus_passed=target == "kube" or podman >= KUBE_CDI,
        cluster=target == "kube",
        memory_bytes=loaded_bytes(recipe),
        namespace=namespace,
        expanded=expanded_fields(target, podman),
        engine_command=tuple(process.entrypoint) if process.entrypoint is not None else (),
        engine_args=tuple(process.args),
        engine_env=tuple(process.env),
    )


def render_kube(
    recipe: Recipe,
    *,
    target: KubeTarget = "kube",
    podman_version: Version = DEFAULT_PODMAN,
    quadlet_version: Version | None = None,
    gpu_ids: Sequence[str] | None = None,
    node_products: Sequence[str] | None = None,
    model_pvc: str | None = None,
    verify_image: str | None = None,
    namespace: str | None = None,
    scope: Scope = Scope.SYSTEM,
) -> RenderedKube:
    """Manifests for ``recipe``: a Deployment and a ClusterIP Service (and a verify Job with
    ``verify_image``), in ``namespace`` when given, linted. podman-kube also gets a ``.kube`` unit, and reads
    ``podman_version``, ``quadlet_version``, ``gpu_ids`` (CDI names, as for the quadlet unit) and ``scope``."""
    if target not in TARGETS:
        raise UsageError(f"target {target!r}: expected one of {', '.join(TARGETS)}")
    if namespace is not None and (len(namespace) > 63 or not DNS_LABEL_1123.fullmatch(namespace)):
        raise UsageError(f"--namespace {namespace!r}: not a namespace name (a DNS-1123 label: lowercase letters, "
                         "digits and '-', starting and ending with a letter or digit, at most 63)")
    notes: list[Note] = []
    quadlet: Version | None = None
    if target == "podman-kube":
        quadlet = _check_versions(podman_version, quadlet_version, notes)
        if verify_image is not None:
            raise UsageError("--verify-job is for Kubernetes: podman kube play runs no Jobs",
                             fix=f"on the box, run `rigctl verify {recipe.name}` once it is up")
    if model_pvc is not None and (len(model_pvc) > 253 or not DNS_SUBDOMAIN.fullmatch(model_pvc)):
        raise UsageError(f"--model-pvc {model_pvc!r}: not a claim name (lowercase letters, digits, '-' and '.')")
    if node_products and (target != "kube" or recipe.gpus.count == 0):
        raise UsageError("--node-product selects Kubernetes nodes by GPU product: it needs --target kube and a "
                         "recipe with GPUs")
    name = object_name(recipe)
    if name != recipe.container_name:
        notes.append(Note("adapted", f"objects are named {name}: {recipe.container_name} is not a DNS label"))
    if namespace is None and target == "kube":
        notes.append(Note("assumed", "no --namespace: the objects go to the namespace of kubectl's context"))
    documents = [
        _deployment(recipe, name, target, podman_version, gpu_ids=gpu_ids, products=node_products,
                    model_pvc=model_pvc, namespace=namespace, notes=notes),
        _service(recipe, name, namespace),
    ]
    if verify_image is not None:
        documents.append(_verify_job(recipe, name, verify_image, namespace, notes))
    if recipe.container.extra_podman_args:
        notes.append(Note("warning", "container.extra_podman_args are podman flags: the manifests do not carry them"))

    if target == "kube":
        yaml_name = f"{name}.yaml"
        header = [f"{yaml_name}: Kubernetes manifests rendered by rigctl from recipe {recipe.name}.",
                  f"Do not edit: change the recipe and run `rigctl render {recipe.name} --target kube`."]
    else:
        notes.append(Note("info", (
            f"the Service is for Kubernetes (podman ignores it); here the engine listens on "
            f"{recipe.publish.address}:{recipe.publish.port}"
        )))
        yaml_name = f"{name}.podman.yaml"
        header = [f"{yaml_name}: manifests for `podman kube play` (podman {fmt(podman_version)}), rendered by rigctl",
                  f"from recipe {recipe.name}. Do not edit: change the recipe and run",
                  f"`rigctl render {recipe.name} --target podman-kube`. Not for Kubernetes: see --target kube."]
    text = manifests_yaml(documents, header)
    results = lint(documents, lint_expectations(recipe, target, podman_version, namespace), text)
    require_clean(results)
    files = [RenderedFile(yaml_name, text)]
    if target == "kube":
        return RenderedKube(recipe.name, target, None, None, scope, documents, files, notes, results, namespace)
    if quadlet is not None:
        unit_name = f"{name}.kube"
        unit = _kube_unit(recipe, unit_name, yaml_name, podman=podman_version, quadlet=quadlet, scope=scope)
        files.append(RenderedFile(unit_name, unit))
    return RenderedKube(recipe.name, target, podman_version, quadlet, scope, documents, files, notes, results,
                        namespace)
