"""Each engine dialect, spoken to the test engine's flavour of that engine (a real subprocess on 127.0.0.1):
detected, its tokenizer used, its per-request context learnt, and nothing sent that the engine must refuse."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Callable

import pytest

from rigctl.errors import UsageError
from rigctl.recipe.load import load
from rigctl.recipe.model import SoakSettings
from rigctl.verify import Endpoint, Expectations, run_checks
from rigctl.verify.client import Completion, HttpAnswer, HttpEngine, Request
from rigctl.verify.dialects import LlamaCpp, Vllm, detect
from rigctl.verify.prompts import make_needles, needle_builder, prefix_builder, size_prompt
from rigctl.verify.report import VerifyReport

from .conftest import FakeEngine

Start = Callable[..., FakeEngine]
SOAK = SoakSettings(concurrency=8, requests=16, prefix_tokens=2048, max_tokens=64, timeout_s=60)


def expect(**changes: object) -> Expectations:
    base: dict[str, object] = {"soak": SOAK, "request_timeout_s": 10.0, "health_timeout_s": 5.0}
    base.update(changes)
    return Expectations(**base)  # type: ignore[arg-type]


def statuses(report: VerifyReport) -> dict[str, str]:
    return {c.id: c.status for c in report.checks}


def refused(engine: FakeEngine) -> list[str]:
    """The engine's access-log lines for requests it refused (4xx other than the 404s of probed routes)."""
    return [line for line in engine.stdout.read_text().splitlines()
            if 'HTTP/1.1" 4' in line and 'HTTP/1.1" 404' not in line]


@pytest.mark.parametrize(("protocol", "dialect", "label", "source"), [
    ("vllm", "vllm", "max_model_len", "GET /v1/models max_model_len"),
    ("sglang", "sglang", "max_model_len", "GET /v1/models max_model_len"),
    ("tabbyapi", "tabbyapi", "max_seq_len", "GET /v1/model parameters.max_seq_len"),
    ("llamacpp", "llamacpp", "n_ctx per slot", "GET /props default_generation_settings.n_ctx"),
])
def test_each_dialect_is_detected_and_sized_exactly(fake_engine: Start, protocol: str, dialect: str, label: str,
                                                    source: str) -> None:
    engine = fake_engine("healthy", "--protocol", protocol, "--max-model-len", "4096")
    report = run_checks(Endpoint(engine.url, engine.model), expect(context=4096))
    assert set(statuses(report).values()) == {"pass"}, report.to_dict()
    assert report.engine["dialect"] == dialect and report.engine["detection"] == "detected"
    assert report.engine["served_context"] == 4096 and source in report.engine["context_source"]
    for check in report.checks:  # every check says which dialect and which context it used
        assert check.figures["dialect"] == dialect and check.figures["context"] == 4096, check
    models, needle, soak = report.get("models"), report.get("needle"), report.get("soak")
    assert models is not None and f"{label} 4,096" in models.message
    assert needle is not None and needle.figures["sizing"] == "tokenize"  # the engine's own tokenizer
    assert needle.figures["prompt_tokens"] == 4096 - 64
    assert soak is not None and soak.figures["prefix_sizing"] == "tokenize" and soak.figures["failed"] == 0
    assert refused(engine) == []


def test_llamacpp_context_split_over_slots_is_a_finding_not_a_refused_request(fake_engine: Start) -> None:
    """The issue's case: -c 4096 over 4 slots serves 1,024 tokens a request. Expecting 4,096 fails `models`
    with both numbers; the needle and the soak fit 1,024 and the engine refuses nothing."""
    engine = fake_engine("healthy", "--protocol", "llamacpp", "--max-model-len", "4096", "--parallel", "4")
    report = run_checks(Endpoint(engine.url, engine.model), expect(context=4096, soak=SOAK.model_copy(
        update={"max_tokens": 256})))
    got = statuses(report)
    assert got["models"] == "fail" and report.get("models") is not None
    message = report.checks[1].message
    assert "1,024 tokens per request" in message and "4,096" in message and "4 slots" in message
    assert report.checks[1].figures["slots"] == 4 and report.checks[1].figures["total_context"] == 4096
    for check in ("health", "smoke", "repetition", "determinism", "needle"):
        assert got[check] == "pass", report.to_dict()
    needle = report.get("needle")
    assert needle is not None and needle.figures["context"] == 1024
    assert needle.figures["prompt_tokens"] == 1024 - 64 and needle.figures["sizing"] == "tokenize"
    assert needle.figures["tokenizer"] == 'POST /tokenize {"content"}'
    soak = report.get("soak")
    assert soak is not None and soak.status == "warn", soak  # a 1,024-token context cannot hold 2,000
    assert soak.figures["failed"] == 0 and soak.figures["context"] == 1024
    assert soak.figures["prefix_tokens"] + 256 + 64 <= 1024
    assert refused(engine) == []  # no request the engine could not take


