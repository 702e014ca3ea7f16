"""`verify --export FILE`: the soak's figures as a file other tools read, in the key names of `vllm bench
serve`'s JSON result (``--save-result``): ``date``, ``backend``, ``model_id``, ``num_prompts``,
``max_concurrency``, ``duration``, ``completed``, ``failed``, ``total_output_tokens``, ``request_throughput``,
``output_throughput`` and ``{mean,median,p99}_{ttft,itl,e2el}_ms``. Only figures the soak measured are
written (no ``total_input_tokens`` or TPOT, which it does not measure). What vLLM's file does not carry,
rigctl adds under one ``rigctl`` key: the recipe, the endpoint, the image and its digest, the GPUs, the
soak's verdict, and the answers of the run.

The answers (``rigctl.answers``) are what the model said to verify's fixed requests at temperature 0 (the
smoke prompts, the repetition probes, the determinism probe): each request with its text. `rigctl canary
NAME --baseline FILE` keeps them and asks the same requests on every run; an answer that is no longer the
same is a failure ("baseline"), the drift an image or configuration change brings while every other check
still passes. Pure: the caller gathers the image digest and the GPU facts and writes the file; ``baseline_of``
reads one back."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rigctl.errors import InvalidInputError

BENCH_KEYS = (
    "completed", "failed", "total_output_tokens", "request_throughput", "output_throughput",
    *(f"{stat}_{name}_ms" for name in ("ttft", "itl", "e2el") for stat in ("mean", "median", "p99")),
)


def soak_export(
    soak: Any, *, model: str, base_url: str, recipe: str | None, recipe_source: str | None, image: str | None,
    image_digest: str | None, gpus: Sequence[Mapping[str, Any]], gpu_note: str | None, version: str,
    now: float | None = None, answers: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """The document for one soak result (``verify.report.CheckResult`` of id "soak")."""
    figures: Mapping[str, Any] = soak.figures
    doc: dict[str, Any] = {
        "date": time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now)),
        "backend": "openai",  # streamed /v1/completions, as vllm bench serve's openai backend sends them
        "model_id": model,
        "num_prompts": figures.get("requests"),
        "max_concurrency": figures.get("concurrency"),
        "duration": figures.get("duration_s"),
    }
    doc.update({key: figures[key] for key in BENCH_KEYS if key in figures})
    doc["rigctl"] = {
        "version": version, "status": soak.status, "message": soak.message, "base_url": base_url,
        "recipe": recipe, "recipe_source": recipe_source, "image": image, "image_digest": image_digest,
        "gpus": [dict(g) for g in gpus], "gpu_note": gpu_note,
        "prefix_tokens": figures.get("prefix_tokens"), "prompt_tokens": figures.get("prompt_tokens"),
        "runaways": figures.get("runaways"), "cut_off": figures.get("cut_off"),
        "health_drops": figures.get("health_drops"),
        "answers": [dict(a) for a in answers[:MAX_ANSWERS]],
    }
    return doc


# --- the answers, for a canary's baseline ------------------------------------------------------------

ANSWER_SOURCES = ("smoke[", "repetition[", "determinism[")  # fixed requests; the soak's and needle's are not
MAX_ANSWERS = 16
MAX_ANSWER_CHARS = 8000  # of an answer's text, and of its prompt
MAX_TOKENS = 4096


def answers_of(outputs: Iterable[Any]) -> list[dict[str, Any]]:
    """The answers to verify's fixed requests (``session.Output`` with its request), each request once."""
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for o in outputs:
        request = o.request
        if request is None or request.temperature != 0 or not o.source.startswith(ANSWER_SOURCES):
            continue
        answer = Answer(o.source, request.prompt, request.messages, request.max_tokens, o.text)
        key = json.dumps(answer.ask(), sort_keys=True, allow_nan=False)
        if key in seen or len(o.text) > MAX_ANSWER_CHARS:
            continue
        seen.add(key)
        out.append(answer.to_dict())
        if len(out) == MAX_ANSWERS:
            break
    return out


