"""verify.enginejson: the nesting it measures without recursion is the nesting json.loads would recurse into,
strings (and escapes in them) included; numbers come out bounded."""

from __future__ import annotations

import json
import random

import pytest

from rigctl.verify.enginejson import FIGURE_LIMIT, MAX_DEPTH, EngineJSONError, as_count, figure_text, parse


def depth(value: object) -> int:
    """The nesting of a parsed document, the reference (Python recursion: only shallow ones are asked)."""
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def document(rng: random.Random, levels: int) -> object:
    """A random document nesting exactly ``levels`` deep somewhere, with brackets, quotes and backslashes in
    its strings and keys."""
    if levels == 0:
        return rng.choice(['[{"', "a\\", '\\"]', "x", 1, None])
    inner = [document(rng, min(rng.randrange(levels), 2)) for _ in range(rng.randrange(3))]  # shallow siblings
    inner.insert(rng.randrange(len(inner) + 1), document(rng, levels - 1))
    if rng.random() < 0.5:
        return inner
    return {f"k{i}]\\\"{{": v for i, v in enumerate(inner)}


@pytest.mark.parametrize("seed", range(40))
def test_nesting_is_measured_as_json_nests(seed: int) -> None:
    rng = random.Random(seed)
    levels = rng.choice([MAX_DEPTH - 1, MAX_DEPTH, MAX_DEPTH + 1, rng.randrange(1, 3 * MAX_DEPTH)])
    data = document(rng, levels)
    assert depth(data) == levels
    text = json.dumps(data)
    if levels <= MAX_DEPTH:
        assert parse(text) == data
    else:
        with pytest.raises(EngineJSONError, match=f"nested deeper than {MAX_DEPTH} levels"):
            parse(text)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "[" * 100_000, '{"a":' * 70_000 + "1" + "}" * 70_000])
def test_deep_text_is_refused_plainly(text: str) -> None:
    with pytest.raises(EngineJSONError, match="nested deeper than"):
        parse(text, "the answer")


def test_numbers_are_bounded() -> None:
    got = parse('{"a": ' + "9" * 300 + ', "b": -' + "1" * 5000 + ', "c": 1e999, "d": NaN, "e": -Infinity, "f": 12}')
    assert got["b"] is None and got["c"] is None and got["d"] is None and got["e"] is None and got["f"] == 12
    assert isinstance(got["a"], float) and as_count(got["a"]) == FIGURE_LIMIT
    assert figure_text(as_count(got["a"]) or 0) == "over 10^12" and figure_text(131072) == "131,072"
    assert as_count(True) is None and as_count(-1) is None and as_count(4096.0) == 4096
    with pytest.raises(EngineJSONError, match="is not JSON"):
        parse("{not json")
