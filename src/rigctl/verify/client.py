"""The OpenAI-compatible HTTP client verify talks through: vLLM's shapes first, tolerant of servers that
differ (no ``data: [DONE]``, usage only on the last chunk or not at all, no ``/tokenize``, ``stream_options``
refused). Every request has a deadline and every answer a size cap (see "Bounds" below); a failure is an
``EngineRequestError`` whose ``kind`` says what went wrong, so checks can turn it into a finding.

``EngineAPI`` is the Protocol the checks depend on; ``HttpEngine`` is the real adapter (httpx, async).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import math
import re
import time
import urllib.parse
import zlib
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import httpx

from rigctl.errors import RigctlError, UsageError
from rigctl.recipe.defaults import HEALTH_PATH, HEALTH_PATH_PATTERN
from rigctl.util.publish import MODELS_PATH, OPENAI_PATH
from rigctl.verify.enginejson import EngineJSONError, as_count, parse

__all__ = ["as_count"]  # re-exported: the figure rule's home is verify.enginejson

SHARD = 32  # connections per httpx pool

ErrorKind = Literal["timeout", "connect", "http", "protocol", "engine-error", "cut-off", "too-large", "not-openai"]

# --- Bounds ---------------------------------------------------------------------------------------------
# Time is bounded by the deadlines; memory by these caps on the bytes of each answer. Every body is read as
# a stream and counted AFTER decompression, so a compression bomb stops at the same cap as a plain endless
# body. rigctl undoes Content-Encoding itself (``_decoded``), asking zlib for at most DECODE_STEP bytes per
# call: httpx's own decoders inflate a whole 64 KiB read at once (~1000x for zlib) and chain stacked
# encodings ("gzip, gzip": ~1000x1000). Headers are bounded by httpcore: h11 refuses a head larger than
# 100 KiB (MAX_INCOMPLETE_EVENT_SIZE), which surfaces as a RemoteProtocolError.
KIB = 1024
MIB = 1024 * KIB
API_LIMIT = 4 * MIB  # /health, /v1/models: small JSON answers
ERROR_SHOWN = 64 * KIB  # of an error answer only this much is read: its message is all that is quoted
TOKENIZE_PER_PROMPT_BYTE = 8  # /tokenize lists at most one id (<= 7 digits and a comma) per prompt byte
ANSWER_BASE = 256 * KIB  # a completion: a fixed allowance (role, usage and finish chunks) ...
ANSWER_PER_TOKEN = 2 * KIB  # ... plus this per requested token (a vLLM stream chunk is ~300 bytes a token)
ANSWER_CEILING = 64 * MIB  # ... and never more than this, whatever max_tokens says
SSE_LINE_LIMIT = 1 * MIB  # one line of an event stream (one chunk's JSON)
DECODE_STEP = 256 * KIB  # the most one decompression call may produce
STALE_RETRIES = 2  # the fewest resends of a request whose kept-alive connection was closed before any answer




def answer_limit(max_tokens: int) -> int:
    """The most bytes a completion of ``max_tokens`` tokens may take, streamed or not."""
    return min(ANSWER_BASE + max_tokens * ANSWER_PER_TOKEN, ANSWER_CEILING)


KEPT_BASE = 4 * KIB  # of a completion's text, verify keeps at most this ...
KEPT_PER_TOKEN = 32  # ... plus this per requested token: an honest answer always fits (a token is a few chars)


def kept_limit(max_tokens: int) -> int:
    """The most characters of one answer's text (and entries of its token times) verify keeps: a server that
    sends more than ``max_tokens`` could honestly produce cannot make a long soak hold more than an honest one
    would. The answer is still read to its end (up to ``answer_limit``), and its chunks all counted."""
    return KEPT_BASE + max_tokens * KEPT_PER_TOKEN


def tokenize_limit(prompt: str) -> int:
    return API_LIMIT + TOKENIZE_PER_PROMPT_BYTE * len(prompt.encode())


def size_text(n: int) -> str:
    """``4 MiB``, ``768 KiB``, ``100 bytes``: caps as an operator reads them."""
    for unit, name in ((MIB, "MiB"), (KIB, "KiB")):
        if n >= unit:
            return f"{n / unit:.3g} {name}"
    return f"{n} bytes"


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
    health_path: str = HEALTH_PATH

    def __post_init__(self) -> None:
        url = check_base_url(self.base_url).rstrip("/")
        if self.api_key and not _VISIBLE_ASCII.fullmatch(self.api_key):
            # It goes into an HTTP header: a CR/LF would split it, a non-ASCII character crash the encoder.
            raise UsageError("the API key must be printable ASCII without spaces or control characters")
        if not re.fullmatch(HEALTH_PATH_PATTERN, self.health_path):  # the recipe's rule
            raise UsageError(f"health path {self.health_path!r}: must be a path on the endpoint, like /health")
        if url.endswith(OPENAI_PATH):
            url = url[: -len(OPENAI_PATH)]  # operators paste OpenAI base URLs; the API paths are added here
        object.__setattr__(self, "base_url", url)


_VISIBLE_ASCII = re.compile(r"[!-~]+")  # printable ASCII, no space, no control character
_HOSTNAME = re.compile(r"[A-Za-z0-9._-]+")


def check_base_url(url: str) -> str:
    """``url`` when it is an http(s) base URL rigctl can use, else UsageError saying why. Every endpoint
    (--url, a recipe's publish address, an install record) passes through here, via ``Endpoint``."""
    why = _url_problem(url)
    if why is not None:
        shown = re.sub(r"//[^/]*@", "//***@", url)  # never echo a password
        if len(shown) > 200:
            shown = shown[:200] + "..."
        raise UsageError(f"endpoint URL {shown!r}: {why}", fix="give a base URL such as http://127.0.0.1:8000")
    return url


def _url_problem(url: str) -> str | None:
    bad = next((i for i, c in enumerate(url) if not _VISIBLE_ASCII.fullmatch(c)), None)
    if bad is not None:
        return f"character {url[bad]!r} at position {bad} (spaces, control and non-ASCII characters are refused)"
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port  # raises on a port that is not a number in 0-65535
    except ValueError as exc:
        return f"cannot be parsed ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {parts.scheme + ':' if parts.scheme else '(none)'} is not http: or https:"
    if "@" in parts.netloc:
        return "credentials in the URL would be printed in reports; pass --api-key instead"
    host = parts.hostname or ""
    if host.startswith("[") or ":" in host:
        try:
            ipaddress.IPv6Address(host.strip("[]"))
        except ValueError:
            return f"{host!r} is not an IPv6 address"
    elif not _HOSTNAME.fullmatch(host):
        return "no host name" if not host else f"{host!r} is not a host name"
    if port == 0:
        return "port 0 is not a port a server listens on"
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        return "a base URL takes no ?query or #fragment"
    try:
        httpx.URL(url)  # the parser that will use it must agree
    except httpx.InvalidURL as exc:
        return str(exc)
    return None


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
    clipped: bool = False  # more text came than ``kept_limit`` keeps; ``text`` is its beginning

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
    content_type: str = ""  # the media type alone, lower case ("text/html"); "" when the server sent none


class EngineAPI(Protocol):
    """What the checks need from an engine."""

    endpoint: Endpoint

    async def get(self, path: str, *, timeout: float) -> HttpAnswer: ...

    async def models(self, *, timeout: float) -> list[dict[str, Any]]: ...

    async def tokenize(self, prompt: str, *, timeout: float) -> int | None: ...

    async def post_json(self, path: str, payload: dict[str, Any], *, timeout: float, limit: int) -> HttpAnswer: ...

    async def complete(self, request: Request, *, timeout: float, idle_timeout: float | None = None) -> Completion: ...


def _describe_http_error(exc: httpx.HTTPError) -> tuple[ErrorKind, str]:
    if isinstance(exc, httpx.TimeoutException):
        return "timeout", f"timed out ({type(exc).__name__})"
    if isinstance(exc, httpx.ConnectError):
        return "connect", f"cannot connect: {exc}"
    if isinstance(exc, httpx.RemoteProtocolError):
        # The peer closed mid-answer, or sent what HTTP/1.1 refuses (e.g. a head over h11's 100 KiB).
        return "cut-off", f"connection closed mid-response or malformed answer: {exc}"
    if isinstance(exc, httpx.DecodingError | httpx.ProtocolError | httpx.UnsupportedProtocol):
        return "protocol", f"{type(exc).__name__}: {exc}"
    return "connect", f"{type(exc).__name__}: {exc}"


def _error_message(body: str) -> str:
    """The message of an error answer, as one line of at most 300 characters: it lands in a report's cell,
    so an HTML error page is named by its title, never quoted whole."""
    try:
        data = parse(body)
    except EngineJSONError:
        return _html_page(body) if _looks_like_html(body) else _one_line(body)
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return _one_line(err["message"])
        if isinstance(data.get("detail"), str):
            return _one_line(data["detail"])
    return _one_line(body)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


_TITLE = re.compile(r"<title[^>]*>(.*?)</title", re.IGNORECASE | re.DOTALL)


def _looks_like_html(body: str, content_type: str = "") -> bool:
    head = body.lstrip()[:100].lower()
    return content_type in ("text/html", "application/xhtml+xml") or head.startswith(("<!doctype html", "<html"))


def _html_page(body: str) -> str:
    found = _TITLE.search(body[:ERROR_SHOWN])
    title = _one_line(found.group(1), 80) if found else ""
    return f"an HTML page titled {title!r}" if title else "an HTML page"


NO_OPENAI_API = (404, 405, 501)  # statuses that say no /v1/models is served here at all


def not_openai(answer: HttpAnswer) -> str | None:
    """Why this answer to GET /v1/models shows that no OpenAI-compatible API answers at the URL (a web
    server's HTML page, a route that does not exist, JSON of another shape), or None when it may still
    be one. A 5xx page is no verdict: a proxy says 502 while the engine behind it boots, and an engine
    that refuses us (401, 429) is still an engine."""
    said = f"GET /v1/models answered {answer.status} {answer.content_type or 'without a content type'}"
    if answer.status >= 500 and answer.status not in NO_OPENAI_API:
        return None
    data: Any = None
    unread: str | None = None  # why a 200 answer is not JSON rigctl reads
    try:
        data = parse(answer.body, "it") if answer.status == 200 else None
    except EngineJSONError as exc:
        unread = str(exc)
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        return None  # a model list, whatever the server called its media type
    if _looks_like_html(answer.body, answer.content_type):
        return f"{said}: {_html_page(answer.body)}"
    if answer.status in NO_OPENAI_API:
        return said + (f": {_error_message(answer.body)}" if answer.body.strip() else "")
    if answer.status != 200:
        return None
    if unread is not None:
        return f"{said}, {unread.removeprefix('it is ')}: {_one_line(answer.body, 80)}"
    return f'{said}, not an OpenAI model list (no "data" list): {_one_line(answer.body, 80)}'


# --- what a model list says: the one reading of /v1/models's entries (``HttpEngine.models`` gives them) ---


def listed_ids(entries: Sequence[dict[str, Any]]) -> list[str]:
    """The model names a list serves (entries without a text id name none)."""
    return [e["id"] for e in entries if isinstance(e.get("id"), str)]


def listed_entry(entries: Sequence[dict[str, Any]], name: str) -> dict[str, Any] | None:
    """The entry that serves ``name``, or None."""
    return next((e for e in entries if e.get("id") == name), None)


def listed_context(entry: dict[str, Any] | None) -> int | None:
    """The entry's ``max_model_len`` as a count (vLLM's and SGLang's context per request), or None."""
    return as_count(entry.get("max_model_len")) if entry is not None else None


class HttpEngine:
    """The httpx adapter. One AsyncClient per run, its pool sized for the soak's concurrency."""

    def __init__(self, endpoint: Endpoint, *, max_connections: int = 64, trust_env: bool = True) -> None:
        """``trust_env``: whether proxy settings of the environment apply (deploy's probe of its own local
        engine passes False, so that no proxy stands between it and the engine)."""
        self.endpoint = endpoint
        # identity: a well-behaved server then sends what the caps count; a compressed answer is decoded
        # and counted all the same (see "Bounds").
        headers = {"accept": "application/json", "accept-encoding": "identity"}
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
            httpx.AsyncClient(base_url=endpoint.base_url, headers=headers, limits=limits, timeout=httpx.Timeout(60.0),
                              trust_env=trust_env)
            for _ in range(shards)
        ]
        self._next = itertools.cycle(self._shards)
        # every kept-alive connection of every shard may be a stale one at the same moment (after a burst of
        # streamed answers), and each resend uses one up: that many resends reach a fresh connection
        self._stale_retries = max(STALE_RETRIES, per_shard * shards)
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
        return await self._call("GET", path, None, timeout=timeout, limit=API_LIMIT)

    async def post_json(self, path: str, payload: dict[str, Any], *, timeout: float, limit: int) -> HttpAnswer:
        """One JSON POST to an engine's own endpoint (a dialect's tokenizer)."""
        return await self._call("POST", path, payload, timeout=timeout, limit=limit)

    async def _call(self, method: str, path: str, payload: dict[str, Any] | None, *, timeout: float,
                    limit: int) -> HttpAnswer:
        """A 200 answer up to ``limit`` bytes, any other only its first ERROR_SHOWN bytes, all within
        ``timeout``; a failed exchange is EngineRequestError."""
        start = time.perf_counter()
        try:
            async with asyncio.timeout(timeout):
                status, body, media = await self._fetch(method, path, payload, timeout=timeout, limit=limit)
        except TimeoutError:
            raise EngineRequestError("timeout", f"{method} {path} did not answer within {timeout:g}s") from None
        except httpx.HTTPError as exc:
            kind, msg = _describe_http_error(exc)
            raise EngineRequestError(kind, f"{method} {path}: {msg}") from None
        return HttpAnswer(status, body, time.perf_counter() - start, media)

    @contextlib.asynccontextmanager
    async def _exchange(
        self, method: str, path: str, payload: dict[str, Any] | None, timeout: float | httpx.Timeout
    ) -> AsyncIterator[httpx.Response]:
        """One request, its answer streamed. A kept-alive connection the server closed just before it was
        reused (llama.cpp's server closes every connection after a streamed answer, without saying so) ends
        before any answer came, or is reset when the server closed it with the request unread (ECONNRESET:
        a ReadError before the answer's head): the request is sent again on another connection, as many
        times as the pools keep connections alive (each stale one is used up by the attempt that meets it).
        Nothing reached the engine's handler, so nothing is sent twice."""
        for attempt in range(self._stale_retries + 1):
            client = self._client
            request = client.build_request(method, path, json=payload, timeout=timeout)
            try:
                resp = await client.send(request, stream=True)
            except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
                stale = isinstance(exc, httpx.ReadError) or "without sending a response" in str(exc)
                if attempt < self._stale_retries and stale:
                    continue
                raise
            break
        try:
            yield resp
        finally:
            await resp.aclose()

    async def _fetch(
        self, method: str, path: str, payload: dict[str, Any] | None, *, timeout: float | httpx.Timeout, limit: int
    ) -> tuple[int, str, str]:
        """One exchange read whole: a 200 answer up to ``limit`` bytes (more is EngineRequestError
        ``too-large``), any other answer only its first ERROR_SHOWN bytes; and its media type."""
        async with self._exchange(method, path, payload, timeout) as resp:
            what = f"{method} {self.endpoint.base_url}{path}"
            media = resp.headers.get("content-type", "").split(";", 1)[0].strip().lower()[:100]
            if resp.status_code != 200:
                return resp.status_code, await _read_prefix(resp, what, ERROR_SHOWN), media
            body = await _read_body(resp, what, limit)
            return 200, body.decode(errors="replace"), media

    async def models(self, *, timeout: float) -> list[dict[str, Any]]:
        """The served models. The first probe of the OpenAI API as such: an answer that shows there is none
        at the URL is EngineRequestError ``not-openai`` (verify then stops, instead of sending completions
        to a web server)."""
        answer = await self.get(MODELS_PATH, timeout=timeout)
        foreign = not_openai(answer)
        if foreign is not None:
            raise EngineRequestError(
                "not-openai", f"not an OpenAI-compatible server at {self.endpoint.base_url} ({foreign})",
                status=answer.status)
        if answer.status != 200:
            raise EngineRequestError(
                "http", f"GET /v1/models answered {answer.status}: {_error_message(answer.body)}", status=answer.status
            )
        try:
            data = parse(answer.body, "the answer")
        except EngineJSONError as exc:
            raise EngineRequestError("protocol", f"GET /v1/models: not an OpenAI model list ({exc})") from None
        entries = data.get("data") if isinstance(data, dict) else None
        if not isinstance(entries, list):
            raise EngineRequestError("protocol", 'GET /v1/models: not an OpenAI model list (no "data" list)')
        return [e for e in entries if isinstance(e, dict)]

    async def tokenize(self, prompt: str, *, timeout: float) -> int | None:
        """The server's own token count for a completion prompt (vLLM's POST /tokenize), or None when the
        server has no such route."""
        if self.has_tokenize is False:
            return None
        payload = {"model": self.endpoint.model, "prompt": prompt}
        answer = await self.post_json("/tokenize", payload, timeout=timeout, limit=tokenize_limit(prompt))
        status, body = answer.status, answer.body
        if status in (404, 405, 501):
            self.has_tokenize = False
            return None
        if status != 200:
            raise EngineRequestError("http", f"POST /tokenize answered {status}: {_error_message(body)}",
                                     status=status)
        try:
            data = parse(body, "the answer")
        except EngineJSONError as exc:  # a finding, as a cap that is hit is
            raise EngineRequestError("protocol", f"POST /tokenize: {exc}") from None
        count = None
        if isinstance(data, dict) and "count" in data:
            count = as_count(data["count"])
        elif isinstance(data, dict) and isinstance(data.get("tokens"), list):
            count = len(data["tokens"])
        if count is None:
            self.has_tokenize = False  # something else lives at /tokenize; estimate instead
            return None
        self.has_tokenize = True
        return count

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
        what = f"POST {self.endpoint.base_url}{path}"
        limit = answer_limit(request.max_tokens)
        start = time.perf_counter()
        try:
            if not request.stream:
                status, text, _ = await self._fetch("POST", path, body, timeout=http_timeout, limit=limit)
                if status == 200:
                    return self._parse_full(path, text, start, kept_limit(request.max_tokens))
            else:
                async with self._exchange("POST", path, body, http_timeout) as resp:
                    if resp.status_code == 200:
                        async with contextlib.aclosing(_sse_lines(resp, what, limit)) as lines:
                            return await self._parse_stream(path, lines, start, kept_limit(request.max_tokens))
                    status, text = resp.status_code, await _read_prefix(resp, what, ERROR_SHOWN)
        except httpx.TimeoutException as exc:
            raise EngineRequestError("timeout", f"POST {path}: no data for {idle_timeout or timeout:g}s "
                                     f"({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            kind, msg = _describe_http_error(exc)
            raise EngineRequestError(kind, f"POST {path}: {msg}") from None
        if status in (400, 422) and "stream_options" in body and ("stream_options" in text or "include_usage" in text):
            # An older server that rejects the field: retry without it, once, and remember.
            self.stream_options_ok = False
            return await self._send(request, timeout, idle_timeout)
        raise EngineRequestError("http", f"POST {path} answered {status}: {_error_message(text)}", status=status)

    @staticmethod
    def _parse_full(path: str, body: str, start: float, keep: int) -> Completion:
        latency = time.perf_counter() - start
        try:
            data = parse(body, "the answer")
        except EngineJSONError as exc:
            raise EngineRequestError("protocol", f"POST {path}: {exc}: {_one_line(body, 200)!r}") from None
        choices = data.get("choices") if isinstance(data, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        if not isinstance(choice, dict):
            raise EngineRequestError("protocol", f"POST {path}: answer has no choices: {_one_line(body, 200)!r}")
        text = _choice_text(choice, chat=path.endswith("chat/completions"), stream=False)
        prompt_tokens, completion_tokens = _usage(data.get("usage"))
        return Completion(text[:keep], _finish_reason(choice), prompt_tokens, completion_tokens, latency,
                          clipped=len(text) > keep)

    @staticmethod
    async def _parse_stream(path: str, lines: AsyncIterator[str], start: float, keep: int) -> Completion:
        chat = path.endswith("chat/completions")
        parts: list[str] = []
        kept = 0
        out = Completion("", None, None, None, 0.0)
        first_choice: float | None = None
        async for line in lines:
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
                chunk = parse(data, "a stream chunk")
            except EngineJSONError as exc:
                raise EngineRequestError("protocol", f"POST {path}: {exc}: {_one_line(data, 200)!r}") from None
            if not isinstance(chunk, dict):
                continue
            if "error" in chunk or chunk.get("object") == "error":
                raise EngineRequestError("engine-error", f"POST {path}: the engine reported an error mid-stream: "
                                         f"{_error_message(data)}")
            usage = chunk.get("usage")
            if usage:
                out.prompt_tokens, out.completion_tokens = _usage(usage)
            choices = chunk.get("choices")
            for choice in choices if isinstance(choices, list) else []:
                if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                    continue
                if first_choice is None:
                    first_choice = time.perf_counter() - start
                piece = _choice_text(choice, chat=chat, stream=True)
                if piece:
                    now = time.perf_counter()
                    if out.ttft_s is None:
                        out.ttft_s = now - start
                    out.chunks += 1
                    take = piece[: max(keep - kept, 0)]  # past kept_limit only the count grows
                    if take:
                        out.token_times.append(now)
                        parts.append(take)
                        kept += len(take)
                    out.clipped = out.clipped or len(take) < len(piece)
                out.finish_reason = _finish_reason(choice) or out.finish_reason
        out.text = "".join(parts)
        if out.ttft_s is None:
            out.ttft_s = first_choice  # only empty pieces came (special tokens): the first chunk is the first token
        out.latency_s = time.perf_counter() - start
        return out


async def _decoded(resp: httpx.Response, what: str) -> AsyncGenerator[bytes, None]:
    """The body with its Content-Encoding undone, in pieces of at most DECODE_STEP bytes beyond the network
    reads (64 KiB). gzip and deflate (zlib-wrapped, or raw as some servers send it) are undone; rigctl asks
    for identity, so anything else, or stacked encodings, is refused rather than guessed at."""
    codings = [c.strip().lower() for c in resp.headers.get_list("content-encoding", split_commas=True)]
    codings = [c for c in codings if c not in ("", "identity")]
    if not codings:
        async for raw in resp.aiter_raw():
            yield raw
        return
    if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
        raise EngineRequestError("protocol", f"{what}: Content-Encoding {', '.join(codings)!r} is not supported "
                                 "(rigctl asks for identity and undoes one gzip or deflate at most)")
    gzip = codings[0] != "deflate"
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 16 if gzip else zlib.MAX_WBITS)
    first = True
    try:
        async for raw in resp.aiter_raw():
            data = raw
            while data and not inflate.eof:  # whatever follows the end of the stream is ignored
                try:
                    piece = inflate.decompress(data, DECODE_STEP)
                except zlib.error:
                    if gzip or not first:
                        raise
                    inflate = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, without the zlib wrapper
                    piece = inflate.decompress(data, DECODE_STEP)
                first = False
                data = inflate.unconsumed_tail
                if piece:
                    yield piece
        while not inflate.eof and (piece := inflate.decompress(inflate.unconsumed_tail, DECODE_STEP)):
            yield piece
    except zlib.error as exc:
        raise EngineRequestError("protocol", f"{what}: the {codings[0]} answer does not decode ({exc})") from None


async def _read_body(resp: httpx.Response, what: str, limit: int) -> bytes:
    """The whole (decoded) body, or EngineRequestError ``too-large`` as soon as it passes ``limit`` bytes."""
    body = bytearray()
    async with contextlib.aclosing(_decoded(resp, what)) as chunks:
        async for chunk in chunks:
            if len(body) + len(chunk) > limit:
                raise EngineRequestError("too-large", f"{what}: answer larger than {size_text(limit)}; "
                                         "stopped reading it")
            body += chunk
    return bytes(body)


async def _read_prefix(resp: httpx.Response, what: str, limit: int) -> str:
    """At most the first ``limit`` bytes of the (decoded) body; the rest is left unread."""
    head = bytearray()
    async with contextlib.aclosing(_decoded(resp, what)) as chunks:
        async for chunk in chunks:
            head += chunk[: limit - len(head)]
            if len(head) >= limit:
                break
    return head.decode(errors="replace")


_EOL = re.compile(rb"\r\n|\r|\n")


async def _sse_lines(resp: httpx.Response, what: str, limit: int) -> AsyncGenerator[str, None]:
    """The lines of an event stream, each at most SSE_LINE_LIMIT bytes and all of them at most ``limit``
    (httpx's aiter_lines would buffer a line without end). Only each new chunk is searched for line ends,
    so a line trickled in byte by byte costs linear time. A CR LF split across two chunks yields one extra
    blank line, which the SSE grammar ignores."""
    total = 0
    line = bytearray()
    async with contextlib.aclosing(_decoded(resp, what)) as chunks:
        async for chunk in chunks:
            total += len(chunk)
            if total > limit:
                raise EngineRequestError("too-large", f"{what}: stream longer than {size_text(limit)}; "
                                         "stopped reading it")
            at = 0
            for end in _EOL.finditer(chunk):
                line += chunk[at:end.start()]
                if len(line) > SSE_LINE_LIMIT:
                    break
                yield line.decode(errors="replace")
                line.clear()
                at = end.end()
            else:
                line += chunk[at:]
            if len(line) > SSE_LINE_LIMIT:
                raise EngineRequestError("too-large", f"{what}: one stream line longer than "
                                         f"{size_text(SSE_LINE_LIMIT)}; stopped reading it")
    if line:
        yield line.decode(errors="replace")


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


def _finish_reason(choice: dict[str, Any]) -> str | None:
    """Why the engine stopped (``stop``, ``length``), as short text; anything else the engine put there is none."""
    reason = choice.get("finish_reason")
    return _one_line(reason, 40) if isinstance(reason, str) and reason else None


def _usage(usage: Any) -> tuple[int | None, int | None]:
    if not isinstance(usage, dict):
        return None, None
    return as_count(usage.get("prompt_tokens")), as_count(usage.get("completion_tokens"))


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
