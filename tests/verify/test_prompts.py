"""Needle prompts, scoring, sizing to a token count, and percentiles: no network."""

from __future__ import annotations

import asyncio
import re

from rigctl.verify.client import Completion, Endpoint, HttpAnswer, Request, percentile
from rigctl.verify.prompts import make_needles, needle_builder, score_needles, size_prompt

WORDS = re.compile(r"\w+|[^\w\s]")


class CountingEngine:
    """An EngineAPI whose tokenizer is words + punctuation (+1 BOS); ``tokenize=False`` hides /tokenize and
    leaves only usage figures, ``usage=False`` hides those too."""

    def __init__(self, *, tokenize: bool = True, usage: bool = True) -> None:
        self.endpoint = Endpoint("http://127.0.0.1:9", "m")
        self._tokenize, self._usage = tokenize, usage
        self.calls = 0

    @staticmethod
    def count(text: str) -> int:
        return len(WORDS.findall(text)) + 1

    async def get(self, path: str, *, timeout: float) -> HttpAnswer:
        return HttpAnswer(200, "", 0.0)

    async def models(self, *, timeout: float) -> list[dict[str, object]]:
        return []

    async def tokenize(self, prompt: str, *, timeout: float) -> int | None:
        self.calls += 1
        return self.count(prompt) if self._tokenize else None

    async def post_json(self, path: str, payload: dict[str, object], *, timeout: float, limit: int) -> HttpAnswer:
        return HttpAnswer(404, "", 0.0)

    async def complete(self, request: Request, *, timeout: float, idle_timeout: float | None = None) -> Completion:
        n = self.count(request.prompt or "") if self._usage else None
        return Completion("x", "stop", n, 1 if self._usage else None, 0.01)


def test_needles_are_placed_in_depth_order_and_scored_case_insensitively() -> None:
    needles = make_needles([0.5, 0.05, 0.95])
    assert [n.depth for n in needles] == [0.05, 0.5, 0.95]
    assert len({n.code for n in needles}) == 3
    text = needle_builder(needles)(200, 0)
    positions = [text.index(n.sentence) for n in needles]
    assert positions == sorted(positions)
    assert positions[0] < len(text) * 0.15 and positions[-1] > len(text) * 0.85
    answer = f"{needles[0].place}: {needles[0].code.upper()}\n{needles[2].place}: {needles[2].code}"
    found, missing = score_needles(answer, needles)
    assert found == [needles[0], needles[2]] and missing == [needles[1]]


def test_exact_sizing_with_a_server_tokenizer() -> None:
    engine = CountingEngine()
    build = needle_builder(make_needles([0.25, 0.75]))
    for target in (900, 5000, 20011):
        sized = asyncio.run(size_prompt(engine, build, target, timeout=5))
        assert sized.method == "tokenize"
        assert engine.count(sized.text) == sized.tokens
        assert target - 2 <= sized.tokens <= target


def test_usage_calibrated_estimate_stays_under_target() -> None:
    engine = CountingEngine(tokenize=False)
    sized = asyncio.run(size_prompt(engine, needle_builder(make_needles([0.5])), 8000, timeout=5))
    assert sized.method == "usage-calibrated"
    real = engine.count(sized.text)
    assert 0.9 * 8000 <= real <= 8000


def test_character_estimate_without_usage_is_conservative() -> None:
    engine = CountingEngine(tokenize=False, usage=False)
    sized = asyncio.run(size_prompt(engine, needle_builder(make_needles([0.5])), 8000, timeout=5))
    assert sized.method == "chars-estimate"
    assert engine.count(sized.text) <= 8000


def test_percentile_matches_linear_interpolation() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.5
    assert abs(percentile(values, 99) - 99.01) < 1e-9
    assert percentile([], 50) == 0.0
    assert percentile([3.0], 99) == 3.0
