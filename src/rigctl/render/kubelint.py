"""A semantic lint of rendered Kubernetes manifests: what a schema check cannot see.

``kubernetes-validate --strict`` rejects an unknown field, but it accepts a Deployment that asks for one GPU
while the engine shards over two, a startup probe that gives up during warmup (the most common reason a big
model never comes up on Kubernetes), an image by tag, and ``nvidia.com/gpu=all`` (a podman CDI name, which the
API server refuses). Each rule here looks at the manifests alone, against the few numbers the recipe fixes.
The renderer lints everything it renders; a failing rule is an error that names the rule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.recipe.model import IMAGE_RE

RULES = ("gpu-count", "shm", "probe-budget", "image-pinned", "resource-names")

GPU_RESOURCE = "nvidia.com/gpu"
SHM_PATH = "/dev/shm"

# Kubernetes' qualified name: an optional DNS-subdomain prefix and a name of at most 63 characters.
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_PART = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
# Unprefixed resource names a container may ask for; anything else needs a domain prefix.
_STANDARD = re.compile(r"cpu|memory|ephemeral-storage|hugepages-[0-9]+[KMGTPE]i?")
# A CDI device name (vendor/class=device): what podman >= 5.4 takes as a kube play resource key.
_CDI_NAME = re.compile(
    r"[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?/[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?"
    r"=[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?"
)


@dataclass(frozen=True)
class LintExpectations:
    """What the recipe fixes. ``world``: tensor x pipeline x data parallel, the GPUs the engine shards over;
    ``gpus_passed``: False where the target cannot pass GPUs at all (podman kube play before 5.4), so the GPU
    request is not compared; ``cdi_names``: resource keys may be CDI device names (podman-kube only)."""

    world: int
    warmup_budget_s: int
    cdi_names: bool = False
    gpus_passed: bool = True


@dataclass(frozen=True)
class LintResult:
    rule: str
    ok: bool
    detail: str


class KubeLintError(RigctlError):
    """A rendered manifest broke a lint rule: the render is refused, not printed."""

    exit_code = ExitCode.INVALID_INPUT
    code = "lint-failed"


def lint(documents: Sequence[Mapping[str, Any]], expect: LintExpectations) -> list[LintResult]:
    """One result per rule, in RULES order."""
    return [
        _gpu_count(documents, expect),
        _shm(documents, expect),
        _probe_budget(documents, expect),
        _image_pinned(documents),
        _resource_names(documents, expect),
    ]


def require_clean(results: Sequence[LintResult]) -> None:
    failed = [r for r in results if not r.ok]
    if failed:
        raise KubeLintError(
            "\n".join(f"lint rule {r.rule} failed: {r.detail}" for r in failed),
            fix="change what the rule names (an option you gave, or the recipe); a failure in what rigctl derives "
                "itself is a defect: report it with the recipe",
        )


# --- walking the manifests ---------------------------------------------------------------------------


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else []


def _pod_spec(document: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(_mapping(_mapping(document.get("spec")).get("template")).get("spec"))


def _deployments(documents: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [d for d in documents if isinstance(d, Mapping) and d.get("kind") == "Deployment"]


def _containers(spec: Mapping[str, Any], *, init: bool = False) -> Iterator[Mapping[str, Any]]:
    keys = ("containers", "initContainers") if init else ("containers",)
    for key in keys:
        for container in _list(spec.get(key)):
            yield _mapping(container)


def _all_containers(documents: Sequence[Mapping[str, Any]]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for document in documents:
        if not isinstance(document, Mapping):
            continue
        where = f"{document.get('kind', '?')}/{_mapping(document.get('metadata')).get('name', '?')}"
        for container in _containers(_pod_spec(document), init=True):
            yield f"{where} container {container.get('name', '?')}", container


def _resource_keys(container: Mapping[str, Any]) -> list[tuple[str, object]]:
    resources = _mapping(container.get("resources"))
    return [(str(key), value) for part in ("limits", "requests")
            for key, value in _mapping(resources.get(part)).items()]


def _whole(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return int(value)
    return None


# --- the rules ---------------------------------------------------------------------------------------


def _gpus_requested(container: Mapping[str, Any], cdi_names: bool) -> tuple[int, str | None]:
    """(GPUs the container asks for, a problem or None). Limits are what the device plugin allocates."""
    limits = _mapping(_mapping(container.get("resources")).get("limits"))
    count = 0
    if GPU_RESOURCE in limits:
        value = _whole(limits[GPU_RESOURCE])
        if value is None:
            return 0, f"{GPU_RESOURCE}: {limits[GPU_RESOURCE]!r} is not a whole number"
        count += value
    if cdi_names:
        for key in limits:
            if str(key).startswith(GPU_RESOURCE + "="):
                if str(key).endswith("=all"):
                    return 0, f"{key} passes every GPU of the host, however many: name each GPU"
                count += 1
    return count, None


def _gpu_count(documents: Sequence[Mapping[str, Any]], expect: LintExpectations) -> LintResult:
    if not expect.gpus_passed:
        return LintResult("gpu-count", True, "not compared: this target passes no GPUs")
    total = 0
    for deployment in _deployments(documents):
        for container in _containers(_pod_spec(deployment)):
            count, problem = _gpus_requested(container, expect.cdi_names)
            if problem is not None:
                return LintResult("gpu-count", False, problem)
            total += count
    if total != expect.world:
        return LintResult("gpu-count", False, (
            f"the Deployment asks for {total} GPU(s) but the engine shards over tensor x pipeline x data "
            f"parallel = {expect.world}"
        ))
    return LintResult("gpu-count", True, f"{total} GPU(s) = tensor x pipeline x data parallel")


def _memory_shm(spec: Mapping[str, Any], container: Mapping[str, Any]) -> bool:
    memory_volumes = {
        v.get("name") for v in map(_mapping, _list(spec.get("volumes")))
        if _mapping(v.get("emptyDir")).get("medium") == "Memory"
    }
    return any(
        m.get("mountPath") == SHM_PATH and m.get("name") in memory_volumes
        for m in map(_mapping, _list(container.get("volumeMounts")))
    )


def _shm(documents: Sequence[Mapping[str, Any]], expect: LintExpectations) -> LintResult:
    if expect.world <= 1:
        return LintResult("shm", True, "one GPU or none: the default /dev/shm will do")
    for deployment in _deployments(documents):
        spec = _pod_spec(deployment)
        for container in _containers(spec):
            if not _memory_shm(spec, container):
                return LintResult("shm", False, (
                    f"container {container.get('name', '?')} shards over {expect.world} GPUs but has no "
                    f"memory-backed emptyDir at {SHM_PATH}: NCCL falls over on the container's default 64 MiB"
                ))
    return LintResult("shm", True, f"{SHM_PATH} is a memory-backed emptyDir")


def _probe_seconds(probe: Mapping[str, Any]) -> int:
    """How long a probe keeps trying before it gives up (Kubernetes' defaults where a field is absent)."""
    delay = _whole(probe.get("initialDelaySeconds", 0)) or 0
    period = _whole(probe.get("periodSeconds", 10)) or 0
    failures = _whole(probe.get("failureThreshold", 3)) or 0
    return delay + period * failures


def _probe_budget(documents: Sequence[Mapping[str, Any]], expect: LintExpectations) -> LintResult:
    budget = expect.warmup_budget_s
    deployments = _deployments(documents)
    if not deployments:
        return LintResult("probe-budget", False, "no Deployment to check")
    for deployment in deployments:
        deadline = _whole(_mapping(deployment.get("spec")).get("progressDeadlineSeconds", 600)) or 0
        if deadline <= budget:
            return LintResult("probe-budget", False, (
                f"progressDeadlineSeconds {deadline} is not above the warmup budget {budget} s: the rollout "
                "would be reported failed while the model is still loading"
            ))
        for container in _containers(_pod_spec(deployment)):
            probe = container.get("startupProbe")
            if not isinstance(probe, Mapping):
                return LintResult("probe-budget", False, (
                    f"container {container.get('name', '?')} has no startupProbe: its liveness probe would "
                    "kill it during warmup"
                ))
            seconds = _probe_seconds(probe)
            if seconds < budget:
                return LintResult("probe-budget", False, (
                    f"container {container.get('name', '?')}: the startupProbe gives up after {seconds} s "
                    f"(initialDelaySeconds + periodSeconds x failureThreshold), before the warmup budget of "
                    f"{budget} s: the container is killed while the model loads"
                ))
    return LintResult("probe-budget", True, f"startup probe and progress deadline cover the {budget} s warmup")


def _image_pinned(documents: Sequence[Mapping[str, Any]]) -> LintResult:
    seen = 0
    for where, container in _all_containers(documents):
        image = container.get("image")
        if not isinstance(image, str) or not IMAGE_RE.fullmatch(image):
            return LintResult("image-pinned", False, (
                f"{where}: image {image!r} is not pinned by digest (NAME[:TAG]@sha256:<64 hex>): a tag can "
                "move under a running deployment"
            ))
        seen += 1
    if not seen:
        return LintResult("image-pinned", False, "no container found")
    return LintResult("image-pinned", True, f"{seen} image(s) pinned by digest")


def resource_name_problem(name: str, *, cdi_names: bool = False) -> str | None:
    """Why ``name`` cannot be a container resource name, or None."""
    if cdi_names and _CDI_NAME.fullmatch(name):
        return None
    if "=" in name:
        return (f"{name!r} is a CDI device name (podman kube play >= 5.4), which Kubernetes refuses: '=' is not "
                "allowed in a resource name")
    prefix, _, part = name.rpartition("/")
    if not part or len(part) > 63 or not _NAME_PART.fullmatch(part):
        return f"{name!r} is not a qualified name"
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return f"{name!r}: its prefix {prefix!r} is not a DNS subdomain"
    if not prefix and not _STANDARD.fullmatch(name):
        return f"{name!r} is neither a standard resource (cpu, memory, ...) nor prefixed by a domain"
    return None


def _resource_names(documents: Sequence[Mapping[str, Any]], expect: LintExpectations) -> LintResult:
    for where, container in _all_containers(documents):
        for key, _value in _resource_keys(container):
            problem = resource_name_problem(key, cdi_names=expect.cdi_names)
            if problem is not None:
                return LintResult("resource-names", False, f"{where}: {problem}")
    return LintResult("resource-names", True, "every resource name is valid for the target")
