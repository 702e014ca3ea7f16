"""The loop detector: a pure function over one output text.

A broken model at temperature 0 does not answer nonsense at random; it loops. The story's engine answered
``the capital France capital France ...`` to every prompt. Three shapes of loop are looked for, the same
three the seed deployment's own scripts used:

- a subword repeated back to back (``locklocklocklocklocklocklocklock``): ``([A-Za-z]{2,32})(?:\\1){7,}``;
- one character repeated 32 times or more (``!!!!!!!!...``): ``([^\\s])\\1{31,}``;
- a word n-gram (n = 2..8) occurring at least 12 times and covering at least 60% of the output's words.

Ordinary prose repeats words, but no n-gram of two or more words covers most of it, and no word is glued
to itself eight times.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import Literal

SUBWORD_RE = re.compile(r"([A-Za-z]{2,32})(?:\1){7,}")
CHAR_RE = re.compile(r"([^\s])\1{31,}")
WORD_RE = re.compile(r"\w+", re.UNICODE)

NGRAM_MIN = 2
NGRAM_MAX = 8
NGRAM_MIN_COUNT = 12
NGRAM_MIN_COVERAGE = 0.60

EXCERPT_CHARS = 80


@dataclass(frozen=True)
class RepetitionFinding:
    """Why an output counts as a loop."""

    kind: Literal["subword", "char", "ngram"]
    unit: str  # the repeated subword, character or n-gram
    count: int  # how many times it repeats
    coverage: float  # share of the output (characters for subword/char, words for ngram) the loop covers
    excerpt: str

    def describe(self) -> str:
        if self.kind == "ngram":
            return (
                f"the {len(self.unit.split())}-word phrase {self.unit!r} repeats {self.count} times "
                f"and covers {self.coverage:.0%} of the output"
            )
        what = "subword" if self.kind == "subword" else "character"
        return f"the {what} {self.unit!r} repeats {self.count} times back to back"


def _excerpt(text: str, start: int) -> str:
    return text[start : start + EXCERPT_CHARS]


def detect_repetition(text: str) -> RepetitionFinding | None:
    """Return the first loop found in ``text``, or None for text that does not loop."""
    if not text:
        return None
    match = SUBWORD_RE.search(text)
    if match:
        unit = match.group(1)
        return RepetitionFinding(
            "subword", unit, len(match.group(0)) // len(unit), len(match.group(0)) / len(text),
            _excerpt(text, match.start()),
        )
    match = CHAR_RE.search(text)
    if match:
        return RepetitionFinding(
            "char", match.group(1), len(match.group(0)), len(match.group(0)) / len(text),
            _excerpt(text, match.start()),
        )
    return _ngram_dominance(text)


def _ngram_dominance(text: str) -> RepetitionFinding | None:
    words = [m.group(0).lower() for m in WORD_RE.finditer(text)]
    total = len(words)
    if total < NGRAM_MIN * NGRAM_MIN_COUNT:
        return None  # too short for 12 repeats of even a 2-gram
    best: RepetitionFinding | None = None
    for n in range(NGRAM_MIN, NGRAM_MAX + 1):
        if n * NGRAM_MIN_COUNT > total:
            break
        grams = Counter(tuple(words[i : i + n]) for i in range(total - n + 1))
        for gram, count in grams.most_common(3):
            if count < NGRAM_MIN_COUNT:
                break
            covered = _covered_positions(words, gram)
            coverage = covered / total
            if coverage >= NGRAM_MIN_COVERAGE and (best is None or coverage > best.coverage):
                phrase = " ".join(gram)
                start = text.lower().find(gram[0])
                best = RepetitionFinding("ngram", phrase, count, coverage, _excerpt(text, max(start, 0)))
    return best


def _covered_positions(words: list[str], gram: tuple[str, ...]) -> int:
    """Word positions inside any occurrence of ``gram`` (overlaps counted once)."""
    n = len(gram)
    covered = [False] * len(words)
    for i in range(len(words) - n + 1):
        if tuple(words[i : i + n]) == gram:
            for j in range(i, i + n):
                covered[j] = True
    return sum(covered)
