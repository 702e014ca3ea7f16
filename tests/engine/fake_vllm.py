#!/usr/bin/env python3
"""fake_vllm: a small OpenAI-compatible test engine that speaks vLLM's HTTP shapes and can be told to fail
the ways the GLM-5.3-Flash story's engine failed. Python standard library only: it also runs inside a
minimal Debian container that has python3 and nothing else.

Endpoints (as vLLM serves them)
  GET  /health                200 with an empty body; 503 while warming up
  GET  /v1/models             {"object":"list","data":[{"id":SERVED_NAME,...,"max_model_len":N}]}
  POST /tokenize              {"model","prompt"} or {"model","messages"} -> {"count","max_model_len","tokens"}
  POST /v1/completions        plain, or SSE with `stream: true` (`stream_options.include_usage` adds a usage
                              chunk), closed by `data: [DONE]`
  POST /v1/chat/completions   the same for chat messages
  GET  /metrics               a few Prometheus lines under vLLM v1's names and labels (vllm:num_requests_running,
                              vllm:generation_tokens_total counted per token as it streams, ...)
  GET  /version
Tokens are words and punctuation marks (regex \\w+|[^\\w\\s]) plus one BOS token per prompt.
It answers known prompts correctly at temperature 0 ("The capital of France is" -> " Paris. ..."),
answers the needle question from the access codes it can see in the prompt, and otherwise produces a
deterministic, non-repeating sentence or two derived from the prompt.

Options (each also readable from the environment variable named in brackets)
  --host H                    [FAKE_VLLM_HOST] default 127.0.0.1; 0.0.0.0 only makes sense in a container
  --port N                    [FAKE_VLLM_PORT] default 8000; 0 picks a free port (printed on the start line)
  --served-name NAME          [FAKE_VLLM_SERVED_NAME] default fake-model
  --max-model-len N           [FAKE_VLLM_MAX_MODEL_LEN] default 32768
  --mode M[,M...]             [FAKE_VLLM_MODE] default healthy. Failure modes, combinable:
      healthy           answers correctly
      word-salad        every answer is "the capital France capital France ..." up to max_tokens
      nondeterministic  answers carry random words: the same request twice gives different text
      drift             open-ended answers are other words than healthy's (still deterministic, no loop),
                        known answers stay right: what an image update that changed the model looks like
      context-loss      needles past --context-limit tokens into the prompt are not recalled
      crash-under-load  when --crash-concurrency requests sharing a prompt prefix are in flight, prints the
                        ReplaySSM traceback to stderr and exits with --crash-exit-code (default 0, as
                        vLLM's API server does when its EngineCore dies)
      runaway           when --runaway-concurrency requests are in flight, answers run to max_tokens
                        and stop with finish_reason "length"
      hang              /health stays 200, completions never answer: a request that arrives counts as running
                        on /metrics and yields no token (vllm:generation_tokens_total stands still)
      engine-dead       the server stays up with its engine dead: /health answers 503 and completions 500, as
                        vLLM's API server does after EngineDeadError with VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1
                        (or while its shutdown hangs); --mode-file is read for /health too
      cut-off           streamed answers stop half-way: the connection closes with no finish_reason and no
                        [DONE] (plain, non-streamed answers stay whole)
  --context-limit N           [FAKE_VLLM_CONTEXT_LIMIT] default 2048 (context-loss)
  --crash-concurrency K       [FAKE_VLLM_CRASH_CONCURRENCY] default 8 (crash-under-load)
  --crash-exit-code N         [FAKE_VLLM_CRASH_EXIT_CODE] default 0
  --runaway-concurrency K     [FAKE_VLLM_RUNAWAY_CONCURRENCY] default 4 (runaway)
  --token-delay S             [FAKE_VLLM_TOKEN_DELAY] seconds between streamed tokens, default 0.002
  --prefill-delay S           [FAKE_VLLM_PREFILL_DELAY] seconds per 1,000 prompt tokens, default 0.001
  --warmup-seconds S          [FAKE_VLLM_WARMUP_SECONDS] default 0: for S seconds /health (and all else)
                              answers 503 while vLLM-like boot phases are printed on stdout; the line
                              "Starting vLLM API server on http://HOST:PORT" comes when the engine is ready.
                              Its memory lines take FAKE_VLLM_WEIGHTS_GIB (15.26), FAKE_VLLM_KV_GIB (52.1),
                              FAKE_VLLM_KV_TOKENS (379392) and FAKE_VLLM_GRAPHS_GIB (0.52); the concurrency line
                              counts requests of --max-model-len tokens. FAKE_VLLM_COMPILE_SECONDS: a
                              torch.compile step that long unless $VLLM_CACHE_ROOT holds its artifact
                              (FAKE_VLLM_COMPILE_BUSY=1: spent on the CPU, not asleep)
  --die-during-warmup-after S [FAKE_VLLM_DIE_AFTER] exit during warmup after S seconds ...
  --exit-code N               [FAKE_VLLM_EXIT_CODE] ... with this status (default 1) ...
  --die-message TEXT          [FAKE_VLLM_DIE_MESSAGE] ... after printing this line to stderr
  --protocol P                [FAKE_VLLM_PROTOCOL] vllm (default) or minimal: a server that differs the way
                              `transformers serve` does: no `data: [DONE]` (the stream just closes), usage
                              only on the last chunk whatever stream_options say, no /tokenize, no /metrics,
                              no max_model_len in /v1/models, /health answers {"status":"ok"};
                              or chat-only: vLLM's shapes but no /v1/completions (404);
                              or an engine's own dialect (its endpoints as that engine answers them):
      sglang            owned_by "sglang", GET /get_model_info, POST /tokenize {"prompt"} whose max_model_len
                        is the tokenizer's (not the served context); refuses a prompt past max_model_len
      llamacpp          llama-server: GET /props (default_generation_settings.n_ctx is ONE slot's context:
                        --max-model-len divided by --parallel), GET /slots, POST /tokenize {"content"} (sent
                        vLLM's {"prompt"} it answers {"tokens": []}), no max_model_len in /v1/models; refuses
                        a prompt of n_ctx tokens or more, and stops an answer where the slot is full
      tabbyapi          GET /v1/model (parameters.max_seq_len), POST /v1/token/encode {"text"}, no /tokenize,
                        /health answers {"status":"healthy","issues":[]}
  --parallel N                [FAKE_VLLM_PARALLEL] default 1: llamacpp slots the context is split over
  --mode-file PATH            [FAKE_VLLM_MODE_FILE] switch a running engine: before each completion the file is
                              read (its first 200 bytes) and, when it exists and names modes ("word-salad",
                              "hang", ...), they replace --mode for that request; missing or empty: --mode
  --no-access-log             [FAKE_VLLM_NO_ACCESS_LOG=1] do not print a line per request

Example: python3 fake_vllm.py --port 8000 --mode word-salad
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import socket
import sys
import threading
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

MODES = {"healthy", "word-salad", "nondeterministic", "drift", "context-loss", "crash-under-load", "runaway", "hang",
         "cut-off", "engine-dead"}
PROTOCOLS = ("vllm", "minimal", "chat-only", "sglang", "llamacpp", "tabbyapi")
TOKEN_RE = re.compile(r"\w+|[^\w\s]")
NEEDLE_RE = re.compile(r"access code for the ([A-Za-z]+) archive is ([A-Za-z0-9-]+)")

LLAMACPP_404 = {"error": {"message": "File Not Found", "type": "not_found_error", "code": 404}}
TOKENIZER_MAX_LENGTH = 131072  # sglang's /tokenize reports this (the tokenizer's), whatever is served
DIALECT_HEALTH: dict[str, object] = {"minimal": {"status": "ok"}, "llamacpp": {"status": "ok"},
                                     "tabbyapi": {"status": "healthy", "issues": []}}
_VLLM_TOO_LONG = ("This model's maximum context length is {limit} tokens. However, you requested {total} tokens "
                  "({prompt} in the messages, {out} in the completion). Please reduce the length of the messages "
                  "or completion.")
TOO_LONG = {
    "vllm": _VLLM_TOO_LONG, "minimal": _VLLM_TOO_LONG, "chat-only": _VLLM_TOO_LONG,
    "sglang": "Requested token count exceeds the model's maximum context length of {limit} tokens. You requested "
              "a total of {total} tokens: {prompt} tokens from the input messages and {out} tokens for the "
              "completion. Please reduce the number of tokens in the input messages or the completion to fit "
              "within the limit.",
    "tabbyapi": "Prompt length {prompt} plus max_tokens {out} is greater than max_seq_len {limit}",
}

KNOWN_ANSWERS = [
    ("the capital of france is", " Paris. It is the largest city in France and lies on the Seine."),
    ("what is the capital of france?", "The capital of France is Paris."),
    ("the capital of germany is", " Berlin, which is also its largest city."),
    ("the capital of japan is", " Tokyo."),
    ("2 + 2 =", " 4"),
]

VOCAB = (  # noqa: SIM905 - a paragraph of words reads better than a 50-item list literal
    "river mountain lantern harbor quiet bright orchard copper meadow signal winter garden thunder velvet "
    "compass ember granite falcon willow marble canyon beacon saffron timber glacier cobalt prairie "
    "harvest lagoon summit meadowlark cedar voyage crystal tundra ribbon anchor pebble horizon juniper "
    "walks carries finds builds paints gathers follows reaches sees keeps opens"
).split()

REPLAYSSM_TRACE = """\
ERROR [core.py:1043] EngineCore encountered a fatal error.
Traceback (most recent call last):
  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/layers/kda.py", line 651, in forward
    state = materialize_kda_replayssm_state(src, state_rows)
  File "/usr/local/lib/python3.12/dist-packages/vllm/third_party/flash_linear_attention/ops/kda_replayssm_spec_decode.py", line 482, in materialize_kda_replayssm_state
    raise ValueError("ReplaySSM prefill source/state row count mismatch")
