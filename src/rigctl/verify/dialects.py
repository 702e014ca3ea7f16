"""Engine dialects: what each engine verify talks to calls its tokenizer and where it says how long one request
may be. The OpenAI API (/v1/models, /v1/completions, /v1/chat/completions) is common to all; these two facts are
not, and guessing them wrong either tests nothing or sends requests the engine must refuse.

One class per engine, listed in ``DIALECTS`` (adding an engine is one class and one line there):

- vllm: /v1/models says ``owned_by: vllm``; counts with POST /tokenize ``{"prompt"}`` (``count``); one request
  holds /v1/models ``max_model_len``.
- sglang: GET /get_model_info answers ``model_path``; counts as vLLM does; /v1/models ``max_model_len``.
- llamacpp: GET /props answers ``default_generation_settings``; counts with POST /tokenize ``{"content"}``
  (``tokens``); one request holds one slot: /props ``default_generation_settings.n_ctx`` (``-c`` split over
  ``total_slots``).
- tabbyapi: GET /v1/model answers ``parameters.max_seq_len``, which is what one request holds; counts with
  POST /v1/token/encode ``{"text"}`` (``length``).
- openai: none of the above answered; no tokenizer (the length is estimated and calibrated on one probe's
  ``usage.prompt_tokens``), context only where /v1/models lists ``max_model_len``.

A probe is one cheap GET (or nothing, for vLLM's ``owned_by``) whose answer only that engine gives. Counts are
checked by the caller (``prompts.size_prompt``): an engine that answers a shape it was not asked in (llama.cpp
sent vLLM's ``{"prompt"}`` answers ``{"tokens": []}``) must not be read as "0 tokens"."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from rigctl.recipe.defaults import MAX_CONTEXT
from rigctl.verify.client import EngineAPI, EngineRequestError, listed_context, tokenize_limit
from rigctl.verify.enginejson import EngineJSONError, as_count, figure_text, parse, parse_or_none


@dataclass(frozen=True)
class ContextLimit:
    """The most tokens (prompt and output together) one request may hold, and where the engine said so."""

    tokens: int
    source: str  # e.g. "GET /props default_generation_settings.n_ctx"
    slots: int | None = None  # llama.cpp: parallel slots the context is split over
    total: int | None = None  # llama.cpp: the whole context (-c) before the split, when it is known

    def describe(self) -> str:
        split = f"; {figure_text(self.total)} over {figure_text(self.slots)} slots" if self.slots and self.total \
            else (f"; {figure_text(self.slots)} slots" if self.slots else "")
        return f"{figure_text(self.tokens)} tokens per request ({self.source}{split})"


async def _get_json(engine: EngineAPI, path: str, timeout: float, *, strict: bool = False) -> Any:
    """The JSON of a 200 answer, or None for any other answer. Timeouts and refused connections propagate: an
    engine that does not answer cannot be told apart from one of another dialect. A 200 answer that is not
    JSON rigctl reads is None for a probe (not this engine), and with ``strict`` (the dialect that answered,
    asked for its figures) EngineRequestError ``protocol``, which the models check reports."""
    answer = await engine.get(path, timeout=timeout)
    if answer.status != 200:
        return None
    if not strict:
        return parse_or_none(answer.body)
    try:
        return parse(answer.body, "the answer")
    except EngineJSONError as exc:
        raise EngineRequestError("protocol", f"GET {path}: {exc}") from None


class Dialect:
    """The plain OpenAI API: no tokenizer, context only where /v1/models lists ``max_model_len``."""

    name: ClassVar[str] = "openai"
    owner: ClassVar[str | None] = None  # the /v1/models ``owned_by`` this engine writes
    tokenizer: ClassVar[str | None] = None  # how it counts tokens, as figures show it
    context_label: ClassVar[str] = "max_model_len"

    async def probe(self, engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float) -> bool:
        """True when the server answers as this engine does (cheap: at most one GET)."""
        return entry is not None and self.owner is not None and entry.get("owned_by") == self.owner

    async def count(self, engine: EngineAPI, text: str, *, timeout: float) -> int | None:
        """The engine's own token count for ``text`` as a completion prompt (special tokens included), or None
        when it has no tokenizer endpoint or answered something that is not a count."""
        return None

    async def context(self, engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float) -> ContextLimit | None:
        value = listed_context(entry)
        return ContextLimit(value, "GET /v1/models max_model_len") if value else None


class Vllm(Dialect):
    name = "vllm"
    owner = "vllm"
    tokenizer = 'POST /tokenize {"prompt"}'

    async def count(self, engine: EngineAPI, text: str, *, timeout: float) -> int | None:
        return await engine.tokenize(text, timeout=timeout)


class Sglang(Vllm):
    """SGLang: vLLM's /tokenize and max_model_len (its /tokenize's own max_model_len is the tokenizer's
    model_max_length, not what is served: only /v1/models is read)."""

    name = "sglang"
    owner = "sglang"

    async def probe(self, engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float) -> bool:
        if await super().probe(engine, entry, timeout=timeout):
            return True
        info = await _get_json(engine, "/get_model_info", timeout)
        return isinstance(info, dict) and isinstance(info.get("model_path"), str)


class LlamaCpp(Dialect):
    """llama.cpp's llama-server: /tokenize takes ``content`` (``prompt`` is ignored and answered with an empty
    list), and the context a request gets is one slot's: ``-c`` divided by ``--parallel``."""

    name = "llamacpp"
    owner = "llamacpp"
    tokenizer = 'POST /tokenize {"content"}'
    context_label = "n_ctx per slot"

    async def probe(self, engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float) -> bool:
        props = await _get_json(engine, "/props", timeout)
        return isinstance(props, dict) and isinstance(props.get("default_generation_settings"), dict)

    async def count(self, engine: EngineAPI, text: str, *, timeout: float) -> int | None:
        # add_special: the BOS a completion prompt gets, so that the count is the prompt's.
        answer = await engine.post_json("/tokenize", {"content": text, "add_special": True}, timeout=timeout,
                                        limit=tokenize_limit(text))
        data = _counted(answer.status, answer.body, "/tokenize")
        tokens = data.get("tokens") if isinstance(data, dict) else None
        return len(tokens) if isinstance(tokens, list) else None

    async def context(self, engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float) -> ContextLimit | None:
        props = await _get_json(engine, "/props", timeout, strict=True)
        if not isinstance(props, dict):
            return None
        settings = props.get("default_generation_settings")
        per_slot = as_count(settings.get("n_ctx")) if isinstance(settings, dict) else None
        slots = as_count(props.get("total_slots"))
        source = "GET /props default_generation_settings.n_ctx"
        if not per_slot:
            listed = await _get_json(engine, "/slots", timeout, strict=True)  # older servers: each slot's n_ctx
            first = listed[0] if isinstance(listed, list) and listed else None
            per_slot = as_count(first.get("n_ctx")) if isinstance(first, dict) else None
            slots = slots or (len(listed) if isinstance(listed, list) else None)
            source = "GET /slots n_ctx"
        if not per_slot:
            return None
        total = per_slot * slots if slots and slots > 1 and per_slot * slots <= MAX_CONTEXT else None
        return ContextLimit(per_slot, source, slots=slots, total=total)


