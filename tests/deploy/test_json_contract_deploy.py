"""The JSON contract of the commands that act on a deployment (issue #11): up, status, logs, verify, swap, down,
and preflight of a local recipe with --checksums, on the real testbed (podman, quadlet, systemd --user, the
test engine). One walk through them (``walk``) deploys once, swaps once and lets one deployment die in warmup;
each test then pins the keys of one answer (tests/cli/contract_cases.py says why exactly those)."""

from __future__ import annotations

import shutil
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.contract_cases import (
    CHECK_KEYS,
    CHECK_STATUSES,
    ENVELOPE,
    FINDING_KEYS,
    PREFLIGHT_KEYS,
    PREFLIGHT_LAYOUT_KEYS,
    SEVERITIES,
    SIGNATURE_KEYS,
    check_envelope,
    check_items,
    check_keys,
    check_words,
    rigctl_json,
)
from tests.conftest import require_or_skip
from tests.deploy import conftest as testbed  # its testbed_env, imported by name, would be collected as a test
from tests.deploy.conftest import Rig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

UP_KEYS = ENVELOPE | {
    "recipe", "scope", "unit", "container", "endpoint", "served_name", "image", "action", "message", "unit_dir",
    "unit_files", "gpu_ids", "preflight", "render_notes", "wait", "signatures", "checks", "warnings", "restarts",
    "stopped_after_failure", "scope_hint",  # scope_hint: #15
    "memory",  # #32: the memory plan against the boot's receipt (None: neither said anything)
}
UP_ACTIONS = frozenset({"installed", "replaced", "unchanged", "restarted", "started", "attached", "refused"})
WAIT_KEYS = frozenset({"status", "elapsed_s", "phase", "exit_status", "detail", "last_lines"})
WAIT_STATUSES = frozenset({"ready", "died", "stalled", "timeout", "stopped"})
SERVICE_KEYS = frozenset({
    "recipe", "scope", "unit", "unit_file", "active", "sub", "restarts", "restart_policy", "exit_status", "health",
    "endpoint", "model", "image", "image_digest", "uptime_s", "gpu_memory_mib", "gpu_ids", "last_failure",
    "canary", "last_boot",  # #24: the canary's summary and the last recorded boot (None when there is none)
    "verdict", "verdict_detail", "last_exit",  # #25: the unit judged, and how its engine last ended
    "gpu_memory",  # #22: per GPU, the memory the plan gives the engine beside what it holds (None: no NVML)
    "restart_policy_from",  # #20: the manager, or the unit file when the manager did not answer
    "memory",  # #32: the memory plan against the last ready boot's receipt
    "host_drift",  # #34: the host against the facts the deployment was planned on (None: none kept)
    "host_drift_not_compared",  # #34: planned facts not compared with the host (the driver's CUDA without NVML)
    "engine_cache",  # #36: the engine cache the unit mounts, its size, its last cold and warm boot
})
LAST_EXIT_KEYS = frozenset({"said", "status", "how", "at", "phase", "source"})
HEALTH_WORDS = frozenset({"ready", "down", "unknown", "starting", "restarting"})  # or "unhealthy (<why>)"
LAST_FAILURE_KEYS = frozenset({"at", "status", "detail", "exit_status", "phase", "last_lines", "signatures"})
LOG_LINE_KEYS = frozenset({"source", "text", "signature"})
LOG_SOURCES = frozenset({"podman", "journal", "engine-log", "last-failure", "rigctl"})
CHECK_IDS = ["health", "models", "smoke", "repetition", "determinism", "needle", "soak"]
ENGINE_KEYS = frozenset({"dialect", "detection", "expected", "tokenizer", "served_context", "context_source",
                         "expected_context", "context"})
SWAP_OUTCOMES = frozenset({"swapped", "rolled-back", "rollback-failed", "refused"})
SWAP_STEPS = frozenset({"preflight-to", "stop-from", "gpu-release", "up-to", "remove-from", "stop-to",
                        "gpu-release-to", "restore-from"})