ValueError: ReplaySSM prefill source/state row count mismatch
ERROR [async_llm.py:420] AsyncLLM output_handler failed.
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.
INFO:     Shutting down
INFO:     Application shutdown complete.
"""


def env(name: str, default: str) -> str:
    return os.environ.get(name, default)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="vLLM-shaped OpenAI-compatible test engine (see the module doc)")
    p.add_argument("--host", default=env("FAKE_VLLM_HOST", "127.0.0.1"))
    p.add_argument("--port", type=int, default=int(env("FAKE_VLLM_PORT", "8000")))
    p.add_argument("--served-name", default=env("FAKE_VLLM_SERVED_NAME", "fake-model"))
    p.add_argument("--max-model-len", type=int, default=int(env("FAKE_VLLM_MAX_MODEL_LEN", "32768")))
    p.add_argument("--mode", default=env("FAKE_VLLM_MODE", "healthy"))
    p.add_argument("--context-limit", type=int, default=int(env("FAKE_VLLM_CONTEXT_LIMIT", "2048")))
    p.add_argument("--crash-concurrency", type=int, default=int(env("FAKE_VLLM_CRASH_CONCURRENCY", "8")))
    p.add_argument("--crash-exit-code", type=int, default=int(env("FAKE_VLLM_CRASH_EXIT_CODE", "0")))
    p.add_argument("--runaway-concurrency", type=int, default=int(env("FAKE_VLLM_RUNAWAY_CONCURRENCY", "4")))
    p.add_argument("--token-delay", type=float, default=float(env("FAKE_VLLM_TOKEN_DELAY", "0.002")))
    p.add_argument("--prefill-delay", type=float, default=float(env("FAKE_VLLM_PREFILL_DELAY", "0.001")))
    p.add_argument("--warmup-seconds", type=float, default=float(env("FAKE_VLLM_WARMUP_SECONDS", "0")))
    p.add_argument("--die-during-warmup-after", type=float, default=float(env("FAKE_VLLM_DIE_AFTER", "-1")))
    p.add_argument("--exit-code", type=int, default=int(env("FAKE_VLLM_EXIT_CODE", "1")))
    p.add_argument(
        "--die-message",
        default=env("FAKE_VLLM_DIE_MESSAGE", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    )
    p.add_argument("--protocol", choices=PROTOCOLS, default=env("FAKE_VLLM_PROTOCOL", "vllm"))
    p.add_argument("--parallel", type=int, default=int(env("FAKE_VLLM_PARALLEL", "1")))
    p.add_argument("--mode-file", default=env("FAKE_VLLM_MODE_FILE", ""))
    p.add_argument("--no-access-log", action="store_true", default=env("FAKE_VLLM_NO_ACCESS_LOG", "") == "1")
    args = p.parse_args(argv)
    args.modes = {m.strip() for m in args.mode.split(",") if m.strip()} or {"healthy"}
    unknown = args.modes - MODES
    if unknown:
        p.error(f"unknown mode(s) {sorted(unknown)}; choose from {sorted(MODES)}")
    args.base_modes = set(args.modes)
    return args


def modes_now(args: argparse.Namespace) -> set[str]:
    """--mode, or what --mode-file names now (unknown words in it are ignored)."""
    if not args.mode_file:
        return set(args.base_modes)
    try:
        with open(args.mode_file, "rb") as f:
            text = f.read(200).decode("utf-8", "replace")
    except OSError:
        return set(args.base_modes)
    named = {m.strip() for m in text.replace("\n", ",").split(",") if m.strip()} & MODES
    return named or set(args.base_modes)


def tokenize(text: str) -> list[str]:
    return TOKEN_RE.findall(text)


def token_ids(text: str) -> list[int]:
    return [1] + [zlib.crc32(t.encode()) % 50000 + 2 for t in tokenize(text)]  # 1 is BOS


class State:
    """Everything the handlers share; guarded by one lock."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.lock = threading.Lock()
        self.ready = args.warmup_seconds <= 0
        self.in_flight: dict[str, str] = {}  # request id -> prompt prefix key
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.success_total = 0
        self.max_in_flight = 0  # the most requests ever in flight at once (for load-client tests)
        self.port = args.port

    def enter(self, rid: str, prompt: str) -> tuple[int, int]:
        """Register a request; returns (requests in flight, in flight sharing this prompt's prefix)."""
        key = prompt[:400]
        with self.lock:
            self.in_flight[rid] = key
            self.max_in_flight = max(self.max_in_flight, len(self.in_flight))
            same = sum(1 for k in self.in_flight.values() if k == key)
            return len(self.in_flight), same

    def count(self, *, prompt: int = 0, generated: int = 0) -> None:
        with self.lock:
            self.prompt_tokens_total += prompt
            self.generation_tokens_total += generated

    def leave(self, rid: str) -> None:
        with self.lock:
            self.in_flight.pop(rid, None)