class TabbyApi(Dialect):
    """TabbyAPI: its own token endpoint, and the loaded model's card at /v1/model (/v1/models lists the model
    folder, loaded or not)."""

    name = "tabbyapi"
    owner = "tabbyAPI"
    tokenizer = 'POST /v1/token/encode {"text"}'
    context_label = "max_seq_len"

    async def probe(self, engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float) -> bool:
        return await self._max_seq_len(engine, timeout) is not None

    async def count(self, engine: EngineAPI, text: str, *, timeout: float) -> int | None:
        answer = await engine.post_json("/v1/token/encode", {"text": text, "add_bos_token": True}, timeout=timeout,
                                        limit=tokenize_limit(text))
        data = _counted(answer.status, answer.body, "/v1/token/encode")
        if not isinstance(data, dict):
            return None
        tokens = data.get("tokens")
        return as_count(data.get("length")) if "length" in data else (
            len(tokens) if isinstance(tokens, list) else None)

    async def context(self, engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float) -> ContextLimit | None:
        value = await self._max_seq_len(engine, timeout, strict=True)
        return ContextLimit(value, "GET /v1/model parameters.max_seq_len") if value else None

    @staticmethod
    async def _max_seq_len(engine: EngineAPI, timeout: float, *, strict: bool = False) -> int | None:
        card = await _get_json(engine, "/v1/model", timeout, strict=strict)
        params = card.get("parameters") if isinstance(card, dict) else None
        return as_count(params.get("max_seq_len")) if isinstance(params, dict) else None