DIES_IN_WARMUP = {  # the test engine's crash, as test_chain lets it happen: a known signature, exit 0
    "FAKE_VLLM_WARMUP_SECONDS": "8", "FAKE_VLLM_DIE_AFTER": "1.5", "FAKE_VLLM_EXIT_CODE": "0",
    "FAKE_VLLM_DIE_MESSAGE": "ValueError: ReplaySSM prefill source/state row count mismatch",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


Answers = dict[str, tuple[int, dict[str, Any]]]


@pytest.fixture(scope="module")
def walk() -> Iterator[Answers]:
    """Every command once, in the order an operator would run them; each answer kept under a name. The
    deployments are named contract-*: other tests share the testbed's user manager, and never these names."""
    env = testbed.testbed_env()
    require_or_skip("RIGCTL_TEST_ENGINE_IMAGE" in env, "no test-engine image: run `.ci/testbed.sh up`")
    require_or_skip(shutil.which("podman") is not None, "podman is not installed (.ci/testbed.sh up)")
    require_or_skip(testbed._manager_running(env), "no `systemd --user` manager running (.ci/testbed.sh up)")
    with tempfile.TemporaryDirectory(prefix="rigctl-contract-") as tmp:
        rig = Rig(env, Path(tmp))
        port_a = _free_port()
        a = rig.recipe("contract-a", port_a, env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
        b = rig.recipe("contract-b", _free_port(), env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
        dies = rig.recipe("contract-dies", _free_port(), env=DIES_IN_WARMUP)
        private = {**env, "XDG_CACHE_HOME": str(Path(tmp) / "cache"), "XDG_STATE_HOME": str(Path(tmp) / "state")}
        answers: Answers = {}

        def run(name: str, *args: str, timeout: float = 60.0, on: dict[str, str] = env) -> None:
            answers[name] = rigctl_json(*args, "--json", env=on, timeout=timeout)

        try:
            run("preflight", "preflight", str(a), "--checksums", "--user", on=private)  # where up deploys it
            run("up", "up", str(a), "--user", timeout=150)
            run("status", "status", "--user")
            run("logs", "logs", "contract-a", "--user")
            run("verify", "verify", str(a), timeout=120)
            run("verify --url", "verify", "--url", f"http://127.0.0.1:{port_a}", "--model", "test-model",
                "--checks", "health,models")
            run("swap", "swap", "contract-a", str(b), "--user", timeout=180)
            run("up (dies)", "up", str(dies), "--user", timeout=150)
            run("logs (died)", "logs", "contract-dies", "--user")
            run("status (died)", "status", "--user")
            run("down", "down", "contract-b", "--user", "--remove", timeout=120)
            yield answers
        finally:
            rig.cleanup()


def test_preflight_with_checksums(walk: Answers) -> None:
    code, doc = walk["preflight"]
    assert code == 0, doc
    check_envelope(doc, "preflight", True)
    check_keys(doc, PREFLIGHT_KEYS | {"checksums"}, "preflight --checksums")
    findings = check_items(doc["findings"], FINDING_KEYS, "preflight.findings")
    check_words([f["severity"] for f in findings], SEVERITIES, "preflight.findings[].severity")
    check_keys(doc["layout"], PREFLIGHT_LAYOUT_KEYS, "preflight.layout")
    assert doc["checksums"] and all(isinstance(k, str) and isinstance(v, str) for k, v in doc["checksums"].items())


def test_up(walk: Answers) -> None:
    code, doc = walk["up"]
    assert code == 0, doc
    check_envelope(doc, "up", True)
    check_keys(doc, UP_KEYS, "up")
    check_words([doc["action"]], UP_ACTIONS, "up.action")
    check_words([doc["scope"]], {"user", "system"}, "up.scope")
    findings = check_items(doc["preflight"], FINDING_KEYS, "up.preflight")
    check_words([f["severity"] for f in findings], SEVERITIES, "up.preflight[].severity")
    check_keys(doc["wait"], WAIT_KEYS, "up.wait")
    check_words([doc["wait"]["status"]], WAIT_STATUSES, "up.wait.status")
    check_keys(doc["checks"], {"ok", "results"}, "up.checks")
    results = check_items(doc["checks"]["results"], CHECK_KEYS, "up.checks.results")
    check_words([c["status"] for c in results], CHECK_STATUSES, "up.checks.results[].status")


def test_up_that_died_in_warmup(walk: Answers) -> None:
    code, doc = walk["up (dies)"]
    assert code == 4, doc
    check_envelope(doc, "up", False)
    check_keys(doc, UP_KEYS, "up (died)")
    check_keys(doc["wait"], WAIT_KEYS, "up.wait")
    check_words([doc["wait"]["status"]], WAIT_STATUSES, "up.wait.status")
    assert doc["wait"]["status"] == "died"
    check_items(doc["signatures"], SIGNATURE_KEYS, "up.signatures")
    assert doc["checks"] is None  # nothing to check on an engine that never got ready


def _service(doc: dict[str, Any], unit: str) -> dict[str, Any]:
    services = check_items(doc["services"], SERVICE_KEYS, "status.services")  # every row, ours and others'
    for row in services:
        check_words([row["scope"]], {"user", "system"}, "status.services[].scope")
        health = str(row["health"])
        assert health in HEALTH_WORDS or health.startswith("unhealthy ("), health
    (row,) = [s for s in services if s["unit"] == unit]
    return row


def test_status(walk: Answers) -> None:
    code, doc = walk["status"]
    # 7 (SERVICE_DOWN) exactly when a rigctl unit of this manager does not serve; contract-a serves
    assert code in (0, 7) and (code == 7) == bool(doc["failing"]), doc
    check_envelope(doc, "status", code == 0)
    check_keys(doc, ENVELOPE | {"services", "failing"}, "status")
    assert "rigctl-contract-a.service" not in doc["failing"]
    row = _service(doc, "rigctl-contract-a.service")
    assert row["health"] == "ready" and row["last_failure"] is None


def test_status_keeps_the_last_failure(walk: Answers) -> None:
    code, doc = walk["status (died)"]
    assert code == 7, doc  # the model that died in warmup does not serve: SERVICE_DOWN, ok false
    check_envelope(doc, "status", False)
    check_keys(doc, ENVELOPE | {"services", "failing"}, "status")
    assert "rigctl-contract-dies.service" in doc["failing"]
    row = _service(doc, "rigctl-contract-dies.service")
    check_keys(row["last_failure"], LAST_FAILURE_KEYS, "status.services[].last_failure")
    assert row["verdict"] == "down", row
    check_keys(row["last_exit"], LAST_EXIT_KEYS, "status.services[].last_exit")


def test_logs(walk: Answers) -> None:
    code, doc = walk["logs"]
    assert code == 0, doc
    check_envelope(doc, "logs", True)
    check_keys(doc, ENVELOPE | {"recipe", "container", "lines", "signatures"}, "logs")
    lines = check_items(doc["lines"], LOG_LINE_KEYS, "logs.lines")
    check_words([ln["source"] for ln in lines], LOG_SOURCES, "logs.lines[].source")


def test_logs_with_a_crash_signature(walk: Answers) -> None:
    code, doc = walk["logs (died)"]
    assert code == 0, doc
    check_envelope(doc, "logs", True)
    check_keys(doc, ENVELOPE | {"recipe", "container", "lines", "signatures"}, "logs")
    lines = check_items(doc["lines"], LOG_LINE_KEYS, "logs.lines")
    check_words([ln["source"] for ln in lines], LOG_SOURCES, "logs.lines[].source")
    check_items([ln["signature"] for ln in lines if ln["signature"] is not None], SIGNATURE_KEYS,
                "logs.lines[].signature")
    check_items(doc["signatures"], SIGNATURE_KEYS, "logs.signatures")


def test_verify_every_check(walk: Answers) -> None:
    code, doc = walk["verify"]
    assert code == 0, doc
    check_envelope(doc, "verify", True)
    check_keys(doc, ENVELOPE | {"endpoint", "engine", "checks"}, "verify")
    check_keys(doc["endpoint"], {"url", "model"}, "verify.endpoint")
    check_keys(doc["engine"], ENGINE_KEYS, "verify.engine")
    checks = check_items(doc["checks"], CHECK_KEYS, "verify.checks")
    assert [c["id"] for c in checks] == CHECK_IDS
    check_words([c["status"] for c in checks], CHECK_STATUSES, "verify.checks[].status")
    (soak,) = [c for c in checks if c["id"] == "soak"]
    check_keys(soak["figures"], {  # the serving figures a benchmark script reads
        "dialect", "context", "context_source", "completed", "failed", "duration_s", "total_output_tokens",
        "request_throughput", "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
        "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms", "requests", "concurrency",
        "prefix_tokens", "prompt_tokens", "prefix_sizing", "baseline_output_tokens", "runaway_factor", "runaways",
        "cut_off", "health_polls", "health_drops", "health_after", "max_tokens", "tokenizer",
    }, "verify.checks[soak].figures")


def test_verify_an_url(walk: Answers) -> None:
    code, doc = walk["verify --url"]
    assert code == 0, doc
    check_envelope(doc, "verify", True)
    check_keys(doc, ENVELOPE | {"endpoint", "engine", "checks"}, "verify --url")
    check_keys(doc["endpoint"], {"url", "model"}, "verify.endpoint")
    check_keys(doc["engine"], ENGINE_KEYS, "verify.engine")
    checks = check_items(doc["checks"], CHECK_KEYS, "verify.checks")
    assert [c["id"] for c in checks] == ["health", "models"]


def test_swap(walk: Answers) -> None:
    code, doc = walk["swap"]
    assert code == 0, doc
    check_envelope(doc, "swap", True)
    check_keys(doc, ENVELOPE | {"from", "to", "outcome", "message", "steps", "todo", "mode", "downtime_s"},
               "swap")  # mode, downtime_s: #36
    check_words([doc["outcome"]], SWAP_OUTCOMES, "swap.outcome")
    steps = check_items(doc["steps"], {"step", "ok", "message", "detail"}, "swap.steps")
    check_words([s["step"] for s in steps], SWAP_STEPS, "swap.steps[].step")
    assert all(isinstance(s["detail"], dict) for s in steps)
    assert isinstance(doc["todo"], list)


def test_down(walk: Answers) -> None:
    code, doc = walk["down"]
    assert code == 0, doc
    check_envelope(doc, "down", True)
    check_keys(doc, ENVELOPE | {"recipe", "unit", "was_active", "stopped", "container_gone", "removed", "gpu_ids",
                                "gpus_released", "message", "canary_removed", "engine_log_kept",
                                "engine_cache_kept"}, "down")  # engine_cache_kept: #36
