"""Interop: a real OpenAI-compatible server nobody here wrote. `transformers serve` runs a tiny random-weight
Llama on CPU (built by .ci/interop-env.sh into a separate venv). Its random answers must fail `smoke`, and
its protocol differences (no [DONE], no /tokenize, the model id is a path, one request at a time) must not
crash any check."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.interop.serving import serving

from rigctl.recipe.model import NeedleSettings, SoakSettings
from rigctl.verify import Endpoint, Expectations, run_checks

REPO = Path(__file__).resolve().parent.parent.parent
VENV = Path(os.environ.get("RIGCTL_INTEROP_VENV", REPO / ".cache" / "interop-venv"))
MODEL = Path(os.environ.get("RIGCTL_INTEROP_MODEL", REPO / ".cache" / "interop-model"))
SERVE = VENV / "bin" / "transformers"
CONTEXT = 2048

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    with serving(
        lambda port: [str(SERVE), "serve", str(MODEL), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu"],
        tmp_path_factory.mktemp("serve") / "serve.log", what="transformers serve", ready_s=180, env=env,
    ) as url:
        yield url


@pytest.fixture(autouse=True)
def _interop_env(need: Callable[[bool, str], None]) -> None:
    need(SERVE.exists() and (MODEL / "config.json").exists(),
         f"no interop environment at {VENV} / {MODEL}: run `bash .ci/interop-env.sh`")


def expectations() -> Expectations:
    # transformers serve answers one request at a time on CPU: a small soak, generous timeouts.
    return Expectations(
        context=CONTEXT,
        needle=NeedleSettings(answer_budget=32),
        soak=SoakSettings(concurrency=16, requests=16, prefix_tokens=1024, max_tokens=16, timeout_s=300),
        request_timeout_s=120.0,
    )


def test_random_model_fails_smoke_and_nothing_crashes(served: str) -> None:
    report = run_checks(Endpoint(served, str(MODEL)), expectations())
    by_id = {c.id: c for c in report.checks}
    assert [c.id for c in report.checks] == ["health", "models", "smoke", "repetition", "determinism", "needle",
                                             "soak"]
    assert not [c for c in report.checks if c.status == "error"], report.to_dict()
    assert by_id["health"].status == "pass"
    assert by_id["models"].status == "pass"  # listed under its path; no max_model_len to compare
    assert by_id["models"].figures["max_model_len"] is None
    assert by_id["smoke"].status == "fail" and "Paris" in by_id["smoke"].message
    assert not report.ok
    needle = by_id["needle"]
    assert needle.figures["sizing"] == "usage-calibrated"  # no /tokenize here
    assert needle.figures["prompt_tokens"] <= CONTEXT
    soak = by_id["soak"]
    assert soak.figures["completed"] == 16 and soak.figures["failed"] == 0  # streams without [DONE] are fine


def test_cli_json_against_transformers_serve(served: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "rigctl", "verify", "--url", served, "--model", str(MODEL), "--context",
         str(CONTEXT), "--checks", "health,models,smoke,repetition,determinism", "--json"],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["command"] == "verify" and doc["ok"] is False
    assert {c["id"]: c["status"] for c in doc["checks"]}["smoke"] == "fail"
