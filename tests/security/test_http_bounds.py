"""Issue #10, hostile HTTP servers: verify reads every answer under a cap, counted after decompression, and a
cap that is hit is a failing finding naming the URL and the cap, never an exception, a hang or gigabytes of
memory. Also: an endpoint URL rigctl cannot use is a usage error (exit 2), never a traceback.

Every server here is a real one on 127.0.0.1 (an ephemeral port), in a thread of the test process; every
hostile writer gives up after SERVE_FOR_S whatever the client does, and every test has a timeout."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from rigctl.errors import UsageError
from rigctl.exitcodes import ExitCode
from rigctl.verify import Endpoint, Expectations, run_checks
from rigctl.verify.client import (
    API_LIMIT,
    ERROR_SHOWN,
    SSE_LINE_LIMIT,
    EngineRequestError,
    HttpEngine,
    Request,
    answer_limit,
    kept_limit,
    size_text,
)
from rigctl.verify.report import VerifyReport

pytestmark = pytest.mark.timeout(120)

MODEL = "m"
SERVE_FOR_S = 30.0  # no hostile writer runs longer than this
BLOCK = 64 * 1024
RSS_BOUND_KIB = 300 * 1024  # a correctness bound: without the caps these servers take rigctl to gigabytes

Route = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


# --- the servers ----------------------------------------------------------------------------------------


def head(h: BaseHTTPRequestHandler, status: int = 200, ctype: str = "application/json", **headers: str) -> None:
    h.send_response(status)
    h.send_header("content-type", ctype)
    for name, value in headers.items():
        h.send_header(name.replace("_", "-"), value)
    h.send_header("connection", "close")
    h.end_headers()


def forever(*blocks: bytes) -> Iterator[bytes]:
    """``blocks[0]`` ... then the last block again and again, until SERVE_FOR_S has passed."""
    yield from blocks[:-1]
    deadline = time.monotonic() + SERVE_FOR_S
    while time.monotonic() < deadline:
        yield blocks[-1]


def chunked(h: BaseHTTPRequestHandler, blocks: Iterable[bytes]) -> None:
    for block in blocks:
        h.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
    h.wfile.write(b"0\r\n\r\n")


def small_json(data: object) -> Route:
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        head(h, content_length=str(len(raw)))
        h.wfile.write(raw)
    return route


def completion(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """A well-behaved short answer, streamed or not."""
    if not body.get("stream"):
        small_json({"choices": [{"index": 0, "text": " Paris.", "message": {"content": " Paris."},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 8, "completion_tokens": 2}})(h, body)
        return
    head(h, ctype="text/event-stream", transfer_encoding="chunked")
    chunk = {"choices": [{"index": 0, "text": " Paris.", "delta": {"content": " Paris."}, "finish_reason": "stop"}]}
    chunked(h, [b"data: " + json.dumps(chunk).encode() + b"\n\n", b"data: [DONE]\n\n"])


def tokenize_route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """A server tokenizer of four characters a token."""
    small_json({"count": len(str(body.get("prompt", ""))) // 4})(h, body)


DEFAULTS: dict[str, Route] = {
    "/health": small_json({}),
    "/v1/models": small_json({"object": "list", "data": [{"id": MODEL, "max_model_len": 4096}]}),
    "/v1/completions": completion,
    "/v1/chat/completions": completion,
    "/tokenize": tokenize_route,
}


def endless(status: int = 200, ctype: str = "application/json") -> Route:
    """A chunked body that never ends."""
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, status, ctype, transfer_encoding="chunked")
        chunked(h, forever(b'{"object": "list", "data": [', b'{"id": "m", "max_model_len": 4096},' * 1800))
    return route


def length_lie(*, endless_body: bool) -> Route:
    """Content-Length: a petabyte; then either bytes without end or a few bytes and a closed connection."""
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, content_length=str(10**15))
        for block in (forever(b"[", b"0," * (BLOCK // 2)) if endless_body else [b'{"data": [']):
            h.wfile.write(block)
    return route


SSE_EVENT = b'data: {"choices": [{"index": 0, "text": "a", "delta": {"content": "a"}, "finish_reason": null}]}\n\n'


def endless_sse(encoding: str | None = None) -> Route:
    """Valid-looking chunks that never finish (optionally gzip-compressed, flushed block by block)."""
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        blocks = forever(SSE_EVENT * (BLOCK // len(SSE_EVENT)))
        if encoding is None:
            head(h, ctype="text/event-stream", transfer_encoding="chunked")
            chunked(h, blocks)
            return
        head(h, ctype="text/event-stream", transfer_encoding="chunked", content_encoding=encoding)
        squeeze = zlib.compressobj(9, zlib.DEFLATED, 31)
        chunked(h, (squeeze.compress(b) + squeeze.flush(zlib.Z_SYNC_FLUSH) for b in blocks))
    return route


def giant_line(start: bytes, filler: bytes = b"a") -> Route:
    """One SSE line that never ends: ``start`` and then ``filler`` without a line break."""
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, ctype="text/event-stream", transfer_encoding="chunked")
        chunked(h, forever(start, filler * (BLOCK // len(filler))))
    return route


def endless_headers(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    for block in forever(b"x-pad: " + b"a" * 1000 + b"\r\n"):
        h.wfile.write(block)


@functools.cache
def bomb_bytes(wbits: int, mib: int) -> bytes:
    """A deflate stream (gzip 31, zlib 15, raw -15) of ``mib`` MiB of zeros, a few KiB per GiB: one MiB
    compressed after a full flush (which resets the compressor) is the same block every time, so the block
    is repeated. Its trailer does not match (the client must stop long before it)."""
    squeeze = zlib.compressobj(9, zlib.DEFLATED, wbits)
    zeros = bytes(1 << 20)
    first = squeeze.compress(zeros) + squeeze.flush(zlib.Z_FULL_FLUSH)
    block = squeeze.compress(zeros) + squeeze.flush(zlib.Z_FULL_FLUSH)
    assert block == squeeze.compress(zeros) + squeeze.flush(zlib.Z_FULL_FLUSH)
    return first + block * (mib - 3) + squeeze.flush()


BOMB_MIB = 4000  # ~4 GiB once inflated
BOMBS = {"gzip": ("gzip", 31), "deflate": ("deflate", 15), "raw-deflate": ("deflate", -15)}


def bomb(kind: str, *, content_type: str = "application/json") -> Route:
    encoding, wbits = BOMBS[kind]
    data = bomb_bytes(wbits, BOMB_MIB)
    assert len(data) < 8 * 1024 * 1024

    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, ctype=content_type, content_length=str(len(data)), content_encoding=encoding)
        for at in range(0, len(data), BLOCK):
            h.wfile.write(data[at:at + BLOCK])
    return route


def by_stream(streamed: Route, plain: Route) -> Route:
    """One route for a completion path: ``streamed`` for stream requests, ``plain`` for the others."""
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        (streamed if body.get("stream") else plain)(h, body)
    return route


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that stops reading (a broken pipe) is what most of these servers expect


@contextlib.contextmanager
def serve(routes: dict[str, Route]) -> Iterator[str]:
    """A server on 127.0.0.1: ``routes`` over DEFAULTS (well-behaved answers). Yields its base URL."""
    table = {**DEFAULTS, **routes}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def answer(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length)) if length else {}
            route = table.get(self.path)
            self.close_connection = True
            if route is None:
                head(self, 404, content_length="0")
                return
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):  # the client stopped reading
                route(self, body)

        do_GET = do_POST = answer

    server = _Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


# --- helpers --------------------------------------------------------------------------------------------

TIMEOUT_S = 20.0  # per request; every cap below must be hit well before it


def verify(url: str, checks: tuple[str, ...]) -> VerifyReport:
    return run_checks(Endpoint(url, MODEL),
                      Expectations(context=4096, request_timeout_s=TIMEOUT_S, health_timeout_s=TIMEOUT_S), checks)


def status(report: VerifyReport) -> dict[str, str]:
    return {c.id: c.status for c in report.checks}


def message(report: VerifyReport, check: str) -> str:
    result = report.get(check)
    assert result is not None
    return result.message


def complete(url: str, request: Request) -> EngineRequestError:
    """The EngineRequestError one completion ends in (the test fails if it succeeds)."""
    async def go() -> EngineRequestError:
        async with HttpEngine(Endpoint(url, MODEL)) as engine:
            try:
                await engine.complete(request, timeout=TIMEOUT_S, idle_timeout=TIMEOUT_S)
            except EngineRequestError as err:
                return err
        raise AssertionError("the hostile answer was accepted")
    return asyncio.run(go())


def tokenize_error(url: str, prompt: str) -> EngineRequestError:
    async def go() -> EngineRequestError:
        async with HttpEngine(Endpoint(url, MODEL)) as engine:
            try:
                await engine.tokenize(prompt, timeout=TIMEOUT_S)
            except EngineRequestError as err:
                return err
        raise AssertionError("the hostile answer was accepted")
    return asyncio.run(go())


def too_large(text: str, url: str, path: str, cap: int) -> bool:
    return f"{url}{path}" in text and f"larger than {size_text(cap)}" in text


# --- plain JSON answers: /health, /v1/models, /tokenize -------------------------------------------------


@pytest.mark.parametrize(("path", "route"), [
    ("/v1/models", endless()),
    ("/v1/models", endless(ctype="text/plain")),
    ("/v1/models", length_lie(endless_body=True)),
    ("/v1/models", bomb("gzip")),
    ("/v1/models", bomb("deflate")),
    ("/v1/models", bomb("raw-deflate")),
    ("/health", endless()),
    ("/health", bomb("gzip", content_type="text/plain")),
], ids=["models-endless", "models-endless-text", "models-length-lie", "models-gzip-bomb", "models-deflate-bomb",
        "models-raw-deflate-bomb", "health-endless", "health-gzip-bomb"])
def test_json_answer_is_cut_at_the_api_cap(path: str, route: Route) -> None:
    with serve({path: route}) as url:
        started = time.monotonic()
        report = verify(url, ("health", "models", "smoke"))
    assert time.monotonic() - started < TIMEOUT_S  # the cap stopped it, not a deadline
    check = "health" if path == "/health" else "models"
    assert status(report)[check] == "fail"
    assert too_large(message(report, check), url, path, API_LIMIT), message(report, check)
    assert size_text(API_LIMIT) == "4 MiB"
    if check == "models":  # the rest of verify still ran, against the well-behaved routes
        assert status(report)["health"] == "pass" and status(report)["smoke"] == "pass"
    else:  # a failed health check stops the engine checks: they are reported as skipped, not lost
        assert status(report)["models"] == "skip" and status(report)["smoke"] == "skip"
    assert not report.ok


@pytest.mark.parametrize("kind", ["endless", "gzip-bomb", "deflate-bomb"])
def test_tokenize_answer_is_capped(kind: str) -> None:
    route = endless() if kind == "endless" else bomb(kind.removesuffix("-bomb"))
    with serve({"/tokenize": route}) as url:
        err = tokenize_error(url, "hello world")
    assert err.kind == "too-large" and f"{url}/tokenize" in err.message and "larger than" in err.message


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip", "deflate, gzip"])
def test_unsupported_or_stacked_encoding_is_refused(encoding: str) -> None:
    """Only one gzip or deflate is undone (rigctl asks for identity): stacked codings would multiply the
    expansion of each read, and codings httpx cannot decode here would be taken for JSON."""
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, content_encoding=encoding, transfer_encoding="chunked")
        chunked(h, forever(bomb_bytes(31, 8)))
    with serve({"/v1/models": route}) as url:
        report = verify(url, ("models",))
    assert status(report)["models"] == "fail"
    assert "is not supported" in message(report, "models") and repr(encoding) in message(report, "models")


def test_gzip_answer_within_the_cap_still_decodes() -> None:
    """The caps refuse only what is too large: a small gzip- or deflate-encoded answer is read as before."""
    models = json.dumps({"data": [{"id": MODEL, "max_model_len": 4096}]}).encode()

    def route(wbits: int, encoding: str) -> Route:
        def answer(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
            squeeze = zlib.compressobj(9, zlib.DEFLATED, wbits)
            data = squeeze.compress(models) + squeeze.flush()
            head(h, content_encoding=encoding, content_length=str(len(data)))
            h.wfile.write(data)
        return answer

    for wbits, encoding in ((31, "gzip"), (15, "deflate"), (-15, "deflate")):
        with serve({"/v1/models": route(wbits, encoding)}) as url:
            report = verify(url, ("models",))
        assert status(report)["models"] == "pass", (encoding, wbits, message(report, "models"))


def test_endless_headers_are_refused_by_h11() -> None:
    """httpx leaves header limits to h11, which refuses a head over httpcore's 100 KiB."""
    with serve({"/v1/models": endless_headers}) as url:
        started = time.monotonic()
        report = verify(url, ("health", "models"))
    assert time.monotonic() - started < TIMEOUT_S
    assert status(report) == {"health": "pass", "models": "fail"}
    assert "malformed" in message(report, "models")