def test_llamacpp_tokenize_sent_vllms_shape_is_not_read_as_zero_tokens(fake_engine: Start) -> None:
    """llama-server answers {"prompt": ...} at /tokenize with {"tokens": []}: read as "0 tokens", the prompt
    grew without end. Counted through vLLM's dialect, that count is refused and the length estimated."""
    engine = fake_engine("healthy", "--protocol", "llamacpp", "--max-model-len", "4096", "--parallel", "4")

    async def go() -> tuple[int | None, str | None, str, Completion]:
        async with HttpEngine(Endpoint(engine.url, engine.model)) as client:
            zero = await Vllm().count(client, "hello world", timeout=5)

            async def as_vllm(text: str) -> int | None:
                return await Vllm().count(client, text, timeout=5)

            sized = await size_prompt(client, needle_builder(make_needles([0.5])), 900, timeout=5, count=as_vllm)
            done = await client.complete(Request(64, prompt=sized.text), timeout=10)
        return zero, sized.note, sized.method, done

    zero, note, method, done = asyncio.run(go())
    assert zero == 0  # what the engine answers
    assert note is not None and "0 tokens" in note and "not believed" in note
    assert method == "usage-calibrated"
    assert done.prompt_tokens is not None and done.prompt_tokens <= 900  # fits: no 400
    assert refused(engine) == []