def log(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def crash(state: State) -> None:
    """What vLLM does when the EngineCore raises: the traceback, a clean API-server shutdown, exit 0."""
    sys.stderr.write(REPLAYSSM_TRACE)
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(state.args.crash_exit_code)


# --- answers ---------------------------------------------------------------------------------------


def generic_answer(prompt: str, rng: random.Random) -> list[str]:
    """One or two sentences of varied words: long enough to read, too varied to look like a loop."""
    words = rng.sample(VOCAB, k=min(len(VOCAB), 14 + rng.randrange(12)))
    pieces: list[str] = []
    cut = len(words) // 2
    for i, w in enumerate(words):
        word = w.capitalize() if i in (0, cut) else w
        pieces.append(" " + word)
        if i == cut - 1 or i == len(words) - 1:
            pieces.append(".")
    return pieces


def needle_answer(prompt: str, visible_tokens: int | None) -> list[str] | None:
    matches = list(NEEDLE_RE.finditer(prompt))
    if not matches or "access code" not in prompt[-600:]:
        return None
    found = []
    for m in matches:
        if visible_tokens is not None and len(tokenize(prompt[: m.start()])) > visible_tokens:
            continue  # context-loss: the model no longer sees this far into the prompt
        found.append((m.group(1), m.group(2)))
    if not found:
        return [" I", " could", " not", " find", " any", " access", " codes", "."]
    pieces: list[str] = []
    for i, (name, code) in enumerate(found):
        pieces += [" " + name, ":", " " + code]
        pieces.append(";" if i < len(found) - 1 else ".")
    return pieces


def split_pieces(text: str) -> list[str]:
    """Split a canned answer into streamed tokens, keeping leading spaces on words."""
    return re.findall(r"\s*(?:\w+|[^\w\s])", text)


def word_salad(max_tokens: int) -> list[str]:
    pieces = [" the"]
    while len(pieces) < max_tokens:
        pieces += [" capital", " France"]
    return pieces[:max_tokens]


def runaway_pieces(rng: random.Random, max_tokens: int) -> list[str]:
    return [" " + rng.choice(VOCAB) for _ in range(max_tokens)]


def plan_answer(state: State, prompt: str, max_tokens: int, in_flight: int) -> tuple[list[str], str]:
    """The tokens to send and the finish reason."""
    modes = state.args.modes
    if "word-salad" in modes:
        pieces = word_salad(max_tokens)
        return pieces, "length"
    if "runaway" in modes and in_flight >= state.args.runaway_concurrency:
        rng = random.Random(zlib.crc32(prompt.encode()))
        return runaway_pieces(rng, max_tokens), "length"
    normalized = " ".join(prompt.strip().lower().split())
    pieces: list[str] | None = None
    for key, answer in KNOWN_ANSWERS:
        if normalized.endswith(key):
            pieces = split_pieces(answer)
            break
    if pieces is None:
        visible = state.args.context_limit if "context-loss" in modes else None
        pieces = needle_answer(prompt, visible)
    if pieces is None:
        seed = zlib.crc32(prompt.encode()) ^ (0x5EED if "drift" in modes else 0)
        pieces = generic_answer(prompt, random.Random(seed))
    if "nondeterministic" in modes:
        rng = random.Random()  # seeded from the OS: differs on every call
        pieces = list(pieces)
        for _ in range(3):
            pieces.insert(rng.randrange(1, len(pieces) + 1), " " + rng.choice(VOCAB))
    if len(pieces) > max_tokens:
        return pieces[:max_tokens], "length"
    return pieces, "stop"


# --- HTTP ------------------------------------------------------------------------------------------


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, chunked streaming: what uvicorn speaks
    server_version = "uvicorn"
    sys_version = ""
    state: State  # set on the class by main()

    def setup(self) -> None:
        super().setup()
        # uvicorn sets TCP_NODELAY; without it, Nagle's algorithm and the client's delayed ACK add ~40 ms
        # to every streamed answer and swamp what the benchmark measures.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the access log is written by access() in uvicorn's format

    def access(self, status: int) -> None:
        if not self.state.args.no_access_log:
            phrase = {200: "OK", 400: "Bad Request", 404: "Not Found", 503: "Service Unavailable"}.get(status, "")
            log(f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.command} {self.path} '
                f'HTTP/1.1" {status} {phrase}')

    # plumbing

    def send_json(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.access(status)

    def send_text(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        self.access(status)

    def send_error_json(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        self.send_json(status, {"object": "error", "message": message, "type": kind, "param": None, "code": status})

    def read_body(self) -> dict[str, object] | None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            self.send_error_json(400, "invalid JSON body")
            return None
        if not isinstance(body, dict):
            self.send_error_json(400, "body must be a JSON object")
            return None
        return body

    def not_ready(self) -> bool:
        if self.state.ready:
            return False
        self.send_text(503, "")
        return True

    # routes

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        protocol = self.state.args.protocol
        minimal = protocol == "minimal"
        if path == "/health":
            if self.state.ready and "engine-dead" in modes_now(self.state.args):
                self.send_text(503, "")  # vLLM's /health on EngineDeadError: 503, empty body
            elif protocol in DIALECT_HEALTH and self.state.ready:
                self.send_json(200, DIALECT_HEALTH[protocol])
            elif protocol == "llamacpp" and not self.state.ready:
                self.send_json(503, {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}})
            else:
                self.send_text(200 if self.state.ready else 503, "")
        elif self.not_ready() or (protocol in ("sglang", "llamacpp", "tabbyapi") and self.dialect_get(path)):
            return
        elif path == "/v1/models":
            name = self.state.args.served_name
            if minimal:
                self.send_json(200, {"object": "list", "data": [
                    {"owned_by": "local", "id": name, "object": "model", "created": 0}]})
                return
            self.send_json(200, {"object": "list", "data": [{
                "id": name, "object": "model", "created": int(time.time()), "owned_by": "vllm", "root": name,
                "parent": None, "max_model_len": self.state.args.max_model_len,
                "permission": [{"id": "modelperm-fake", "object": "model_permission", "allow_sampling": True}],
            }]})
        elif path == "/metrics" and not minimal:
            self.send_text(200, self.metrics(), "text/plain; version=0.0.4; charset=utf-8")
        elif path == "/version":
            self.send_json(200, {"version": "0.0.0+fake"})
        else:
            self.send_json(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if self.not_ready():
            return
        body = self.read_body()
        if body is None:
            return
        protocol = self.state.args.protocol
        if path == "/tokenize" and protocol == "llamacpp":
            self.llamacpp_tokenize(body)
        elif path == "/v1/token/encode" and protocol == "tabbyapi":
            text = str(body.get("text", ""))
            ids = token_ids(text)[0 if body.get("add_bos_token", True) else 1:]
            self.send_json(200, {"tokens": ids, "length": len(ids)})
        elif path == "/tokenize" and protocol not in ("minimal", "tabbyapi"):
            self.tokenize_route(body)
        elif path == "/v1/completions" and self.state.args.protocol != "chat-only":
            self.generate(body, chat=False)
        elif path == "/v1/chat/completions":
            self.generate(body, chat=True)
        else:
            self.send_json(404, LLAMACPP_404 if protocol == "llamacpp" else {"detail": "Not Found"})

    def metrics(self) -> str:
        s = self.state
        name = s.args.served_name
        # vLLM v1's names and labels (vllm/v1/metrics/loggers.py: labelnames model_name, engine; prometheus_client
        # adds _total to a counter's name); the token counters move per engine step, as a stream goes
        labels = f'model_name="{name}",engine="0"'
        with s.lock:
            running = len(s.in_flight)
            lines = [
                "# HELP vllm:num_requests_running Number of requests in model execution batches.",
                "# TYPE vllm:num_requests_running gauge",
                f"vllm:num_requests_running{{{labels}}} {running}.0",
                "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
                "# TYPE vllm:num_requests_waiting gauge",
                f"vllm:num_requests_waiting{{{labels}}} 0.0",
                "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
                "# TYPE vllm:prompt_tokens_total counter",
                f"vllm:prompt_tokens_total{{{labels}}} {s.prompt_tokens_total}.0",
                "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
                "# TYPE vllm:generation_tokens_total counter",
                f"vllm:generation_tokens_total{{{labels}}} {s.generation_tokens_total}.0",
                "# TYPE vllm:request_success_total counter",
                f'vllm:request_success_total{{{labels},finished_reason="stop"}} {s.success_total}.0',
                "# HELP fake_vllm:max_requests_running The test engine's own: most requests in flight at once.",
                "# TYPE fake_vllm:max_requests_running gauge",
                f"fake_vllm:max_requests_running {s.max_in_flight}.0",
            ]
        return "\n".join(lines) + "\n"

    def tokenize_route(self, body: dict[str, object]) -> None:
        prompt = chat_prompt(body.get("messages")) if "messages" in body else str(body.get("prompt", ""))
        ids = token_ids(prompt)
        if self.state.args.protocol == "sglang":
            # SGLang reports the tokenizer's model_max_length here, not the context it serves.
            self.send_json(200, {"tokens": ids, "count": len(ids), "max_model_len": TOKENIZER_MAX_LENGTH})
            return
        self.send_json(200, {"count": len(ids), "max_model_len": self.state.args.max_model_len, "tokens": ids,
                             "token_strs": None})

    def llamacpp_tokenize(self, body: dict[str, object]) -> None:
        """llama-server reads only ``content``; without it the answer is an empty list, not an error."""
        if "content" not in body:
            self.send_json(200, {"tokens": []})
            return
        ids = token_ids(str(body.get("content", "")))
        self.send_json(200, {"tokens": ids if body.get("add_special") else ids[1:]})

    def dialect_get(self, path: str) -> bool:
        """The GET routes of the engine dialects; False when the path is not one of them."""
        args = self.state.args
        name, protocol = args.served_name, args.protocol
        per_slot = args.max_model_len // max(args.parallel, 1)
        # llama-server's shapes as a real one (built from the llama-cpp-python 0.3.36 sdist) answers them.
        if protocol == "llamacpp" and path == "/v1/models":
            self.send_json(200, {"models": [{"name": name, "model": name, "modified_at": "", "size": "", "digest": "",
                                             "type": "model", "description": "", "tags": [""],
                                             "capabilities": ["completion"], "parameters": "",
                                             "details": {"parent_model": "", "format": "gguf", "family": ""}}],
                                 "object": "list", "data": [{
                                     "id": name, "aliases": [name], "tags": [], "object": "model",
                                     "created": int(time.time()), "owned_by": "llamacpp",
                                     "meta": {"vocab_type": 1, "n_vocab": 50002, "n_ctx": per_slot,
                                              "n_ctx_train": 32768, "n_embd": 64, "n_params": 660288,
                                              "size": 2641152, "ftype": "all F32"}}]})
        elif protocol == "llamacpp" and path == "/props":
            self.send_json(200, {"default_generation_settings": {"params": {
                "seed": 4294967295, "temperature": 0.8, "top_k": 40, "max_tokens": -1, "n_predict": -1,
                "stream": False, "chat_format": "Content-only"}, "n_ctx": per_slot},
                "total_slots": args.parallel, "model_alias": name, "model_ftype": "all F32",
                "model_path": f"/models/{name}.gguf", "modalities": {"vision": False, "video": False, "audio": False},
                "endpoint_slots": True, "endpoint_props": False, "endpoint_metrics": False,
                "build_info": "b1-0c1e570", "is_sleeping": False})
        elif protocol == "llamacpp" and path == "/slots":
            self.send_json(200, [{"id": i, "n_ctx": per_slot, "speculative": False, "is_processing": False}
                                 for i in range(args.parallel)])
        elif protocol == "llamacpp" and path not in ("/health", "/metrics", "/version"):
            self.send_json(404, LLAMACPP_404)
        elif protocol == "sglang" and path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{
                "id": name, "object": "model", "created": int(time.time()), "owned_by": "sglang", "root": name,
                "parent": None, "max_model_len": args.max_model_len}]})
        elif protocol == "sglang" and path == "/get_model_info":
            self.send_json(200, {"model_path": name, "tokenizer_path": name, "is_generation": True,
                                 "preferred_sampling_params": None, "weight_version": "default",
                                 "has_image_understanding": False, "has_audio_understanding": False,
                                 "model_type": "llama", "architectures": ["LlamaForCausalLM"]})
        elif protocol == "tabbyapi" and path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [{
                "id": name, "object": "model", "created": int(time.time()), "owned_by": "tabbyAPI", "logging": None,
                "parameters": None}]})
        elif protocol == "tabbyapi" and path == "/v1/model":
            self.send_json(200, {"id": name, "object": "model", "created": int(time.time()), "owned_by": "tabbyAPI",
                                 "logging": None, "parameters": {
                                     "max_seq_len": args.max_model_len, "rope_scale": 1.0, "rope_alpha": 1.0,
                                     "cache_size": args.max_model_len, "cache_mode": "FP16", "chunk_size": 2048,
                                     "prompt_template": None, "num_experts_per_token": None, "draft": None}})
        else:
            return False
        return True

    def generate(self, body: dict[str, object], *, chat: bool) -> None:
        s = self.state
        model = body.get("model")
        if model is not None and model != s.args.served_name:
            self.send_json(404, {"object": "error", "message": f"The model `{model}` does not exist.",
                                 "type": "NotFoundError", "param": None, "code": 404})
            return
        prompt = chat_prompt(body.get("messages")) if chat else prompt_text(body.get("prompt"))
        s.args.modes = modes_now(s.args)  # --mode-file can switch a running engine
        prompt_tokens = len(token_ids(prompt))
        limit = s.args.max_model_len
        raw_max = body.get("max_tokens", body.get("max_completion_tokens"))
        max_tokens = int(raw_max) if isinstance(raw_max, int | float) else max(limit - prompt_tokens, 0)
        if s.args.protocol == "llamacpp":
            n_ctx = limit // max(s.args.parallel, 1)  # one slot's share
            if prompt_tokens >= n_ctx:
                self.send_json(400, {"error": {
                    "code": 400, "message": f"request ({prompt_tokens} tokens) exceeds the available context size "
                    f"({n_ctx} tokens), try increasing it", "type": "exceed_context_size_error",
                    "n_prompt_tokens": prompt_tokens, "n_ctx": n_ctx}})
                return
            max_tokens = min(max_tokens, n_ctx - prompt_tokens)  # generation stops where the slot is full
        elif prompt_tokens + max_tokens > limit or max_tokens < 1:
            self.send_error_json(400, TOO_LONG[s.args.protocol].format(
                limit=limit, total=prompt_tokens + max_tokens, prompt=prompt_tokens, out=max_tokens))
            return
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        in_flight, same_prefix = s.enter(rid, prompt)
        try:
            if "crash-under-load" in s.args.modes and same_prefix >= s.args.crash_concurrency:
                crash(s)
            if "hang" in s.args.modes:
                time.sleep(3600)  # behind a green /health: the vllm#39863 shape
                return
            if "engine-dead" in s.args.modes:
                self.send_error_json(500, "EngineCore encountered an issue. See stack trace (above) for the root "
                                          "cause.", kind="EngineDeadError")
                return
            pieces, finish = plan_answer(s, prompt, max_tokens, in_flight)
            time.sleep(s.args.prefill_delay * prompt_tokens / 1000)
            s.count(prompt=prompt_tokens)
            usage = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + len(pieces),
                     "completion_tokens": len(pieces), "prompt_tokens_details": None}
            if body.get("stream"):
                opts = body.get("stream_options")
                include_usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
                if s.args.protocol == "minimal":
                    self.stream_minimal(rid, chat, pieces, finish, usage)
                else:
                    self.stream(rid, chat, pieces, finish, usage if include_usage else None)
            else:
                for _ in pieces:  # generated one by one, counted as they come, as a stream's are
                    time.sleep(s.args.token_delay)
                    s.count(generated=1)
                self.send_json(200, full_response(rid, chat, s.args.served_name, pieces, finish=finish, usage=usage))
            with s.lock:
                s.success_total += 1
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client hung up; so does vLLM's request
        finally:
            s.leave(rid)

    def stream(self, rid: str, chat: bool, pieces: list[str], finish: str, usage: dict[str, object] | None) -> None:
        s = self.state
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        created = int(time.time())
        name = s.args.served_name

        def event(obj: object) -> None:
            data = f"data: {json.dumps(obj)}\n\n".encode()
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        kind = "chat.completion.chunk" if chat else "text_completion"
        if chat:
            event({"id": rid, "object": kind, "created": created, "model": name, "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                 "finish_reason": None}]})
        if "cut-off" in s.args.modes:
            for piece in pieces[: max(1, len(pieces) // 2)]:
                s.count(generated=1)
                event({"id": rid, "object": kind, "created": created, "model": name, "choices": [
                    {"index": 0, "logprobs": None, "finish_reason": None,
                     **({"delta": {"content": piece}} if chat else {"text": piece})}]})
            self.wfile.write(b"0\r\n\r\n")  # end the chunked body: the stream is over, unfinished
            self.wfile.flush()
            self.close_connection = True
            self.access(200)
            return
        for i, piece in enumerate(pieces):
            if i:
                time.sleep(s.args.token_delay)
            last = i == len(pieces) - 1
            choice: dict[str, object] = {"index": 0, "logprobs": None, "finish_reason": finish if last else None}
            if chat:
                choice["delta"] = {"content": piece}
            else:
                choice["text"] = piece
                choice["stop_reason"] = None
            s.count(generated=1)
            event({"id": rid, "object": kind, "created": created, "model": name, "choices": [choice]})
        if not pieces:
            choice = {"index": 0, "logprobs": None, "finish_reason": finish}
            choice.update({"delta": {}} if chat else {"text": ""})
            event({"id": rid, "object": kind, "created": created, "model": name, "choices": [choice]})
        if usage is not None:
            event({"id": rid, "object": kind, "created": created, "model": name, "choices": [], "usage": usage})
        done = b"data: [DONE]\n\n"
        self.wfile.write(f"{len(done):x}\r\n".encode() + done + b"\r\n0\r\n\r\n")
        self.wfile.flush()
        if s.args.protocol == "llamacpp":
            # llama-server closes the connection a moment after a streamed answer, though it offered keep-alive:
            # a client that reuses it at once sees it closed before any answer ("Server disconnected without
            # sending a response"). The request sent in that moment is never read.
            time.sleep(0.05)
            self.close_connection = True
        self.access(200)

    def stream_minimal(self, rid: str, chat: bool, pieces: list[str], finish: str,
                       usage: dict[str, object]) -> None:
        """transformers serve's shape: no role chunk, the finish reason and usage ride on a last empty
        chunk, no [DONE]; the connection closes at the end of the stream."""
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("connection", "close")
        self.end_headers()
        self.close_connection = True
        name = self.state.args.served_name
        kind = "chat.completion.chunk" if chat else "text_completion"

        def event(obj: object) -> None:
            self.wfile.write(f"data: {json.dumps(obj)}\n\n".encode())
            self.wfile.flush()

        for i, piece in enumerate(pieces):
            if i:
                time.sleep(self.state.args.token_delay)
            self.state.count(generated=1)
            choice: dict[str, object] = {"index": 0}
            choice.update({"delta": {"content": piece}} if chat else {"text": piece})
            event({"id": rid, "choices": [choice], "model": name, "object": kind})
        last: dict[str, object] = {"finish_reason": finish, "index": 0}
        last.update({"delta": {}} if chat else {"text": ""})
        event({"id": rid, "choices": [last], "model": name, "object": kind, "usage": usage})
        self.access(200)


def prompt_text(raw: object) -> str:
    if isinstance(raw, list):
        return "".join(str(x) for x in raw)
    return str(raw or "")


def chat_prompt(messages: object) -> str:
    """The text the model is asked about: the last user message (its content may be a list of parts)."""
    if not isinstance(messages, list):
        return ""
    text = ""
    for m in messages:
        if isinstance(m, dict) and m.get("role") in ("user", "system"):
            content = m.get("content")
            if isinstance(content, list):
                content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            text = str(content or "") if m.get("role") == "user" else text + str(content or "") + "\n"
    return text


def full_response(rid: str, chat: bool, name: str, pieces: list[str], *, finish: str,
                  usage: dict[str, object]) -> dict[str, object]:
    text = "".join(pieces)
    if chat:
        choice: dict[str, object] = {
            "index": 0, "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None, "finish_reason": finish, "stop_reason": None}
    else:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None,
                  "prompt_logprobs": None}
    return {"id": rid, "object": "chat.completion" if chat else "text_completion", "created": int(time.time()),
            "model": name, "choices": [choice], "usage": usage}


# --- boot ------------------------------------------------------------------------------------------


def env_number(name: str, default: float) -> float:
    """A non-negative finite number from the environment; anything else is the default."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= 0 else default


def boot_lines(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The boot phases as (source file, message), in vLLM V1's order and its memory lines' format:
    weights, profiling, the KV pool (size, tokens, concurrency at --max-model-len), CUDA graphs."""
    weights = env_number("FAKE_VLLM_WEIGHTS_GIB", 15.26)
    kv = env_number("FAKE_VLLM_KV_GIB", 52.1)
    tokens = int(env_number("FAKE_VLLM_KV_TOKENS", 379392))
    graphs = env_number("FAKE_VLLM_GRAPHS_GIB", 0.52)
    context = max(int(args.max_model_len), 1)
    lines = [("gpu_model_runner.py:1", f"Loading safetensors checkpoint shards: {i}/8 [{'#' * i}{'.' * (8 - i)}]")
             for i in range(1, 9)]
    lines += [("gpu_model_runner.py:2", f"Model loading took {weights:.4f} GiB and 212.400000 seconds"),
              ("gpu_worker.py:3", "Memory profiling takes 9.41 seconds"),
              ("gpu_worker.py:4", f"Available KV cache memory: {kv:.2f} GiB"),
              ("kv_cache_utils.py:5", f"GPU KV cache size: {tokens:,} tokens"),
              ("kv_cache_utils.py:6", f"Maximum concurrency for {context:,} tokens per request: {tokens / context:.2f}x"),
              ("gpu_model_runner.py:7", "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 33/67"),
              ("gpu_model_runner.py:7", "Capturing CUDA graphs (decode, FULL): 67/67"),
              ("gpu_model_runner.py:8", f"Graph capturing finished in 41 secs, took {graphs:.2f} GiB")]
    return lines


def compile_step() -> float:
    """torch.compile as a warm cache changes it: with FAKE_VLLM_COMPILE_SECONDS > 0, a cold cache
    ($VLLM_CACHE_ROOT without this engine's artifact) costs that many seconds and leaves the artifact there;
    a warm one loads it at once. Returns the seconds spent."""
    seconds = env_number("FAKE_VLLM_COMPILE_SECONDS", 0.0)
    root = os.environ.get("VLLM_CACHE_ROOT")
    if seconds <= 0:
        return 0.0
    artifact = Path(root or "/nonexistent") / "torch_compile_cache" / "fake-engine" / "rank_0_0" / "artifact.bin"
    stamp = time.strftime('%m-%d %H:%M:%S')
    if artifact.is_file():
        log(f"INFO {stamp} [backends.py:1] Directly load the compiled graph(s) for dynamic shape from the cache, "
            "took 0.05 s")
        return 0.0
    log(f"INFO {stamp} [backends.py:1] torch.compile: compiling for dynamic shape (cache {root or 'none'})")
    if os.environ.get("FAKE_VLLM_COMPILE_BUSY") == "1":  # a compiler's silence: all CPU, no output
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
    else:
        time.sleep(seconds)
    if root:
        artifact.parent.mkdir(parents=True, exist_ok=True)
        artifact.write_bytes(b"\0" * 65536)
    log(f"INFO {time.strftime('%m-%d %H:%M:%S')} [backends.py:2] Compiling a graph for dynamic shape takes "
        f"{seconds:.2f} s")
    return seconds


def warm_up(state: State) -> None:
    """Print vLLM-like boot phases over --warmup-seconds, then open the gate (or die, if told to); a cold
    compile cache adds its seconds after the weights (``compile_step``)."""
    args = state.args
    total = args.warmup_seconds
    start = time.monotonic()
    phases = boot_lines(args)
    for i, (source, phase) in enumerate(phases):
        if phase.startswith("Memory profiling"):  # vLLM compiles in its profile run
            start += compile_step()
        due = start + total * (i + 1) / (len(phases) + 1)
        while time.monotonic() < due:
            if 0 <= args.die_during_warmup_after <= time.monotonic() - start:
                sys.stderr.write(args.die_message + "\n")
                sys.stderr.flush()
                os._exit(args.exit_code)
            time.sleep(min(0.05, max(due - time.monotonic(), 0)))
        log(f"INFO {time.strftime('%m-%d %H:%M:%S')} [{source}] {phase}")
    while time.monotonic() < start + total:
        time.sleep(0.05)
    state.ready = True
    announce(state)


def announce(state: State) -> None:
    log(f"INFO {time.strftime('%m-%d %H:%M:%S')} [api_server.py:1] Starting vLLM API server on "
        f"http://{state.args.host}:{state.port}")
    log("INFO:     Application startup complete.")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    state = State(args)
    Handler.state = state
    server = ThreadingHTTPServer((args.host, args.port), Handler, bind_and_activate=False)
    server.daemon_threads = True
    server.request_queue_size = 1024  # a load client opens hundreds of connections at once
    server.allow_reuse_address = True
    server.server_bind()
    server.server_activate()
    state.port = server.server_address[1]
    log(f"INFO {time.strftime('%m-%d %H:%M:%S')} [api_server.py:1] vLLM API server version 0.0.0+fake "
        f"(modes: {','.join(sorted(args.modes))}, listening on {args.host}:{state.port})")
    if state.ready:
        announce(state)
    else:
        threading.Thread(target=warm_up, args=(state,), daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        log("INFO:     Shutting down")


if __name__ == "__main__":
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (log("INFO:     Shutting down"), os._exit(0)))
    main()
