"""Every failure of the story, reproduced by the test engine running as a real process on 127.0.0.1, is
caught by the check meant for it; the healthy engine passes everything."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from rigctl.recipe.load import load
from rigctl.recipe.model import NeedleSettings, SoakSettings
from rigctl.verify import Endpoint, Expectations, match_signatures, run_checks
from rigctl.verify.client import HttpEngine
from rigctl.verify.report import VerifyReport
from rigctl.verify.soak import drive

from .conftest import FakeEngine

CONTEXT = 4096
SOAK = SoakSettings(concurrency=16, requests=32, prefix_tokens=2048, max_tokens=64, timeout_s=60)

Start = Callable[..., FakeEngine]


def expect(**changes: object) -> Expectations:
    base: dict[str, object] = {"context": CONTEXT, "soak": SOAK, "request_timeout_s": 10.0, "health_timeout_s": 5.0}
    base.update(changes)
    return Expectations(**base)  # type: ignore[arg-type]


def statuses(report: VerifyReport) -> dict[str, str]:
    return {c.id: c.status for c in report.checks}


def verify(engine: FakeEngine, **changes: object) -> VerifyReport:
    return run_checks(Endpoint(engine.url, engine.model), expect(**changes))


def test_healthy_engine_passes_every_check(fake_engine: Start) -> None:
    report = verify(fake_engine("healthy", "--max-model-len", str(CONTEXT)))
    assert statuses(report) == dict.fromkeys(statuses(report), "pass"), report.to_dict()
    assert report.ok
    soak = report.get("soak")
    assert soak is not None
    for key in ("completed", "failed", "request_throughput", "output_throughput", "median_ttft_ms", "p99_ttft_ms",
                "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms", "mean_e2el_ms"):
        assert key in soak.figures
    assert soak.figures["completed"] == 32 and soak.figures["prefix_tokens"] >= 2000
    needle = report.get("needle")
    assert needle is not None and needle.figures["sizing"] == "tokenize"
    assert needle.figures["prompt_tokens"] == CONTEXT - NeedleSettings().answer_budget


def test_word_salad_fails_smoke_and_repetition(fake_engine: Start) -> None:
    report = verify(fake_engine("word-salad", "--max-model-len", str(CONTEXT)),)
    got = statuses(report)
    assert got["smoke"] == "fail" and got["repetition"] == "fail"
    assert got["health"] == "pass" and got["models"] == "pass"  # HTTP 200 proves nothing
    rep = report.get("repetition")
    assert rep is not None and "capital france" in rep.message
    assert not report.ok


def test_nondeterminism_fails_determinism_only(fake_engine: Start) -> None:
    report = verify(fake_engine("nondeterministic", "--max-model-len", str(CONTEXT)),
                    soak=SOAK.model_copy(update={"requests": 16}))
    got = statuses(report)
    assert got["determinism"] == "fail"
    assert got["smoke"] == "pass" and got["repetition"] == "pass"


def test_context_loss_fails_needle(fake_engine: Start) -> None:
    engine = fake_engine("context-loss", "--max-model-len", "8192", "--context-limit", "3000")
    report = run_checks(Endpoint(engine.url, engine.model), expect(context=8192),
                        checks=("health", "models", "smoke", "needle"))
    got = statuses(report)
    assert got["needle"] == "fail" and got["smoke"] == "pass"
    needle = report.get("needle")
    assert needle is not None
    assert 0 < needle.figures["found"] < needle.figures["needles"]  # early needles survive, late ones are lost
    assert min(needle.figures["missing_depths"]) >= 0.25


def test_crash_under_shared_prefix_load_fails_soak_and_exits_zero(fake_engine: Start) -> None:
    # a prefill of ~0.5 s keeps the soak's requests in flight together, so 8 of them share the prefix at once
    # however busy the box (with the default 2 ms, a loaded box let each finish before the next arrived)
    engine = fake_engine("crash-under-load", "--max-model-len", str(CONTEXT), "--crash-concurrency", "8",
                         "--prefill-delay", "0.25")
    report = run_checks(Endpoint(engine.url, engine.model), expect(), checks=("health", "smoke", "soak"))
    got = statuses(report)
    assert got["health"] == "pass" and got["smoke"] == "pass"  # solo calls are fine, as in the story
    soak = report.get("soak")
    assert soak is not None and soak.status == "fail"
    assert "died" in soak.message and soak.figures["failed"] > 0
    assert engine.wait_exit() == 0  # the API server's clean shutdown: Restart=on-failure would not restart it
    recipe = load("glm53-flash-k3-dflash2").recipe
    hits = match_signatures(recipe.known_issues.signatures, engine.stderr.read_text())
    assert "replayssm-row-mismatch" in [h.id for h in hits]


def test_runaway_under_batching_fails_soak(fake_engine: Start) -> None:
    engine = fake_engine("runaway", "--max-model-len", str(CONTEXT), "--runaway-concurrency", "4")
    report = run_checks(Endpoint(engine.url, engine.model), expect(), checks=("smoke", "soak"))
    soak = report.get("soak")
    assert soak is not None and soak.status == "fail"
    assert soak.figures["runaways"] > 0 and "ran away" in soak.message
    assert report.get("smoke") is not None and statuses(report)["smoke"] == "pass"


def test_streams_cut_off_half_way_fail_soak(fake_engine: Start) -> None:
    # health, the model list and whole (non-streamed) answers are fine; every stream stops half-way
    engine = fake_engine("cut-off", "--max-model-len", str(CONTEXT))
    report = run_checks(Endpoint(engine.url, engine.model), expect(), checks=("health", "models", "smoke", "soak"))
    soak = report.get("soak")
    assert soak is not None and soak.status == "fail", soak
    assert soak.figures["completed"] == 0 and soak.figures["cut_off"] > 0
    assert "cut-off" in soak.message
    assert statuses(report)["health"] == "pass"


@pytest.mark.timeout(60)
def test_hang_behind_green_health_fails_in_bounded_time(fake_engine: Start) -> None:
    engine = fake_engine("hang", "--max-model-len", str(CONTEXT))
    report = verify(engine, request_timeout_s=2.0)
    got = statuses(report)
    assert got["health"] == "pass"
    assert got["smoke"] == "fail"
    smoke = report.get("smoke")
    assert smoke is not None and "did not finish within 2s" in smoke.message
    # One timeout, not one per check: the rest are skipped with the reason.
    assert {got[c] for c in ("repetition", "determinism", "needle", "soak")} == {"skip"}
    assert not report.ok


def test_server_that_differs_still_passes(fake_engine: Start) -> None:
    """No [DONE], no /tokenize, no max_model_len, usage only on the last chunk: like transformers serve."""
    engine = fake_engine("healthy", "--protocol", "minimal", "--max-model-len", str(CONTEXT))
    report = verify(engine)
    got = statuses(report)
    assert set(got.values()) == {"pass"}, report.to_dict()
    needle = report.get("needle")
    assert needle is not None and needle.figures["sizing"] == "usage-calibrated"
    soak = report.get("soak")
    assert soak is not None and soak.figures["total_output_tokens"] > 0


def test_unreachable_engine_fails_fast_and_skips_the_rest() -> None:
    report = run_checks(Endpoint("http://127.0.0.1:9", "m"), expect())
    got = statuses(report)
    assert got["health"] == "fail"
    assert {got[c] for c in ("models", "smoke", "repetition", "determinism", "needle", "soak")} == {"skip"}


def test_wrong_context_and_wrong_name_fail_models(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--max-model-len", "8192")
    wrong_len = run_checks(Endpoint(engine.url, engine.model), expect(context=262144), checks=("models",))
    assert statuses(wrong_len)["models"] == "fail" and "262,144" in wrong_len.checks[0].message
    wrong_name = run_checks(Endpoint(engine.url, "other"), expect(), checks=("models",))
    assert statuses(wrong_name)["models"] == "fail" and "fake-model" in wrong_name.checks[0].message


def test_warmup_503_then_ready_and_death_during_warmup(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--warmup-seconds", "1.5")
    first = run_checks(Endpoint(engine.url, engine.model), expect(), checks=("health",))
    assert first.checks[0].status == "fail" and "503" in first.checks[0].message
    deadline = 100
    while deadline and "Starting vLLM API server" not in engine.stdout.read_text():
        deadline -= 1
        asyncio.run(asyncio.sleep(0.05))
    log = engine.stdout.read_text()
    assert "Loading safetensors checkpoint shards: 8/8" in log and "Capturing CUDA graphs" in log
    assert run_checks(Endpoint(engine.url, engine.model), expect(), checks=("health",)).ok
    dying = fake_engine("healthy", "--warmup-seconds", "30", "--die-during-warmup-after", "0.3", "--exit-code", "3")
    assert dying.wait_exit() == 3
    assert "CUDA out of memory" in dying.stderr.read_text()


def test_load_client_drives_256_concurrent_streams(fake_engine: Start) -> None:
    # Streams last about a second each (25 tokens, 40 ms apart), so all 256 overlap if the client opens them.
    engine = fake_engine("healthy", "--no-access-log", "--token-delay", "0.04")
    prompts = [f"Question {i}: name a colour." for i in range(256)]

    async def go() -> tuple[int, int]:
        async with HttpEngine(Endpoint(engine.url, engine.model), max_connections=264) as client:
            outcomes, _ = await drive(client, prompts, concurrency=256, max_tokens=64, timeout_s=120,
                                      idle_timeout_s=30)
        done = sum(1 for o in outcomes if o.error is None)
        return done, len(outcomes) - done

    done, failed = asyncio.run(go())
    assert failed == 0 and done == 256
    metrics = httpx.get(f"{engine.url}/metrics", timeout=10).text
    peak = next(float(line.split()[-1]) for line in metrics.splitlines()
                if line.startswith("fake_vllm:max_requests_running"))
    assert peak >= 200, f"the engine saw at most {peak:.0f} streams at once"


def test_cli_json_envelope_and_exit_codes(fake_engine: Start) -> None:
    good = fake_engine("healthy", "--max-model-len", str(CONTEXT))
    bad = fake_engine("word-salad", "--max-model-len", str(CONTEXT))
    env = {**os.environ, "NO_COLOR": "1"}
    for engine, code in ((good, 0), (bad, 1)):
        proc = subprocess.run(
            [sys.executable, "-m", "rigctl", "verify", "--url", engine.url, "--model", engine.model, "--context",
             str(CONTEXT), "--checks", "health,models,smoke,repetition", "--json"],
            capture_output=True, text=True, timeout=120, env=env, check=False,
        )
        assert proc.returncode == code, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["rigctl"] == "1" and doc["command"] == "verify" and doc["ok"] is (code == 0)
        assert [c["id"] for c in doc["checks"]] == ["health", "models", "smoke", "repetition"]
        for check in doc["checks"]:
            assert set(check) >= {"id", "status", "message", "figures"}
            assert check["status"] in {"pass", "warn", "fail", "skip", "error"}


def test_cli_from_recipe_and_human_table(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--max-model-len", "32768", model="qwen3-8b")
    port = engine.url.rsplit(":", 1)[1]
    proc = subprocess.run(
        [sys.executable, "-m", "rigctl", "verify", "qwen3-8b-vllm", "--set", f"engine.port={port}",
         "--checks", "health,models,smoke"],
        capture_output=True, text=True, timeout=120, env={**os.environ, "NO_COLOR": "1", "COLUMNS": "120"},
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "max_model_len 32,768" in proc.stdout and "verify: OK" in proc.stdout


def test_cli_usage_errors() -> None:
    proc = subprocess.run([sys.executable, "-m", "rigctl", "verify", "--url", "http://127.0.0.1:9"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--model" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "rigctl", "verify", "--url", "http://127.0.0.1:9", "--model", "m",
                           "--checks", "smoke,bogus", "--json"], capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2 and json.loads(proc.stdout)["error"]["message"].startswith("unknown check")


def test_chat_only_server_is_verified_through_chat(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--protocol", "chat-only", "--max-model-len", str(CONTEXT))
    report = verify(engine, soak=SOAK.model_copy(update={"requests": 16}))
    assert set(statuses(report).values()) == {"pass"}, report.to_dict()
    salad = fake_engine("word-salad", "--protocol", "chat-only", "--max-model-len", str(CONTEXT))
    got = statuses(run_checks(Endpoint(salad.url, salad.model), expect(), checks=("smoke", "repetition")))
    assert got == {"smoke": "fail", "repetition": "fail"}


def test_the_answers_a_run_keeps_catch_a_drift_no_check_sees(fake_engine: Start, tmp_path: Path) -> None:
    """verify's fixed requests and their answers (what `verify --export` writes for a canary's --baseline),
    asked again: the same engine gives the same answers; switched to other words that are neither wrong nor
    looping (the test engine's "drift"), smoke, repetition and determinism still pass, and the baseline fails."""
    from rigctl.deploy.canary import compare_baseline
    from rigctl.verify.export import baseline_of, soak_export

    knob = tmp_path / "mode"
    engine = fake_engine("healthy", "--max-model-len", str(CONTEXT), "--mode-file", str(knob), "--port", "18455")
    endpoint = Endpoint(engine.url, engine.model)
    report = run_checks(endpoint, expect(), ("smoke", "repetition", "determinism"))
    assert report.ok, report.to_dict()
    sources = [a["source"] for a in report.answers]
    assert sources == ["smoke[0]", "repetition[0]", "repetition[1]", "repetition[2]", "determinism[0]"], sources
    doc = soak_export(report.checks[0], model=engine.model, base_url=engine.url, recipe="demo", recipe_source=None,
                      image=None, image_digest=None, gpus=[], gpu_note=None, version="rigctl 0",
                      answers=report.answers)
    base = baseline_of(json.loads(json.dumps(doc)), "export.json")

    async def compare() -> str | None:
        async with HttpEngine(endpoint, max_connections=2) as http:
            return await compare_baseline(http, base, 10.0)

    assert asyncio.run(compare()) is None
    knob.write_text("drift\n")
    assert run_checks(endpoint, expect(), ("smoke", "repetition", "determinism")).ok  # every check still passes
    changed = asyncio.run(compare())
    assert changed is not None and changed.startswith("repetition[0]: the answer changed"), changed