def test_content_length_lie_with_a_short_body_is_a_cut_off() -> None:
    with serve({"/v1/models": length_lie(endless_body=False)}) as url:
        started = time.monotonic()
        report = verify(url, ("models",))
    assert time.monotonic() - started < TIMEOUT_S
    assert status(report)["models"] == "fail" and "connection closed" in message(report, "models")


@pytest.mark.parametrize("path", ["/v1/models", "/v1/completions"])
def test_endless_error_answer_is_read_only_for_its_message(path: str) -> None:
    with serve({path: endless(status=500)}) as url:
        report = verify(url, ("models", "smoke"))
    check = "models" if path == "/v1/models" else "smoke"
    assert status(report)[check] == "fail" and "answered 500" in message(report, check)
    assert len(message(report, check)) < ERROR_SHOWN


# --- completions: a whole answer, and streams -----------------------------------------------------------


@pytest.mark.parametrize("kind", ["endless", "length-lie", "gzip-bomb", "raw-deflate-bomb"])
def test_completion_answer_is_capped_by_max_tokens(kind: str) -> None:
    route = {"endless": endless(), "length-lie": length_lie(endless_body=True)}.get(kind) or bomb(
        kind.removesuffix("-bomb"))
    with serve({"/v1/completions": route}) as url:
        err = complete(url, Request(max_tokens=32, prompt="The capital of France is"))
        report = verify(url, ("health", "smoke", "determinism"))
    assert err.kind == "too-large"
    assert too_large(err.message, url, "/v1/completions", answer_limit(32)), err.message
    assert status(report) == {"health": "pass", "smoke": "fail", "determinism": "fail"}
    assert "larger than" in message(report, "smoke") and "larger than" in message(report, "determinism")