@dataclass(frozen=True)
class Answer:
    source: str
    prompt: str | None
    messages: tuple[tuple[str, str], ...] | None
    max_tokens: int
    text: str

    def ask(self) -> dict[str, Any]:
        return {"prompt": self.prompt, "messages": None if self.messages is None else [list(m) for m in self.messages],
                "max_tokens": self.max_tokens}

    def to_dict(self) -> dict[str, Any]:  # the --export file format (from_dict reads it back): the request inline
        return {"source": self.source, **self.ask(), "text": self.text}

    @classmethod
    def from_dict(cls, data: Any) -> Answer | None:
        if not isinstance(data, dict):
            return None
        source, prompt, text, tokens = data.get("source"), data.get("prompt"), data.get("text"), data.get("max_tokens")
        raw = data.get("messages")
        messages: tuple[tuple[str, str], ...] | None = None
        if raw is not None:
            if not isinstance(raw, list) or not raw or len(raw) > 16 or not all(
                    isinstance(m, list) and len(m) == 2 and all(isinstance(x, str) for x in m) for m in raw):
                return None
            messages = tuple((str(m[0]), str(m[1])) for m in raw)
        if not isinstance(source, str) or not isinstance(text, str) or (prompt is None) == (messages is None):
            return None
        if prompt is not None and not isinstance(prompt, str):
            return None
        if isinstance(tokens, bool) or not isinstance(tokens, int) or not 1 <= tokens <= MAX_TOKENS:
            return None
        sizes = [len(text), len(prompt or ""), *(len(c) for _, c in messages or ())]
        if max(sizes) > MAX_ANSWER_CHARS or len(source) > 100:
            return None
        return cls(source, prompt, messages, tokens, text)


@dataclass(frozen=True)
class Baseline:
    """What a canary compares with: the answers of one `verify --export`, and where they came from."""

    recipe: str
    model: str
    date: str
    image_digest: str | None
    answers: tuple[Answer, ...]
    source: str = ""  # the file read

    def to_dict(self) -> dict[str, Any]:  # the --export file format, which from_dict reads back
        return {"recipe": self.recipe, "model": self.model, "date": self.date, "image_digest": self.image_digest,
                "source": self.source, "answers": [a.to_dict() for a in self.answers]}

    @classmethod
    def from_dict(cls, data: Any) -> Baseline | None:
        if not isinstance(data, dict):
            return None
        strings = [data.get(k) for k in ("recipe", "model", "date", "source")]
        digest = data.get("image_digest")
        raw = data.get("answers")
        if not all(isinstance(v, str) for v in strings) or not (digest is None or isinstance(digest, str)):
            return None
        if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_ANSWERS:
            return None
        answers = [Answer.from_dict(a) for a in raw]
        if any(a is None for a in answers):
            return None
        return cls(str(strings[0]), str(strings[1]), str(strings[2]), digest, tuple(a for a in answers if a),
                   str(strings[3]))


def baseline_of(doc: Any, where: str) -> Baseline:
    """The baseline an export gives (the document ``soak_export`` wrote, parsed); refused whole when it is
    not one, or holds no answers."""
    meta = doc.get("rigctl") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        raise InvalidInputError([f"{where}: not a `rigctl verify --export` file (no \"rigctl\" object)"])
    raw = meta.get("answers")
    if not isinstance(raw, list) or not raw:
        raise InvalidInputError([f"{where}: the export holds no answers to compare with"],
                                fix="export again with the smoke, repetition or determinism checks among --checks")
    if len(raw) > MAX_ANSWERS:
        raise InvalidInputError([f"{where}: {len(raw)} answers; an export holds at most {MAX_ANSWERS}"])
    answers = []
    for i, item in enumerate(raw):
        answer = Answer.from_dict(item)
        if answer is None:
            raise InvalidInputError([f"{where}: rigctl.answers[{i}] is not a request with its answer (source, prompt "
                                     f"or messages, max_tokens 1-{MAX_TOKENS}, text; at most {MAX_ANSWER_CHARS} "
                                     "characters each)"])
        answers.append(answer)
    recipe, model, date, digest = meta.get("recipe"), doc.get("model_id"), doc.get("date"), meta.get("image_digest")
    if not isinstance(recipe, str) or not recipe:
        raise InvalidInputError([f"{where}: the export names no recipe (made with --url?)"],
                                fix="export from the deployment: `rigctl verify NAME --export FILE`")
    return Baseline(recipe, model if isinstance(model, str) else "", date if isinstance(date, str) else "",
                    digest if isinstance(digest, str) else None, tuple(answers), where)


@dataclass(frozen=True)
class Drift:
    source: str
    was: str
    now: str
    at: int  # the first character that differs


def drift(expected: Answer, got: str) -> Drift | None:
    """None when ``got`` is the exported answer; else where it first differs."""
    if got == expected.text:
        return None
    at = next((i for i, (a, b) in enumerate(zip(expected.text, got, strict=False)) if a != b),
              min(len(expected.text), len(got)))
    return Drift(expected.source, expected.text, got, at)


def gpu_facts(inventory: Any, ids: Sequence[str]) -> tuple[list[dict[str, Any]], str | None]:
    """The GPUs the deployment uses (all of them when it names none), from ``host.facts.GpuInventory``."""
    if not inventory.available:
        return [], f"NVML not available ({inventory.error or 'no library or driver'})"
    chosen = [g for g in inventory.devices if not ids or g.named_by(ids)]
    return [{"index": g.index, "uuid": g.uuid, "name": g.name, "memory_total_bytes": g.memory_total_bytes,
             "compute_capability": g.compute_capability} for g in chosen], None
