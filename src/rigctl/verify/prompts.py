"""Long prompts made to measure: filler prose, needles at chosen depths, and sizing to a token count.

Sizing uses the server's own tokenizer (each engine's, see ``dialects``) when it has one, so the needle prompt
lands exactly where it should; otherwise it calibrates on two short probes' ``usage.prompt_tokens`` and
keeps a safety margin; with no usage either, it assumes three characters per token (more tokens than
English prose needs, so the prompt comes out short rather than rejected).

A count no tokenizer gives is not believed: zero tokens for text, fewer tokens for a longer prompt, or no more
for 64 more sentences means the endpoint did not understand the request (llama.cpp answers vLLM's shape with
an empty list). Sizing then falls back to the estimate and says why (``Sized.note``), rather than growing the
prompt until the engine refuses it.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from rigctl.verify.client import EngineAPI, Request

_SUBJECTS = (
    "The ferryman", "A surveyor", "The night clerk", "An old beekeeper", "The cartographer", "A young pilot",
    "The harbor master", "A botanist", "The lighthouse keeper", "A locksmith", "The archivist", "A glassblower",
    "The miller", "A tailor", "The river guide", "A violin maker", "The stationmaster", "A weaver",
)
_VERBS = (
    "repaired", "counted", "painted", "measured", "carried", "described", "sorted", "polished", "mapped",
    "photographed", "catalogued", "sketched", "weighed", "mended", "inspected", "labelled",
)
_OBJECTS = (
    "the copper kettles", "a crate of pears", "the broken compass", "three wooden chairs", "the tide tables",
    "a bundle of letters", "the brass telescope", "an atlas of rivers", "the winter coats", "a jar of honey",
    "the garden gate", "two rusty lanterns", "the stone steps", "a box of seeds", "the signal flags",
)
_PLACES = (
    "near the old mill", "behind the granary", "by the northern pier", "in the chapel loft", "beside the canal",
    "under the railway bridge", "on the hill road", "at the edge of the orchard", "inside the boathouse",
    "next to the quarry", "along the salt marsh", "in the market square",
)
_TIMES = (
    "before dawn", "on a rainy Tuesday", "late in the autumn", "just after noon", "during the fair",
    "at the turn of the tide", "one quiet evening", "in early spring", "while the bells rang", "after supper",
)
_PAD_WORDS = ("and", "then", "slowly", "again", "still", "later", "quietly", "there")

_NEEDLE_PLACES = (
    "Oslo", "Lima", "Cairo", "Quito", "Dakar", "Hanoi", "Perth", "Tunis", "Sofia", "Riga", "Bern", "Accra",
    "Minsk", "Doha", "Baku", "Male", "Suva", "Apia", "Nuuk", "Kabul",
)
_CODE_WORDS = (
    "amber", "basalt", "cinder", "dahlia", "ember", "fjord", "garnet", "heron", "indigo", "jasper", "kelp",
    "lichen", "magpie", "nectar", "onyx", "pumice", "quartz", "raven", "sorrel", "tansy",
)

FALLBACK_CHARS_PER_TOKEN = 3.0
MAX_CHARS_PER_TOKEN = 16  # filler sentences built per target token at most, whatever the counts say
ESTIMATE_MARGIN = 0.97  # aim 3% short when the length is only estimated: a rejected prompt tests nothing


def filler_sentences(count: int, *, seed: int = 1729) -> list[str]:
    """Deterministic, varied, harmless prose: no sentence carries a code, a number or an instruction."""
    rng = random.Random(seed)
    return [
        f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} {rng.choice(_PLACES)} "
        f"{rng.choice(_TIMES)}."
        for _ in range(count)
    ]


class FillerPool:
    """Grows the deterministic filler list on demand (a 1M-token prompt needs about 60,000 sentences)."""

    def __init__(self, seed: int = 1729) -> None:
        self._seed = seed
        self._sentences: list[str] = []

    def take(self, count: int) -> list[str]:
        if count > len(self._sentences):
            self._sentences = filler_sentences(max(count, 2 * len(self._sentences), 256), seed=self._seed)
        return self._sentences[:count]


def pad_text(words: int) -> str:
    return " ".join(_PAD_WORDS[i % len(_PAD_WORDS)] for i in range(words))


@dataclass(frozen=True)
class Needle:
    place: str
    code: str
    depth: float  # 0..1, share of the filler before it

    @property
    def sentence(self) -> str:
        return f"The access code for the {self.place} archive is {self.code}."


def make_needles(depths: Sequence[float], *, seed: int = 4242) -> list[Needle]:
    rng = random.Random(seed)
    needles = []
    for i, depth in enumerate(sorted(depths)):
        place = _NEEDLE_PLACES[i % len(_NEEDLE_PLACES)] + ("" if i < len(_NEEDLE_PLACES) else str(i))
        code = f"{rng.choice(_CODE_WORDS)}-{rng.randrange(1000, 10000)}"
        needles.append(Needle(place, code, depth))
    return needles


def needle_builder(needles: Sequence[Needle]) -> Callable[[int, int], str]:
    """``build(k, pad)``: the needle prompt with k filler sentences and ``pad`` extra filler words."""
    places = ", ".join(n.place for n in needles)
    intro = (
        f"Below is a long collection of notes. Hidden in it are {len(needles)} access codes, one for each of "
        f"these archives: {places}. Read everything; you will be asked for every code.\n\n"
    )
    question = (
        f"\n\nQuestion: what is the access code for each archive ({places})? Answer with one line per archive, "
        "written as archive: code.\nAnswer:"
    )
    pool = FillerPool()

    def build(k: int, pad: int) -> str:
        sentences = list(pool.take(k))
        for needle in sorted(needles, key=lambda n: n.depth, reverse=True):
            sentences.insert(round(needle.depth * k), needle.sentence)
        body = " ".join(sentences)
        if pad > 0:
            body += " " + pad_text(pad) + "."
        return intro + body + question

    return build


def prefix_builder(header: str) -> Callable[[int, int], str]:
    """``build(k, pad)``: a shared system prefix of k filler sentences (the soak's agent context)."""
    pool = FillerPool(seed=99)

    def build(k: int, pad: int) -> str:
        body = " ".join(pool.take(k))
        if pad > 0:
            body += " " + pad_text(pad) + "."
        return header + body

    return build


@dataclass(frozen=True)
class Sized:
    text: str
    tokens: int  # counted by the server, or estimated
    method: str  # "tokenize" (exact, from the server), "usage-calibrated" or "chars-estimate"
    sentences: int
    note: str | None = None  # why the server's tokenizer was not used, when it has one


Counter = Callable[[str], Awaitable[int | None]]  # the engine's token count for a prompt, None: cannot count


class ImpossibleCount(Exception):
    """The tokenizer endpoint answered a count no tokenizer gives: it did not understand the request."""


class _Checked:
    """The counts one sizing saw, each checked against the others: a much longer prompt never has fewer tokens,
    and text never has none."""

    def __init__(self, count: Counter) -> None:
        self._count = count
        self._seen: list[tuple[int, int]] = []  # (characters, tokens)

    async def __call__(self, text: str) -> int | None:
        n = await self._count(text)
        if n is None:
            if self._seen:  # it counted a moment ago: an endpoint that stops answering is no tokenizer either
                raise ImpossibleCount(f"the tokenizer stopped answering after {len(self._seen)} count(s)")
            return None
        if n == 0 and text.strip():
            raise ImpossibleCount(f"the tokenizer counted 0 tokens in {len(text):,} characters of text")
        for chars, tokens in self._seen:
            # A quarter longer at least: pad words and sentences differ in characters per token, so two
            # prompts of nearly one length may count either way round.
            if len(text) > 1.25 * chars and n < tokens:
                raise ImpossibleCount(f"the tokenizer counted {n:,} tokens in {len(text):,} characters but {tokens:,} "
                                      f"in {chars:,}: a longer prompt cannot have fewer tokens")
        self._seen.append((len(text), n))
        return n


async def size_prompt(
    engine: EngineAPI,
    build: Callable[[int, int], str],
    target: int,
    *,
    timeout: float,
    margin: float = ESTIMATE_MARGIN,
    count: Counter | None = None,
) -> Sized:
    """Find the longest ``build(k, pad)`` whose token count is at most ``target``. ``count`` is the engine's
    tokenizer (default: vLLM's /tokenize through ``engine.tokenize``). Where the server cannot count tokens,
    or counts impossibly, aim at ``target * margin`` (below 1: stay safely short; above 1: make sure to reach
    it) on an estimate."""
    base = build(0, 0)
    # The calibration sample is a request of its own where usage calibrates the estimate: it must fit a small
    # context too. At most half the target by a cautious character estimate, 64 sentences at most.
    per_sentence = max(len(build(8, 0)) - len(base), 8) / 8
    sample_k = max(min(64, int(target / 2 * FALLBACK_CHARS_PER_TOKEN / per_sentence)), 4)
    sample = build(sample_k, 0)
    # The server's counts steer how long a prompt gets built; a count no tokenizer would give (a handful of
    # tokens for megabytes) must not make it build gigabytes. No prompt gets more than MAX_CHARS_PER_TOKEN
    # characters of sentences per target token (filler English is about four), plus at most one pad word
    # (8 characters or fewer) per target token.
    k_max = max(int((MAX_CHARS_PER_TOKEN * target - len(base)) / ((len(sample) - len(base)) / sample_k)), 0)
    if count is None:
        async def by_engine(text: str) -> int | None:
            return await engine.tokenize(text, timeout=timeout)
        count = by_engine
    checked = _Checked(count)
    note: str | None = None
    try:
        base_n = await checked(base)
        if base_n is not None:
            sample_n = await checked(sample)
            if sample_n is not None and sample_n <= base_n:
                raise ImpossibleCount(f"the tokenizer counted no more tokens ({sample_n:,}) for {sample_k} more "
                                      f"sentences than without them ({base_n:,})")
            assert sample_n is not None  # _Checked raises when a tokenizer that answered stops answering
            per = max((sample_n - base_n) / sample_k, 1.0)
            return await _fit_exact(checked, build, target, base_n, per, k_max=k_max)
    except ImpossibleCount as exc:
        note = f"{exc}; not believed, the length is estimated instead"
    sized = await _fit_estimate(engine, build, target, base=base, sample=sample, sample_k=sample_k,
                                timeout=timeout, margin=margin, k_max=k_max)
    return Sized(sized.text, sized.tokens, sized.method, sized.sentences, note)


async def _fit_exact(
    checked: _Checked, build: Callable[[int, int], str], target: int, base_n: int, per: float, *, k_max: int,
) -> Sized:
    k = min(max(int((target - base_n) / per), 0), k_max)
    best: tuple[int, int, int] | None = None  # (tokens, k, pad)

    async def count(k: int, pad: int) -> int:
        n = await checked(build(k, pad))
        assert n is not None  # _Checked raises when a tokenizer that answered stops answering
        return n

    for _ in range(10):  # coarse: whole sentences
        n = await count(k, 0)
        if n <= target and (best is None or n > best[0]):
            best = (n, k, 0)
        if n > target:
            k = max(k - max(math.ceil((n - target) / per), 1), 0)
        elif target - n >= per and k < k_max:
            k = min(k + max(int((target - n) / per), 1), k_max)
        else:
            break
    if best is None:
        raise ValueError(f"even the bare prompt ({base_n} tokens) exceeds the target of {target} tokens")
    n, k, pad = best
    for _ in range(8):  # fine: single filler words, about one token each
        if n == target:
            break
        pad = min(max(pad + (target - n), 0), target)  # a filler word is at least one token
        m = await count(k, pad)
        if m <= target and m > best[0]:
            best = (m, k, pad)
        if m == n and m < target:
            break  # a word added nothing measurable; stop chasing
        n = m
    n, k, pad = best
    return Sized(build(k, pad), n, "tokenize", k)


async def _fit_estimate(
    engine: EngineAPI,
    build: Callable[[int, int], str],
    target: int,
    *,
    base: str,
    sample: str,
    sample_k: int,
    timeout: float,
    margin: float,
    k_max: int,
) -> Sized:
    base_n = await _usage_tokens(engine, base, timeout)
    sample_n = await _usage_tokens(engine, sample, timeout) if base_n is not None else None
    if base_n is not None and sample_n is not None and sample_n > base_n:
        per = (sample_n - base_n) / sample_k
        method = "usage-calibrated"
    else:
        per = (len(sample) - len(base)) / sample_k / FALLBACK_CHARS_PER_TOKEN
        base_n = math.ceil(len(base) / FALLBACK_CHARS_PER_TOKEN)
        method = "chars-estimate"
    k = min(max(int((target * margin - base_n) / per), 0), k_max)
    return Sized(build(k, 0), int(base_n + k * per), method, k)


async def _usage_tokens(engine: EngineAPI, prompt: str, timeout: float) -> int | None:
    done = await engine.complete(Request(max_tokens=1, prompt=prompt), timeout=timeout)
    return done.prompt_tokens


def score_needles(answer: str, needles: Sequence[Needle]) -> tuple[list[Needle], list[Needle]]:
    """(found, missing): a needle counts as found when its code appears in the answer, case-insensitive."""
    low = answer.lower()
    found = [n for n in needles if n.code.lower() in low]
    missing = [n for n in needles if n.code.lower() not in low]
    return found, missing