@pytest.mark.parametrize(("path", "encoding"), [("/v1/completions", None), ("/v1/chat/completions", None),
                                                ("/v1/completions", "gzip")])
def test_endless_sse_stream_stops_at_the_stream_cap(path: str, encoding: str | None) -> None:
    chat = path.endswith("chat/completions")
    request = (Request(64, messages=(("user", "hi"),), stream=True) if chat
               else Request(64, prompt="hi", stream=True))
    with serve({path: by_stream(endless_sse(encoding), completion)}) as url:
        started = time.monotonic()
        err = complete(url, request)
    assert time.monotonic() - started < TIMEOUT_S
    assert err.kind == "too-large", err.message
    assert f"{url}{path}: stream longer than {size_text(answer_limit(64))}" in err.message


@pytest.mark.parametrize(("start", "filler"), [
    (b'data: {"choices": [{"index": 0, "text": "', b"a"),  # a data line that never ends
    (b": ", b"ping "),  # a comment line that never ends
    (b"data: ", b"\x00\xff"),  # binary, no line break
])
def test_single_giant_sse_line_is_cut_at_the_line_cap(start: bytes, filler: bytes) -> None:
    max_tokens = 4096  # a stream cap well above the line cap: the line cap must act on its own
    assert answer_limit(max_tokens) > 4 * SSE_LINE_LIMIT
    with serve({"/v1/completions": by_stream(giant_line(start, filler), completion)}) as url:
        err = complete(url, Request(max_tokens, prompt="hi", stream=True))
    assert err.kind == "too-large"
    assert f"one stream line longer than {size_text(SSE_LINE_LIMIT)}" in err.message


