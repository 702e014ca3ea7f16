"""The OpenAI-compatible HTTP client verify talks through: vLLM's shapes first, tolerant of servers that
differ (no ``data: [DONE]``, usage only on the last chunk or not at all, no ``/tokenize``, ``stream_options``
refused). Every request has a deadline; a failure is an ``EngineRequestError`` whose ``kind`` says what
went wrong, so checks can turn it into a finding.

``EngineAPI`` is the Protocol the checks depend on; ``HttpEngine`` is the real adapter (httpx, async).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx

from rigctl.errors import RigctlError

SHARD = 32  # connections per httpx pool

ErrorKind = Literal["timeout", "connect", "http", "protocol", "engine-error", "cut-off"]


class EngineRequestError(RigctlError):
    """A request the engine did not answer properly."""

    code = "engine-request"

    def __init__(self, kind: ErrorKind, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.kind: ErrorKind = kind
        self.status = status


@dataclass(frozen=True)
class Endpoint:
    """Where the engine answers and under which model name."""

    base_url: str  # e.g. http://127.0.0.1:8000 (no trailing /v1)
    model: str
    api_key: str | None = None
    health_path: str = "/health"

    def __post_init__(self) -> None:
        url = self.base_url.rstrip("/")
        if url.endswith("/v1"):
            url = url[: -len("/v1")]  # operators paste OpenAI base URLs; the API paths are added here
        object.__setattr__(self, "base_url", url)


@dataclass(frozen=True)
class Request:
    """One generation request. ``prompt`` goes to /v1/completions, ``messages`` to /v1/chat/completions."""

    max_tokens: int
    prompt: str | None = None
    messages: tuple[tuple[str, str], ...] | None = None  # (role, content)
    temperature: float = 0.0
    stream: bool = False

    @property
    def chat(self) -> bool:
        return self.messages is not None


@dataclass
class Completion:
    """What came back, with the timing figures the soak reports."""

    text: str
    finish_reason: str | None
    prompt_tokens: int | None
    completion_tokens: int | None  # from usage; None when the server gave none
    latency_s: float
    ttft_s: float | None = None
    token_times: list[float] = field(default_factory=list)  # arrival time of each content chunk
    chunks: int = 0  # content chunks in a stream
    saw_done: bool = False  # the stream ended with data: [DONE]

    @property
    def output_tokens(self) -> int:
        """Usage when the server gave it, else streamed content chunks (about one token each on vLLM)."""
        if self.completion_tokens is not None:
            return self.completion_tokens
        return self.chunks

    def itl_s(self) -> list[float]:
        return [b - a for a, b in zip(self.token_times, self.token_times[1:], strict=False)]


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: str
    latency_s: float


class EngineAPI(Protocol):
    """What the checks need from an engine."""

    endpoint: Endpoint

    async def get(self, path: str, *, timeout: float) -> HttpAnswer: ...

    async def models(self, *, timeout: float) -> list[dict[str, Any]]: ...

    async def tokenize(self, prompt: str, *, timeout: float) -> int | None: ...

    async def complete(self, request: Request, *, timeout: float, idle_timeout: float | None = None) -> Completion: ...


def _describe_http_error(exc: httpx.HTTPError) -> tuple[ErrorKind, str]:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return "connect", f"cannot connect: {exc}"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "cut-off", f"connection closed mid-response: {exc}"
    return "connect", f"{type(exc).__name__}: {exc}"


def _error_message(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:300]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:300]
        if isinstance(data.get("detail"), str):
            return str(data["detail"])[:300]
    return body.strip()[:300]


class HttpEngine:
    """The httpx adapter. One AsyncClient per run, its pool sized for the soak's concurrency."""

    def __init__(self, endpoint: Endpoint, *, max_connections: int = 64) -> None:
        self.endpoint = endpoint
        headers = {"accept": "application/json"}
        if endpoint.api_key:
            headers["authorization"] = f"Bearer {endpoint.api_key}"
        # httpcore's pool does work proportional to its size on every request event, so one pool of 256
        # streams spends most of its time in bookkeeping. Shards of at most SHARD connections keep it cheap;
        # each shard allows twice its share so that an uneven spread waits for nothing.
        shards = max(1, math.ceil(max_connections / SHARD))
        per_shard = math.ceil(max_connections / shards) * 2
        limits = httpx.Limits(max_connections=per_shard, max_keepalive_connections=per_shard)
        # Per-request deadlines are set on each call; this default only bounds a forgotten one.
        self._shards = [
            httpx.AsyncClient(base_url=endpoint.base_url, headers=headers, limits=limits, timeout=httpx.Timeout(60.0))
            for _ in range(shards)
        ]
        self._next = itertools.cycle(self._shards)
        self.has_tokenize: bool | None = None  # learnt on first use
        self.stream_options_ok = True  # cleared when a server refuses stream_options
        self.completions_ok = True  # cleared when a chat-only server has no /v1/completions

    @property
    def _client(self) -> httpx.AsyncClient:
        return next(self._next)

    async def aclose(self) -> None:
        for client in self._shards:
            await client.aclose()

    async def __aenter__(self) -> HttpEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def get(self, path: str, *, timeout: float) -> HttpAnswer:
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                resp = await self._client.get(path, timeout=timeout)
        except TimeoutError:
            raise EngineRequestError("timeout", f"GET {path} did not answer within {timeout:g}s") from None
        except httpx.HTTPError as exc:
            kind, msg = _describe_http_error(exc)
            raise EngineRequestError(kind, f"GET {path}: {msg}") from None
        return HttpAnswer(resp.status_code, resp.text, time.perf_counter() - start)

    async def models(self, *, timeout: float) -> list[dict[str, Any]]:
        answer = await self.get("/v1/models", timeout=timeout)
        if answer.status != 200:
            raise EngineRequestError(
                "http", f"GET /v1/models answered {answer.status}: {_error_message(answer.body)}", status=answer.status
            )
        try:
            data = json.loads(answer.body)
            entries = data["data"]
            if not isinstance(entries, list):
                raise TypeError("data is not a list")
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineRequestError("protocol", f"GET /v1/models: not an OpenAI model list ({exc})") from None
        return [e for e in entries if isinstance(e, dict)]

    async def tokenize(self, prompt: str, *, timeout: float) -> int | None:
        """The server's own token count for a completion prompt (vLLM's POST /tokenize), or None when the
        server has no such route."""
        if self.has_tokenize is False:
            return None
        payload = {"model": self.endpoint.model, "prompt": prompt}
        try:
            async with asyncio.timeout(timeout):
                resp = await self._client.post("/tokenize", json=payload, timeout=timeout)
        except TimeoutError:
            raise EngineRequestError("timeout", f"POST /tokenize did not answer within {timeout:g}s") from None
        except httpx.HTTPError as exc:
            kind, msg = _describe_http_error(exc)
            raise EngineRequestError(kind, f"POST /tokenize: {msg}") from None
        if resp.status_code in (404, 405, 501):
            self.has_tokenize = False
            return None
        if resp.status_code != 200:
            raise EngineRequestError(
                "http", f"POST /tokenize answered {resp.status_code}: {_error_message(resp.text)}",
                status=resp.status_code,
            )
        try:
            data = resp.json()
            count = data["count"] if "count" in data else len(data["tokens"])
        except (ValueError, KeyError, TypeError):
            self.has_tokenize = False  # something else lives at /tokenize; estimate instead
            return None
        self.has_tokenize = True
        return int(count)

    def _payload(self, request: Request, *, with_stream_options: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {
            "model": self.endpoint.model,
            "max_tokens": request.max_tokens,
            "temperature": request.temperature,
        }
        if request.chat:
            assert request.messages is not None
            body["messages"] = [{"role": role, "content": content} for role, content in request.messages]
            path = "/v1/chat/completions"
        else:
            body["prompt"] = request.prompt or ""
            path = "/v1/completions"
        if request.stream:
            body["stream"] = True
            if with_stream_options:
                body["stream_options"] = {"include_usage": True}
        return path, body

    async def complete(
        self, request: Request, *, timeout: float, idle_timeout: float | None = None
    ) -> Completion:
        """Send one request. ``timeout`` bounds the whole exchange; ``idle_timeout`` (streams) bounds the gap
        between two chunks."""
        try:
            async with asyncio.timeout(timeout):
                return await self._complete(request, timeout, idle_timeout)
        except TimeoutError:
            what = "a streamed completion" if request.stream else "a completion"
            raise EngineRequestError("timeout", f"{what} did not finish within {timeout:g}s") from None

    async def _complete(self, request: Request, timeout: float, idle_timeout: float | None) -> Completion:
        if not request.chat and not self.completions_ok:
            request = _as_chat(request)
        try:
            return await self._send(request, timeout, idle_timeout)
        except EngineRequestError as err:
            if request.chat or err.status not in (404, 405):
                raise
        # A chat-only server: the same prompt as one user message, and every later one the same way.
        self.completions_ok = False
        return await self._send(_as_chat(request), timeout, idle_timeout)

    async def _send(self, request: Request, timeout: float, idle_timeout: float | None) -> Completion:
        path, body = self._payload(request, with_stream_options=request.stream and self.stream_options_ok)
        http_timeout = httpx.Timeout(timeout, read=idle_timeout or timeout)
        start = time.perf_counter()
        try:
            if not request.stream:
                resp = await self._client.post(path, json=body, timeout=http_timeout)
                return self._parse_full(path, resp, start)
            async with self._client.stream("POST", path, json=body, timeout=http_timeout) as resp:
                if resp.status_code in (400, 422) and "stream_options" in body:
                    text = (await resp.aread()).decode(errors="replace")
                    if "stream_options" in text or "include_usage" in text:
                        # An older server that rejects the field: retry without it, once, and remember.
                        self.stream_options_ok = False
                        retry = Request(request.max_tokens, request.prompt, request.messages, request.temperature,
                                        stream=True)
                        return await self._send(retry, timeout, idle_timeout)
                    raise EngineRequestError("http", f"POST {path} answered {resp.status_code}: "
                                             f"{_error_message(text)}", status=resp.status_code)
                return await self._parse_stream(path, resp, start)
        except httpx.TimeoutException as exc:
            raise EngineRequestError("timeout", f"POST {path}: no data for {idle_timeout or timeout:g}s "
                                     f"({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            kind, msg = _describe_http_error(exc)
            raise EngineRequestError(kind, f"POST {path}: {msg}") from None

    @staticmethod
    def _parse_full(path: str, resp: httpx.Response, start: float) -> Completion:
        latency = time.perf_counter() - start
        if resp.status_code != 200:
            raise EngineRequestError(
                "http", f"POST {path} answered {resp.status_code}: {_error_message(resp.text)}",
                status=resp.status_code,
            )
        try:
            data = resp.json()
            choice = data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise EngineRequestError("protocol", f"POST {path}: answer has no choices: {resp.text[:200]!r}") from None
        text = _choice_text(choice, chat=path.endswith("chat/completions"), stream=False)
        prompt_tokens, completion_tokens = _usage(data.get("usage"))
        return Completion(text, choice.get("finish_reason"), prompt_tokens, completion_tokens, latency)

    @staticmethod
    async def _parse_stream(path: str, resp: httpx.Response, start: float) -> Completion:
        if resp.status_code != 200:
            text = (await resp.aread()).decode(errors="replace")
            raise EngineRequestError(
                "http", f"POST {path} answered {resp.status_code}: {_error_message(text)}", status=resp.status_code
            )
        chat = path.endswith("chat/completions")
        parts: list[str] = []
        out = Completion("", None, None, None, 0.0)
        first_choice: float | None = None
        async for line in resp.aiter_lines():
            if not line.startswith("data:"):
                continue  # blank separators, comments (": ping"), event: lines
            data = line[5:].strip()
            if data == "[DONE]":
                # Keep reading to the end of the body (the chunked terminator follows at once): leaving early
                # would close the connection instead of returning it to the pool.
                out.saw_done = True
                continue
            if out.saw_done:
                continue
            try:
                chunk = json.loads(data)
            except ValueError:
                raise EngineRequestError("protocol", f"POST {path}: stream chunk is not JSON: {data[:200]!r}") from None
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk or chunk.get("object") == "error":
                raise EngineRequestError("engine-error", f"POST {path}: the engine reported an error mid-stream: "
                                         f"{_error_message(data)}")
            usage = chunk.get("usage")
            if usage:
                out.prompt_tokens, out.completion_tokens = _usage(usage)
            for choice in chunk.get("choices") or []:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                if first_choice is None:
                    first_choice = time.perf_counter() - start
                piece = _choice_text(choice, chat=chat, stream=True)
                if piece:
                    now = time.perf_counter()
                    if out.ttft_s is None:
                        out.ttft_s = now - start
                    out.token_times.append(now)
                    out.chunks += 1
                    parts.append(piece)
                if choice.get("finish_reason"):
                    out.finish_reason = str(choice["finish_reason"])
        out.text = "".join(parts)
        if out.ttft_s is None:
            out.ttft_s = first_choice  # only empty pieces came (special tokens): the first chunk is the first token
        out.latency_s = time.perf_counter() - start
        return out


def _as_chat(request: Request) -> Request:
    return Request(request.max_tokens, messages=(("user", request.prompt or ""),),
                   temperature=request.temperature, stream=request.stream)


def _choice_text(choice: dict[str, Any], *, chat: bool, stream: bool) -> str:
    """Visible text plus any reasoning text (vLLM's reasoning parsers split thinking out of ``content``;
    a runaway or a loop in the thinking counts as much as one in the answer)."""
    if chat:
        holder = choice.get("delta" if stream else "message") or {}
        if not isinstance(holder, dict):
            return ""
        pieces = [holder.get("reasoning_content"), holder.get("reasoning"), holder.get("content")]
        return "".join(p for p in pieces if isinstance(p, str))
    text = choice.get("text")
    return text if isinstance(text, str) else ""


def _usage(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    p, c = usage.get("prompt_tokens"), usage.get("completion_tokens")
    return (int(p) if isinstance(p, int | float) else None, int(c) if isinstance(c, int | float) else None)


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
