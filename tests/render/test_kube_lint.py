"""The manifest lint: every rule passes on what rigctl renders, and fails on a manifest broken to break it
(while the schema check alone would let most of these through)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import kubernetes_validate
import pytest

from rigctl.findings import Finding
from rigctl.recipe.catalog import bundled_recipes_dir
from rigctl.recipe.load import load
from rigctl.render.kube import lint_expectations, render_kube
from rigctl.render.kubelint import (
    RULES,
    KubeLintError,
    LintExpectations,
    lint,
    require_clean,
    resource_name_problem,
)
from rigctl.severity import Severity

BUNDLED = sorted(p.stem for p in bundled_recipes_dir().glob("*.yaml"))
PINNED = "ghcr.io/example/rigctl@sha256:" + "cd" * 32
Docs = list[dict[str, Any]]


def _glm(target: str = "kube", **kwargs: Any) -> tuple[Docs, LintExpectations]:
    """glm53-flash's manifests (two GPUs, a one-hour warmup, in namespace llm) and what the recipe fixes."""
    recipe = load("glm53-flash").recipe
    rendered = render_kube(recipe, target=target, verify_image=PINNED if target == "kube" else None,
                           namespace="llm", **kwargs)
    expect = lint_expectations(recipe, target, namespace="llm")  # type: ignore[arg-type]
    assert (expect.world, expect.cdi_names) == (2, target == "podman-kube")
    return copy.deepcopy(rendered.manifests), expect


def _engine(docs: Docs) -> dict[str, Any]:
    container: dict[str, Any] = docs[0]["spec"]["template"]["spec"]["containers"][0]
    return container


def _result(docs: Docs, expect: LintExpectations, rule: str) -> Finding:
    return next(r for r in lint(docs, expect) if r.id == rule)


@pytest.mark.parametrize("target", ["kube", "podman-kube"])
@pytest.mark.parametrize("name", BUNDLED)
def test_every_rule_passes_on_what_rigctl_renders(name: str, target: str) -> None:
    rendered = render_kube(load(name).recipe, target=target, verify_image=PINNED if target == "kube" else None)
    assert [r.id for r in rendered.lint] == list(RULES)
    assert not any(r.fails for r in rendered.lint), rendered.lint


def _fewer_gpus(docs: Docs) -> None:
    _engine(docs)["resources"]["limits"]["nvidia.com/gpu"] = 1


def _no_gpus(docs: Docs) -> None:
    del _engine(docs)["resources"]


def _gpus_as_text(docs: Docs) -> None:
    _engine(docs)["resources"]["limits"]["nvidia.com/gpu"] = "two"


def _no_shm(docs: Docs) -> None:
    pod = docs[0]["spec"]["template"]["spec"]
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "shm"]
    _engine(docs)["volumeMounts"] = [m for m in _engine(docs)["volumeMounts"] if m["name"] != "shm"]


def _shm_on_disk(docs: Docs) -> None:
    shm = next(v for v in docs[0]["spec"]["template"]["spec"]["volumes"] if v["name"] == "shm")
    shm["emptyDir"] = {}


def _short_startup(docs: Docs) -> None:
    _engine(docs)["startupProbe"]["failureThreshold"] = 30  # 300 s against a 3600 s warmup


def _no_startup(docs: Docs) -> None:
    del _engine(docs)["startupProbe"]


def _short_deadline(docs: Docs) -> None:
    docs[0]["spec"]["progressDeadlineSeconds"] = 600  # Kubernetes' default


def _engine_by_tag(docs: Docs) -> None:
    _engine(docs)["image"] = "ghcr.io/tpurtell/glm-5.3-flash-exl3-4bpw-2x-rtx:v0.6.0"


def _job_by_tag(docs: Docs) -> None:
    docs[2]["spec"]["template"]["spec"]["containers"][0]["image"] = "ghcr.io/example/rigctl:latest"


def _cdi_all(docs: Docs) -> None:
    _engine(docs)["resources"]["limits"] = {"nvidia.com/gpu=all": 1}


def _unprefixed(docs: Docs) -> None:
    _engine(docs)["resources"]["limits"]["gpu"] = 1


def _unbounded_shm(docs: Docs) -> None:
    shm = next(v for v in docs[0]["spec"]["template"]["spec"]["volumes"] if v["name"] == "shm")
    del shm["emptyDir"]["sizeLimit"]


def _no_requests(docs: Docs) -> None:
    del _engine(docs)["resources"]["requests"]


def _no_memory_request(docs: Docs) -> None:
    del _engine(docs)["resources"]["requests"]["memory"]