def test_well_behaved_stream_with_odd_line_ends_still_parses() -> None:
    """The bounded line reader keeps SSE's grammar: CR LF, bare CR and LF all end a line, in any chunking."""
    events = [{"choices": [{"index": 0, "text": t, "finish_reason": None}]} for t in ("Par", "is", ".")]
    events.append({"choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})
    body = b"".join(b"data: " + json.dumps(e).encode() + eol for e, eol in
                    zip(events, (b"\r\n\r\n", b"\r\r", b"\n\n", b"\r\n\r\n"), strict=True)) + b"data: [DONE]\n\n"

    def route(h: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        head(h, ctype="text/event-stream", transfer_encoding="chunked")
        chunked(h, [body[i:i + 3] for i in range(0, len(body), 3)])  # lines split across chunks, CR LF too

    async def go(url: str) -> str:
        async with HttpEngine(Endpoint(url, MODEL)) as engine:
            done = await engine.complete(Request(16, prompt="hi", stream=True), timeout=TIMEOUT_S)
        assert done.finish_reason == "stop" and done.saw_done
        return done.text

    with serve({"/v1/completions": route}) as url:
        assert asyncio.run(go(url)) == "Paris."


@pytest.mark.parametrize(("stream", "piece", "pieces"), [
    (True, "word ", 3_000),  # many small chunks
    (True, "x" * 4000, 50),  # a few big ones
    (False, "word " * 30_000, 1),  # one plain answer
])
def test_text_kept_of_an_overlong_answer_is_what_max_tokens_allows(stream: bool, piece: str, pieces: int) -> None:
    """More text than max_tokens could honestly carry (but under the answer cap) is counted, not kept: a
    long soak against such a server holds no more than against an honest one."""
    max_tokens = 64
    keep = kept_limit(max_tokens)

    def route(h: BaseHTTPRequestHandler, payload: dict[str, Any]) -> None:
        if not payload.get("stream"):
            small_json({"choices": [{"index": 0, "text": piece, "finish_reason": "length"}]})(h, payload)
            return
        head(h, ctype="text/event-stream", transfer_encoding="chunked")
        event = b"data: " + json.dumps({"choices": [{"index": 0, "text": piece}]}).encode() + b"\n\n"
        chunked(h, [event] * pieces + [b"data: [DONE]\n\n"])

    async def go(url: str) -> Any:
        async with HttpEngine(Endpoint(url, MODEL)) as engine:
            return await engine.complete(Request(max_tokens, prompt="hi", stream=stream), timeout=TIMEOUT_S)

    with serve({"/v1/completions": route}) as url:
        done = asyncio.run(go(url))
    assert done.clipped and len(done.text) == keep
    assert len(done.token_times) <= keep
    if stream:
        assert done.chunks == pieces  # every chunk still counted (runaway detection)


def test_an_honest_answer_is_kept_whole() -> None:
    async def go(url: str) -> Any:
        async with HttpEngine(Endpoint(url, MODEL)) as engine:
            return await engine.complete(Request(16, prompt="hi", stream=True), timeout=TIMEOUT_S)

    with serve({}) as url:
        done = asyncio.run(go(url))
    assert (done.text, done.clipped) == (" Paris.", False)


# --- the whole CLI, in a process of its own: exit 1, one JSON object, bounded memory --------------------


# Runs the command and writes the peak RSS of its children to argv[1]. The measured process is forked from
# this small one: a child forked straight from pytest starts with pytest's resident pages counted in its
# ru_maxrss (fork copies the page tables, and exec keeps the high-water mark), hundreds of MiB late in a run.
_MEASURE = (
    "import resource, subprocess, sys; rc = subprocess.call(sys.argv[2:]); "
    "open(sys.argv[1], 'w').write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)); sys.exit(rc)"
)


def run_measured(argv: list[str], timeout: float = 100.0) -> tuple[int, str, int]:
    """(exit code, stdout, peak RSS in KiB) of one process alone, measured by its own parent."""
    with tempfile.NamedTemporaryFile("r", suffix=".maxrss") as peak:
        try:
            done = subprocess.run([sys.executable, "-c", _MEASURE, peak.name, *argv], stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{argv} ran past {timeout} s") from exc
        return done.returncode, done.stdout.decode(), int(peak.read() or 0)  # Linux: KiB


HOSTILE_SERVERS: dict[str, dict[str, Route]] = {
    # a gzip bomb for the model list, bodies and streams without end for completions
    "bombs-and-endless": {
        "/v1/models": bomb("gzip"),
        "/v1/completions": by_stream(endless_sse(), endless()),
    },
    # a deflate bomb for the whole answers, one line without end for streams, an endless model list
    "giant-line": {
        "/v1/models": endless(),
        "/v1/completions": by_stream(giant_line(b"data: "), bomb("raw-deflate")),
    },
}


@pytest.mark.parametrize("server", sorted(HOSTILE_SERVERS))
def test_cli_verify_against_a_hostile_server_fails_cleanly_in_bounded_memory(server: str) -> None:
    with serve(HOSTILE_SERVERS[server]) as url:
        code, out, peak_kib = run_measured(
            [sys.executable, "-m", "rigctl", "verify", "--url", url, "--model", MODEL, "--context", "4096",
             "--requests", "4", "--concurrency", "2", "--timeout", str(int(TIMEOUT_S)), "--json"])
    assert code == ExitCode.CHECKS_FAILED, out
    doc = json.loads(out)  # one object, and nothing else, on stdout
    assert doc["command"] == "verify" and doc["ok"] is False
    got = {c["id"]: c for c in doc["checks"]}
    assert got["health"]["status"] == "pass"
    for check in ("models", "smoke", "determinism", "needle", "soak"):
        assert got[check]["status"] == "fail", got[check]
        assert "larger than" in got[check]["message"] or "longer than" in got[check]["message"], got[check]
    assert f"{url}/v1/models: answer larger than 4 MiB" in got["models"]["message"]
    assert "solo baseline request failed" in got["soak"]["message"]
    assert "error" not in {c["status"] for c in doc["checks"]}  # no check died of an exception
    assert peak_kib < RSS_BOUND_KIB, f"peak RSS {peak_kib // 1024} MiB"


# --- endpoint URLs ------------------------------------------------------------------------------------


BAD_URLS = [
    "http://[::1",  # unclosed IPv6 bracket
    "http://[::1]:8000x",  # port not a number
    "http://host:99999",  # port out of range
    "http://host:0",
    "http://host\r\nX-Injected: 1",  # CR LF
    "http://host/\n",
    "http://host:8000/\x7f",  # DEL
    "http://ho st:8000",  # space
    "http://host:8000/\tv1",
    "http://hést:8000",  # non-ASCII
    "file:///etc/passwd",
    "ftp://host/",
    "gopher://host:70/",
    "host:8000",  # no scheme
    "//host:8000",
    "http://",
    "http://user:secret@host:8000",  # credentials would be printed in every report
    "http://host:8000/?q=1",
    "http://host:8000/#frag",
    "http://[not-v6]:8000",
]


def rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("url", BAD_URLS)
def test_bad_url_is_a_usage_error(url: str) -> None:
    done = rigctl("verify", "--url", url, "--model", MODEL, "--json")
    assert done.returncode == ExitCode.USAGE, (done.stdout, done.stderr)
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and doc["error"]["code"] == "usage"
    assert doc["error"]["message"].startswith("endpoint URL ")
    assert "secret" not in done.stdout
    assert "Traceback" not in done.stderr


def test_bad_url_in_text_mode_and_with_a_recipe() -> None:
    done = rigctl("verify", "--url", "http://[::1", "--model", MODEL)
    assert done.returncode == ExitCode.USAGE and "Traceback" not in done.stderr
    assert "error: endpoint URL 'http://[::1': cannot be parsed" in done.stderr
    done = rigctl("verify", "qwen3-8b-vllm", "--url", "file:///etc/passwd", "--json")
    assert done.returncode == ExitCode.USAGE, (done.stdout, done.stderr)
    assert json.loads(done.stdout)["error"]["message"].startswith("endpoint URL 'file:///etc/passwd'")


@pytest.mark.parametrize("key", ["k\r\nX-Injected: 1", "clé", "two words", "k\x1b[31m"])
def test_bad_api_key_is_a_usage_error(key: str) -> None:
    done = rigctl("verify", "--url", "http://127.0.0.1:9", "--model", MODEL, "--api-key", key, "--json")
    assert done.returncode == ExitCode.USAGE, (done.stdout, done.stderr)
    assert "API key" in json.loads(done.stdout)["error"]["message"]
    assert key not in done.stdout


@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
def test_timeout_must_be_finite(value: str) -> None:
    """Deadlines are the time bound: one that never expires (or compares false to everything) is refused."""
    done = rigctl("verify", "--url", "http://127.0.0.1:9", "--model", MODEL, "--timeout", value, "--json")
    assert done.returncode == ExitCode.USAGE, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is False and doc["error"]["code"] == "usage"


@pytest.mark.parametrize("url", ["http://host/\x00", "http://host:8000\x00", *BAD_URLS])
def test_endpoint_refuses_what_argv_cannot_carry(url: str) -> None:
    """NUL cannot reach argv; it can reach Endpoint from a record or a recipe. Every way in is this check."""
    with pytest.raises(UsageError, match=r"^endpoint URL "):
        Endpoint(url, MODEL)


@pytest.mark.parametrize("path", ["http://other:1/x", "//other/x", "health", "/he alth", "/h\r\n"])
def test_health_path_stays_on_the_endpoint(path: str) -> None:
    with pytest.raises(UsageError, match="health path"):
        Endpoint("http://127.0.0.1:8000", MODEL, health_path=path)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "https://Example.COM:8443/llm/v1/", "http://[::1]:8000/v1",
                                 "http://localhost", "http://my_host.internal:80/"])
def test_good_urls_are_accepted(url: str) -> None:
    endpoint = Endpoint(url, MODEL)
    assert not endpoint.base_url.endswith(("/", "/v1"))


# --- figures and text a hostile server puts in its answers ----------------------------------------------


@pytest.mark.parametrize("raw", ["NaN", "Infinity", "-Infinity", "-5", "true", '"4096"', "[4096]"])
def test_hostile_max_model_len_is_no_figure(raw: str) -> None:
    """json.loads takes NaN and Infinity; int() raises on them. Such a figure is "not reported"."""
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        data = f'{{"data": [{{"id": "{MODEL}", "max_model_len": {raw}}}]}}'.encode()
        head(h, content_length=str(len(data)))
        h.wfile.write(data)
    with serve({"/v1/models": route}) as url:
        report = verify(url, ("models",))
    result = report.get("models")
    assert result is not None and result.status == "pass", result
    assert result.figures["max_model_len"] is None


def test_implausible_max_model_len_is_not_believed() -> None:
    with serve({"/v1/models": small_json({"data": [{"id": MODEL, "max_model_len": 10**15}]})}) as url:
        report = run_checks(Endpoint(url, MODEL), Expectations(request_timeout_s=TIMEOUT_S), ("models", "needle"))
    assert status(report) == {"models": "fail", "needle": "skip"}  # no context known: nothing is sized on it
    assert "not believed" in message(report, "models")


@pytest.mark.parametrize("answer", [
    {"choices": [1]}, {"choices": "abc"}, {"choices": [{"index": 0, "text": "x"}],
                                           "usage": {"prompt_tokens": float("nan"), "completion_tokens": "2"}},
])
def test_hostile_completion_shapes_are_findings_not_errors(answer: dict[str, Any]) -> None:
    events = b"data: " + json.dumps(answer).encode() + b"\n\ndata: [DONE]\n\n"

    def streamed(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, ctype="text/event-stream", content_length=str(len(events)))
        h.wfile.write(events)

    with serve({"/v1/completions": by_stream(streamed, small_json(answer)), "/tokenize": small_json({"count": -1}),
                "/v1/models": small_json({"data": [{"id": MODEL, "max_model_len": 4096}]})}) as url:
        report = verify(url, ("smoke", "determinism", "needle", "soak"))
    assert "error" not in status(report).values(), report.to_dict()


def test_a_tokenizer_that_counts_nothing_cannot_grow_the_prompt() -> None:
    """/tokenize says 1 token whatever it is sent: the needle sizing stops at MAX_CHARS_PER_TOKEN characters
    of sentences and one pad word (at most 8 characters) per target token instead of building gigabytes."""
    from rigctl.verify.prompts import MAX_CHARS_PER_TOKEN

    largest = [0]

    def count_one(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        largest[0] = max(largest[0], len(str(body.get("prompt", ""))))
        small_json({"count": 1})(h, body)

    context = 65536
    with serve({"/tokenize": count_one,
                "/v1/models": small_json({"data": [{"id": MODEL, "max_model_len": context}]})}) as url:
        report = run_checks(Endpoint(url, MODEL), Expectations(request_timeout_s=TIMEOUT_S), ("models", "needle"))
    assert status(report)["models"] == "pass" and status(report)["needle"] == "fail"  # nothing recalled
    assert 0 < largest[0] <= (MAX_CHARS_PER_TOKEN + 8) * context + 4096


def test_server_text_reaches_the_terminal_escaped() -> None:
    """An error body is quoted in the RESULT column: escape sequences shown escaped, rich markup not read."""
    evil = "\x1b]52;c;cm0gLXJmIH4K\x07 [link=file:///etc/shadow]click[/link] \x1b[2J\u202e"
    data = json.dumps({"error": {"message": evil}}).encode()

    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, 500, content_length=str(len(data)))
        h.wfile.write(data)

    with serve({"/v1/models": route}) as url:
        done = rigctl("verify", "--url", url, "--model", MODEL, "--checks", "models")
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stderr
    assert "\x1b" not in done.stdout and "\u202e" not in done.stdout and "\x07" not in done.stdout
    assert "\\x1b]52" in done.stdout and "[link=file:///etc/shadow]" in done.stdout


# --- deploy's readiness probe reads the same servers -------------------------------------------------------


@pytest.mark.parametrize(("path", "route"), [
    ("/v1/models", endless()),
    ("/v1/models", length_lie(endless_body=True)),
    ("/v1/models", bomb("gzip")),
    ("/health", endless()),
    ("/health", bomb("deflate")),
], ids=["models-endless", "models-length-lie", "models-gzip-bomb", "health-endless", "health-deflate-bomb"])
def test_deploy_readiness_probe_is_bounded(path: str, route: Route) -> None:
    from rigctl.adapters.probe import HttpProbe

    probe = HttpProbe(timeout=TIMEOUT_S)
    try:
        with serve({path: route}) as url:
            started = time.monotonic()
            ready = probe.check(url, "/health", MODEL)
            assert time.monotonic() - started < TIMEOUT_S
    finally:
        probe.close()
    assert not ready.ready_for(MODEL)
    assert "larger than 4 MiB" in ready.detail or "compressed" in ready.detail, ready.detail


def test_deploy_readiness_probe_still_reads_a_well_behaved_engine() -> None:
    from rigctl.adapters.probe import HttpProbe

    probe = HttpProbe(timeout=TIMEOUT_S)
    try:
        with serve({}) as url:
            ready = probe.check(url, "/health", MODEL)
    finally:
        probe.close()
    assert ready.ready_for(MODEL), ready.detail


def test_deploy_readiness_probe_reads_answers_by_verify_s_rules() -> None:
    """One reader for both clients: a gzipped model list is read as verify reads it (the probe once refused any
    compressed answer), and a web page at /v1/models is the same "not an OpenAI-compatible server" sentence."""
    from rigctl.adapters.probe import HttpProbe

    listed = json.dumps({"object": "list", "data": [{"id": MODEL, "max_model_len": 4096}]}).encode()
    squeezed = zlib.compress(listed, wbits=31)

    def gzipped(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, content_length=str(len(squeezed)), content_encoding="gzip")
        h.wfile.write(squeezed)

    page = b"<!doctype html><html><head><title>Welcome to nginx!</title></head></html>"

    def html(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        head(h, ctype="text/html", content_length=str(len(page)))
        h.wfile.write(page)

    probe = HttpProbe(timeout=TIMEOUT_S)
    try:
        with serve({"/v1/models": gzipped}) as url:
            ready = probe.check(url, "/health", MODEL)
        assert ready.ready_for(MODEL) and ready.max_model_len == 4096, ready.detail
        with serve({"/v1/models": html}) as url:
            foreign = probe.check(url, "/health", MODEL)
        assert not foreign.ready_for(MODEL)
        assert foreign.detail.startswith(f"not an OpenAI-compatible server at {url}"), foreign.detail
        assert "an HTML page titled 'Welcome to nginx!'" in foreign.detail, foreign.detail
    finally:
        probe.close()


# --- engine JSON that json.loads alone cannot take: nesting, endless digits, non-finite numbers -------------

DEEP = "[" * 100_000 + "]" * 100_000  # json.loads: RecursionError from the C scanner
HUGE = "9" * 300  # an int() Python takes, printed whole
ENDLESS = "9" * 5000  # past Python's 4,300-digit int limit: ValueError


def raw_json(text: str, status: int = 200, ctype: str = "application/json") -> Route:
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        data = text.encode()
        head(h, status, ctype, content_length=str(len(data)))
        h.wfile.write(data)
    return route


def raw_stream(*events: str) -> Route:
    def route(h: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        data = "".join(f"data: {e}\n\n" for e in events).encode() + b"data: [DONE]\n\n"
        head(h, ctype="text/event-stream", content_length=str(len(data)))
        h.wfile.write(data)
    return route


def plain_findings(report: VerifyReport) -> None:
    """No check ended in an exception, none names one, and the report is strict JSON with short figures."""
    assert "error" not in status(report).values(), report.to_dict()
    text = json.dumps(report.to_dict(), allow_nan=False)  # no NaN, no Infinity reached the report
    for word in ("RecursionError", "ValueError", "TypeError", "KeyError", "Exceeds the limit"):
        assert word not in text, (word, text[:2000])
    assert HUGE not in text and ENDLESS[:400] not in text


def test_deeply_nested_tokenize_answer_fails_the_needle_check_plainly() -> None:
    """vLLM's /tokenize answering 100,000 levels of nesting: the needle check fails with a sentence (it used to
    end in a raw RecursionError, reported as the check's error)."""
    with serve({"/tokenize": raw_json('{"count": ' + DEEP + "}")}) as url:
        report = verify(url, ("models", "needle"))
    plain_findings(report)
    assert status(report) == {"models": "pass", "needle": "fail"}
    assert "POST /tokenize: the answer is JSON nested deeper than 64 levels" in message(report, "needle")


def test_a_300_digit_n_ctx_is_not_believed_and_printed_short() -> None:
    props = '{"default_generation_settings": {"n_ctx": ' + HUGE + '}, "total_slots": ' + HUGE + "}"
    with serve({"/props": raw_json(props)}) as url:
        report = run_checks(Endpoint(url, MODEL), Expectations(request_timeout_s=TIMEOUT_S), ("models", "needle"))
    plain_findings(report)
    assert status(report) == {"models": "fail", "needle": "skip"}
    said = message(report, "models")
    assert "n_ctx per slot over 10^12" in said and "not believed" in said and len(said) < 200, said


@pytest.mark.parametrize(("routes", "failing"), [
    ({"/v1/models": raw_json('{"data": ' + DEEP + "}")}, "models"),
    ({"/v1/models": raw_json(DEEP, status=404)}, "models"),  # an error body is read for its message
    ({"/v1/completions": raw_json('{"choices": ' + DEEP + "}"),
      "/v1/chat/completions": raw_json('{"choices": ' + DEEP + "}")}, "smoke"),
    ({"/v1/completions": raw_json(DEEP, status=500)}, "smoke"),
    ({"/v1/completions": by_stream(raw_stream('{"choices": ' + DEEP + "}"), completion)}, "soak"),
    ({"/props": raw_json('{"default_generation_settings": {}}'), "/slots": raw_json(DEEP)}, "models"),
    ({"/props": raw_json('{"default_generation_settings": {"n_ctx": 4096}}'),
      "/tokenize": raw_json('{"tokens": ' + DEEP + "}")}, "needle"),
    ({"/v1/completions": by_stream(raw_stream(
        '{"choices": [{"index": 0, "text": " Paris.", "finish_reason": ' + DEEP[:200] + '}], "usage": '
        '{"prompt_tokens": ' + ENDLESS + ', "completion_tokens": 1e999}}'), raw_json(
        '{"choices": [{"index": 0, "text": " Paris.", "finish_reason": -' + ENDLESS + '}], "usage": '
        '{"prompt_tokens": ' + HUGE + ', "completion_tokens": NaN}}'))}, None),
], ids=["models-deep", "models-error-deep", "completion-deep", "completion-error-deep", "stream-chunk-deep",
        "slots-deep", "llamacpp-tokenize-deep", "usage-digits"])
def test_hostile_engine_json_is_a_plain_finding(routes: dict[str, Route], failing: str | None) -> None:
    """Wherever verify reads engine JSON, an answer json.loads cannot take (or would take into figures no report
    should hold) is a failed check with a plain message, or no figure at all; never an exception."""
    with serve(routes) as url:
        report = verify(url, ("models", "smoke", "determinism", "needle", "soak"))
    plain_findings(report)
    if failing is not None:
        assert status(report)[failing] == "fail", report.to_dict()


def test_deploy_readiness_probe_reads_hostile_model_lists_plainly() -> None:
    from rigctl.adapters.probe import HttpProbe

    probe = HttpProbe(timeout=TIMEOUT_S)
    try:
        listed = '{"data": [{"id": "' + MODEL + '", "max_model_len": ' + ENDLESS + "}]}"
        for body in ('{"data": ' + DEEP + "}", listed):
            with serve({"/v1/models": raw_json(body)}) as url:
                ready = probe.check(url, "/health", MODEL)
            assert "Error" not in ready.detail and len(ready.detail) <= 300, ready.detail
            if body is listed:
                assert ready.ready_for(MODEL) and ready.max_model_len is None
            else:
                assert not ready.ready_for(MODEL) and "nested deeper than 64 levels" in ready.detail
    finally:
        probe.close()