def test_llamacpp_counts_with_content_and_bos(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--protocol", "llamacpp", "--max-model-len", "2048", "--parallel", "2")

    async def go() -> tuple[int | None, Completion, object]:
        async with HttpEngine(Endpoint(engine.url, engine.model)) as client:
            text = "The capital of France is"
            counted = await LlamaCpp().count(client, text, timeout=5)
            done = await client.complete(Request(4, prompt=text), timeout=5)
            limit = await LlamaCpp().context(client, None, timeout=5)
        return counted, done, limit

    counted, done, limit = asyncio.run(go())
    assert counted == done.prompt_tokens == 6  # five words and the BOS a completion gets
    assert limit is not None and getattr(limit, "tokens", None) == 1024 and getattr(limit, "slots", None) == 2


def test_named_engine_that_is_another_fails_models_and_speaks_the_real_one(fake_engine: Start) -> None:
    """The recipe says vLLM (engine.kind), a llama-server answers: a finding, and verify speaks llama.cpp."""
    engine = fake_engine("healthy", "--protocol", "llamacpp", "--max-model-len", "4096", "--parallel", "4")
    report = run_checks(Endpoint(engine.url, engine.model), expect(engine="vllm"),
                        checks=("health", "models", "needle"))
    models = report.get("models")
    assert models is not None and models.status == "fail"
    assert "expected a vllm engine" in models.message and "llamacpp" in models.message
    assert report.engine["dialect"] == "llamacpp" and report.engine["expected"] == "vllm"
    assert statuses(report)["needle"] == "pass" and refused(engine) == []


def test_named_engine_is_probed_first_and_confirmed(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--protocol", "tabbyapi", "--max-model-len", "4096")
    report = run_checks(Endpoint(engine.url, engine.model), expect(engine="tabbyapi"), checks=("models",))
    assert statuses(report) == {"models": "pass"}
    assert report.engine["dialect"] == "tabbyapi" and report.engine["detection"] == "named"


def test_plain_openai_server_is_estimated_then_calibrated(fake_engine: Start) -> None:
    """transformers serve's shape: no tokenizer, no context listed; --context given, usage calibrates."""
    engine = fake_engine("healthy", "--protocol", "minimal", "--max-model-len", "4096")
    report = run_checks(Endpoint(engine.url, engine.model), expect(context=4096),
                        checks=("health", "models", "needle", "soak"))
    assert set(statuses(report).values()) == {"pass"}, report.to_dict()
    assert report.engine["dialect"] == "openai" and report.engine["tokenizer"] is None
    needle = report.get("needle")
    assert needle is not None and needle.figures["sizing"] == "usage-calibrated"
    assert needle.figures["dialect"] == "openai" and needle.figures["context"] == 4096
    assert refused(engine) == []


def test_openai_named_sends_no_probe(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--protocol", "llamacpp", "--max-model-len", "4096")
    report = run_checks(Endpoint(engine.url, engine.model), expect(engine="openai", context=1024),
                        checks=("models", "needle"))
    assert report.engine["dialect"] == "openai" and report.engine["detection"] == "named"
    log = engine.stdout.read_text()
    assert "/props" not in log and "/tokenize" not in log and "/v1/model " not in log
    assert statuses(report)["needle"] == "pass" and refused(engine) == []


def test_detection_against_each_flavour(fake_engine: Start) -> None:
    expected = {"vllm": "vllm", "chat-only": "vllm", "sglang": "sglang", "llamacpp": "llamacpp",
                "tabbyapi": "tabbyapi", "minimal": "openai"}
    found: dict[str, str] = {}
    for protocol in expected:
        engine = fake_engine("healthy", "--protocol", protocol)

        async def go(url: str, model: str) -> str:
            async with HttpEngine(Endpoint(url, model)) as client:
                entries = await client.models(timeout=5)
                return (await detect(client, entries[0], timeout=5)).dialect.name

        found[protocol] = asyncio.run(go(engine.url, engine.model))
    assert found == expected


class ShrinkingCounter:
    """A tokenizer endpoint that counts fewer tokens the longer the text (or none at all)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.endpoint = Endpoint("http://127.0.0.1:9", "m")

    async def count(self, text: str) -> int | None:
        return 0 if self.mode == "zero" else max(10_000 - len(text), 1)

    async def get(self, path: str, *, timeout: float) -> HttpAnswer:
        return HttpAnswer(404, "", 0.0)

    async def models(self, *, timeout: float) -> list[dict[str, object]]:
        return []

    async def tokenize(self, prompt: str, *, timeout: float) -> int | None:
        return None

    async def post_json(self, path: str, payload: dict[str, object], *, timeout: float, limit: int) -> HttpAnswer:
        return HttpAnswer(404, "", 0.0)

    async def complete(self, request: Request, *, timeout: float, idle_timeout: float | None = None) -> Completion:
        return Completion("x", "stop", len((request.prompt or "").split()) + 1, 1, 0.01)


@pytest.mark.parametrize(("mode", "why"), [("zero", "0 tokens"), ("shrinking", "cannot have fewer tokens")])
def test_impossible_counts_fall_back_to_the_estimate(mode: str, why: str) -> None:
    engine = ShrinkingCounter(mode)
    sized = asyncio.run(size_prompt(engine, prefix_builder("notes: "), 3000, timeout=5, count=engine.count))
    assert sized.method == "usage-calibrated" and sized.note is not None and why in sized.note
    assert len(sized.text.split()) <= 3000  # estimated to the target, not grown on a count that never rises


def test_cli_engine_option(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--protocol", "llamacpp", "--max-model-len", "4096", "--parallel", "4")
    env = {**os.environ, "NO_COLOR": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "rigctl", "verify", "--url", engine.url, "--model", engine.model, "--engine",
         "llamacpp", "--checks", "health,models,needle", "--json"],
        capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["engine"]["dialect"] == "llamacpp" and doc["engine"]["served_context"] == 1024
    assert all(c["figures"]["dialect"] == "llamacpp" for c in doc["checks"])
    human = subprocess.run(
        [sys.executable, "-m", "rigctl", "verify", "--url", engine.url, "--model", engine.model,
         "--checks", "models"], capture_output=True, text=True, timeout=120,
        env={**env, "COLUMNS": "160"}, check=False)
    assert "engine: llamacpp (detected); context 1,024 tokens per request" in human.stdout, human.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "rigctl", "verify", "--url", engine.url, "--model", engine.model, "--engine", "ollama",
         "--json"], capture_output=True, text=True, timeout=60, check=False)
    assert bad.returncode == 2 and "ollama" in json.loads(bad.stdout)["error"]["message"]


def test_unknown_engine_name_is_a_usage_error() -> None:
    with pytest.raises(UsageError):
        Expectations(engine="ollama")
    assert Expectations.from_recipe(load("qwen3-8b-vllm").recipe).engine == "vllm"  # the recipe's engine.kind