def _small_memory_request(docs: Docs) -> None:
    _engine(docs)["resources"]["requests"]["memory"] = "8Gi"  # glm53-flash loads 172 GiB


def _job_without_requests(docs: Docs) -> None:
    del docs[2]["spec"]["template"]["spec"]["containers"][0]["resources"]


def _no_security_context(docs: Docs) -> None:
    del _engine(docs)["securityContext"]


def _escalation(docs: Docs) -> None:
    _engine(docs)["securityContext"]["allowPrivilegeEscalation"] = True


def _capabilities_kept(docs: Docs) -> None:
    _engine(docs)["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}


def _capability_added(docs: Docs) -> None:
    _engine(docs)["securityContext"]["capabilities"]["add"] = ["SYS_ADMIN"]


def _root_filesystem_unsaid(docs: Docs) -> None:
    del _engine(docs)["securityContext"]["readOnlyRootFilesystem"]


def _job_unconfined(docs: Docs) -> None:
    del docs[2]["spec"]["template"]["spec"]["containers"][0]["securityContext"]


def _no_toleration(docs: Docs) -> None:
    del docs[0]["spec"]["template"]["spec"]["tolerations"]


def _toleration_for_another_taint(docs: Docs) -> None:
    docs[0]["spec"]["template"]["spec"]["tolerations"] = [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]


def _service_elsewhere(docs: Docs) -> None:
    docs[1]["metadata"]["namespace"] = "other"


def _no_namespace(docs: Docs) -> None:
    for doc in docs:
        del doc["metadata"]["namespace"]


BREAKS: list[tuple[str, Callable[[Docs], None]]] = [
    ("gpu-count", _fewer_gpus),
    ("gpu-count", _no_gpus),
    ("gpu-count", _gpus_as_text),
    ("shm", _no_shm),
    ("shm", _shm_on_disk),
    ("probe-budget", _short_startup),
    ("probe-budget", _no_startup),
    ("probe-budget", _short_deadline),
    ("image-pinned", _engine_by_tag),
    ("image-pinned", _job_by_tag),
    ("resource-names", _cdi_all),
    ("resource-names", _unprefixed),
    ("shm", _unbounded_shm),
    ("requests", _no_requests),
    ("requests", _no_memory_request),
    ("requests", _small_memory_request),
    ("requests", _job_without_requests),
    ("security-context", _no_security_context),
    ("security-context", _escalation),
    ("security-context", _capabilities_kept),
    ("security-context", _capability_added),
    ("security-context", _root_filesystem_unsaid),
    ("security-context", _job_unconfined),
    ("gpu-toleration", _no_toleration),
    ("gpu-toleration", _toleration_for_another_taint),
    ("namespace", _service_elsewhere),
    ("namespace", _no_namespace),
]


@pytest.mark.parametrize(("rule", "breaks"), BREAKS, ids=[f"{r}-{f.__name__.strip('_')}" for r, f in BREAKS])
def test_each_rule_fails_on_a_manifest_broken_for_it(rule: str, breaks: Callable[[Docs], None]) -> None:
    docs, expect = _glm()
    assert _result(docs, expect, rule).severity is Severity.OK  # the real render passes ...
    breaks(docs)
    result = _result(docs, expect, rule)
    assert result.fails, result  # ... the broken one does not
    with pytest.raises(KubeLintError, match=f"lint rule {rule} failed"):
        require_clean(lint(docs, expect))


def test_the_schema_alone_lets_a_cdi_name_and_a_short_probe_through() -> None:
    """Why the lint exists: kubernetes-validate --strict passes these two defects."""
    docs, _ = _glm()
    _cdi_all(docs)
    _short_startup(docs)
    kubernetes_validate.validate(docs[0], "1.33.0", strict=True)  # no exception


def test_podman_kube_counts_cdi_devices_and_refuses_all() -> None:
    docs, expect = _glm("podman-kube", gpu_ids=["GPU-a", "GPU-b"])
    assert _result(docs, expect, "gpu-count").severity is Severity.OK and _result(docs, expect, "resource-names").severity is Severity.OK
    del _engine(docs)["resources"]["limits"]["nvidia.com/gpu=GPU-b"]
    assert _result(docs, expect, "gpu-count").fails
    _engine(docs)["resources"]["limits"] = {"nvidia.com/gpu=all": 1}
    assert "name each GPU" in _result(docs, expect, "gpu-count").message
    assert _result(docs, expect, "resource-names").severity is Severity.OK  # a CDI name is a valid key for podman ...
    kube_expect = LintExpectations(world=2, warmup_budget_s=3600)
    assert _result(docs, kube_expect, "resource-names").fails  # ... and not for Kubernetes


def test_gpu_count_not_compared_where_no_gpus_can_pass() -> None:
    docs, _ = _glm("podman-kube", podman_version=(5, 3))
    expect = LintExpectations(world=2, warmup_budget_s=3600, cdi_names=True, gpus_passed=False)
    assert _result(docs, expect, "gpu-count").severity is Severity.OK
    assert _result(docs, LintExpectations(world=2, warmup_budget_s=3600, cdi_names=True), "gpu-count").fails


@pytest.mark.parametrize(("name", "cdi", "ok"), [
    ("nvidia.com/gpu", False, True),
    ("cpu", False, True),
    ("memory", False, True),
    ("hugepages-2Mi", False, True),
    ("example.com/fpga", False, True),
    ("nvidia.com/gpu=all", False, False),
    ("nvidia.com/gpu=0", True, True),
    ("nvidia.com/gpu=GPU-5f1c0000-0000-0000-0000-000000000000", True, True),
    ("nvidia.com/gpu=", True, False),
    ("gpu", False, False),
    ("Example.com/fpga", False, False),
    ("nvidia.com/-gpu", False, False),
    ("example.com/" + "x" * 64, False, False),
])
def test_resource_name_rule(name: str, cdi: bool, ok: bool) -> None:
    assert (resource_name_problem(name, cdi_names=cdi) is None) is ok


def test_podman_kube_needs_no_requests_nor_toleration() -> None:
    """One box has no scheduler: the podman-kube manifests carry neither, and pass."""
    docs, expect = _glm("podman-kube", gpu_ids=["GPU-a", "GPU-b"])
    assert "requests" not in _engine(docs)["resources"] and "tolerations" not in docs[0]["spec"]["template"]["spec"]
    assert _result(docs, expect, "requests").severity is Severity.OK and _result(docs, expect, "gpu-toleration").severity is Severity.OK
    assert _result(docs, LintExpectations(world=2, warmup_budget_s=3600), "requests").fails  # a cluster's would not


def test_an_invalid_namespace_fails() -> None:
    docs, _ = _glm()
    for doc in docs:
        doc["metadata"]["namespace"] = "Not_A_Label"
    assert "DNS-1123" in _result(docs, LintExpectations(world=2, warmup_budget_s=3600), "namespace").message


def test_the_lint_reads_the_yaml_it_is_given() -> None:
    """yaml-faithful runs on the printed text: a plain 1e6 there fails it."""
    rendered = render_kube(load("qwen3-8b-vllm").recipe)
    expect = lint_expectations(load("qwen3-8b-vllm").recipe, "kube")
    text = rendered.yaml_file.text
    assert '- "0.90"\n' in text
    results = lint(rendered.manifests, expect, text.replace('- "0.90"\n', "- 0.90\n"))
    result = next(r for r in results if r.id == "yaml-faithful")
    assert result.fails and "0.90" in result.message


def test_lint_rules_are_a_registry_that_refuses_a_second_id_and_names_each_finding() -> None:
    """A rule says only what it found; the registry gives its finding the id it was registered under (a rule
    cannot report under another's)."""
    from rigctl.render import kubelint

    with pytest.raises(ValueError, match="registered twice"):
        kubelint._rule("gpu-count")(lambda given: kubelint._passed(""))
    kubelint._rule("test-own-id")(lambda given: kubelint._failed("found"))
    try:
        finding = kubelint._REGISTRY["test-own-id"](kubelint.LintInput([], kubelint.LintExpectations(world=1, warmup_budget_s=60)))
        assert (finding.id, finding.fails, finding.message) == ("test-own-id", True, "found")
    finally:
        del kubelint._REGISTRY["test-own-id"]
    assert tuple(kubelint._REGISTRY) == kubelint.RULES


def test_lint_results_are_findings_in_render_json() -> None:
    """Lint speaks the one result shape (a Finding: id, severity, message), and `render --json` gives each
    rule's finding under those keys as well as the rule/ok/detail it has always had."""
    from typer.testing import CliRunner

    from rigctl.cli.app import app

    done = CliRunner().invoke(app, ["render", "qwen3-8b-vllm", "--target", "kube", "--json"])
    assert done.exit_code == 0, done.stdout
    lint_rows = json.loads(done.stdout)["lint"]
    assert [row["id"] for row in lint_rows] == list(RULES)
    for row in lint_rows:
        assert Finding.model_validate({k: row[k] for k in ("id", "severity", "message", "fix", "figures")})
        assert (row["rule"], row["ok"], row["detail"]) == (row["id"], row["severity"] == "ok", row["message"])