def _counted(status: int, body: str, path: str) -> Any:
    """The JSON of a tokenizer's 200 answer (None for any other status); one that cannot be read is
    EngineRequestError ``protocol``: sizing then fails with that finding."""
    if status != 200:
        return None
    try:
        return parse(body, "the answer")
    except EngineJSONError as exc:
        raise EngineRequestError("protocol", f"POST {path}: {exc}") from None


PROBE_TEXT = "The quick brown fox jumps over the lazy dog."  # a sentence every tokenizer splits into words

# Probed in this order when the engine is not named; plain OpenAI is what is left.
DIALECTS: tuple[Dialect, ...] = (Vllm(), Sglang(), LlamaCpp(), TabbyApi())
OPENAI = Dialect()
DIALECT_NAMES: tuple[str, ...] = (*(d.name for d in DIALECTS), OPENAI.name)


def dialect_named(name: str) -> Dialect:
    """The dialect called ``name`` (vllm, sglang, llamacpp, tabbyapi, openai); KeyError for any other."""
    found = next((d for d in (*DIALECTS, OPENAI) if d.name == name), None)
    if found is None:
        raise KeyError(name)
    return found


@dataclass(frozen=True)
class Detected:
    dialect: Dialect
    how: str  # "named", "detected", or why it fell back to plain OpenAI


async def detect(engine: EngineAPI, entry: dict[str, Any] | None, *, timeout: float,
                 expected: str | None = None) -> Detected:
    """Which engine answers. The expected dialect (the recipe's engine.kind, or --engine) is probed first; the
    one /v1/models names as owner next; then the rest. A server that answers no other probe but lists
    ``max_model_len``, or counts a sentence's tokens at vLLM's /tokenize, speaks vLLM's API (a vLLM fork, or a
    proxy in front of one)."""
    if expected == OPENAI.name:
        return Detected(OPENAI, "named")
    owner = entry.get("owned_by") if entry else None
    order = sorted(DIALECTS, key=lambda d: (d.name != expected, d.owner != owner))
    for dialect in order:
        if await dialect.probe(engine, entry, timeout=timeout):
            return Detected(dialect, "named" if dialect.name == expected else "detected")
    if entry is not None and "max_model_len" in entry:
        return Detected(DIALECTS[0], "detected (lists max_model_len)")
    try:
        counted = await engine.tokenize(PROBE_TEXT, timeout=timeout)
    except EngineRequestError as err:
        if err.kind != "protocol":
            raise
        counted = None  # an answer that is not a count: no vLLM tokenizer there
    if counted is not None and 2 <= counted <= len(PROBE_TEXT) + 8:  # a few special tokens at most
        return Detected(DIALECTS[0], 'detected (counts POST /tokenize {"prompt"})')
    return Detected(OPENAI, "no engine-specific endpoint answered")
