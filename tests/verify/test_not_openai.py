"""verify against a URL that serves no OpenAI API (#15): a static web server (`python3 -m http.server`,
whose errors are HTML pages) or a JSON service of another shape. The first look at /v1/models says so
in one line, and nothing else is sent to the server: every later check is skipped, not failed five times
over with an HTML page in each cell."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from rigctl.exitcodes import ExitCode
from rigctl.verify.client import HttpAnswer, not_openai

pytestmark = pytest.mark.timeout(120)

RUN_TIMEOUT_S = 90
ENGINE_CHECKS = ("smoke", "repetition", "determinism", "needle", "soak")


@pytest.fixture
def static_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """A real `python3 -m http.server` serving a directory on 127.0.0.1; its request log (stderr) returned."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "index.html").write_text("<html><body>hello</body></html>\n")
    log = tmp_path / "http.server.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-u", "-m", "http.server", "0", "--bind", "127.0.0.1",
                                 "--directory", str(root)], stdout=subprocess.PIPE, stderr=err)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()  # "Serving HTTP on 127.0.0.1 port N (http://...) ..."
        match = re.search(r"port (\d+)", line)
        assert match, f"http.server did not start: {line!r}"
        yield f"http://127.0.0.1:{match.group(1)}", log
    finally:
        proc.kill()
        proc.wait(timeout=10)


class _StatusOk(BaseHTTPRequestHandler):
    """Answers {"status":"ok"} to every GET and POST, as a health endpoint of some other service would."""

    requests: list[str]

    def _answer(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        self.requests.append(f"{self.command} {self.path}")
        body = b'{"status":"ok"}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = _answer
    do_POST = _answer

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def json_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on 127.0.0.1 that is JSON but not OpenAI; the requests it received."""
    seen: list[str] = []
    handler = type("Handler", (_StatusOk,), {"requests": seen})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "300"}  # one table row per line: each check's cell can be read whole
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env=env, check=False)


def verify_json(url: str, *extra: str) -> tuple[int, dict[str, Any]]:
    done = rigctl("verify", "--url", url, "--model", "m", "--timeout", "20", *extra, "--json")
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def check_one_line_cells(checks: list[dict[str, Any]]) -> None:
    for check in checks:
        message = check["message"]
        assert "\n" not in message and len(message) <= 400, check
        assert "<" not in message, f"markup in a cell: {check}"


def posts(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if '"POST ' in line]


def test_a_static_web_server_is_named_and_nothing_more_is_sent(static_server: tuple[str, Path]) -> None:
    url, log = static_server
    code, doc = verify_json(url)
    assert code == ExitCode.CHECKS_FAILED and doc["ok"] is False
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert status == {"health": "fail", "models": "fail", **dict.fromkeys(ENGINE_CHECKS, "skip")}
    models = next(c for c in doc["checks"] if c["id"] == "models")
    assert models["message"].startswith(f"not an OpenAI-compatible server at {url} (")
    assert "404 text/html" in models["message"] and models["figures"]["error"] == "not-openai"
    for check in doc["checks"]:
        if check["id"] in ENGINE_CHECKS:
            assert check["message"] == f"not run: no OpenAI-compatible server at {url}", check
    check_one_line_cells(doc["checks"])
    assert posts(log) == []  # no completion was sent to the web server: verify stopped at the model list


def test_a_static_web_server_in_text(static_server: tuple[str, Path]) -> None:
    url, log = static_server
    done = rigctl("verify", "--url", url, "--model", "m", "--timeout", "20")
    assert done.returncode == ExitCode.CHECKS_FAILED, done.stderr
    out = done.stdout
    assert "<!DOCTYPE" not in out and "<html" not in out and "\\x0a" not in out
    rows = {m.group(1): line for line in out.splitlines() if (m := re.match(r"\W*(\w+)\W", line))}
    flat = " ".join(out.split())  # the models cell may wrap
    assert f"not an OpenAI-compatible server at {url} (GET /v1/models answered 404 text/html" in flat
    for check in ENGINE_CHECKS:
        assert re.search(rf"{check}\W+skip\W.*not run: no OpenAI-compatible server at {re.escape(url)}",
                         rows[check]), rows[check]
    assert posts(log) == []


def test_the_first_engine_check_says_it_when_models_is_not_selected(static_server: tuple[str, Path]) -> None:
    url, log = static_server
    code, doc = verify_json(url, "--checks", "smoke,determinism")
    assert code == ExitCode.CHECKS_FAILED
    smoke, determinism = doc["checks"]
    assert smoke["status"] == "fail" and smoke["message"].startswith(f"not an OpenAI-compatible server at {url}")
    assert determinism["status"] == "skip" and determinism["message"].startswith("not run:")
    assert posts(log) == []


def test_json_that_is_not_an_openai_model_list(json_server: tuple[str, list[str]]) -> None:
    url, seen = json_server
    code, doc = verify_json(url)
    assert code == ExitCode.CHECKS_FAILED and doc["ok"] is False
    status = {c["id"]: c["status"] for c in doc["checks"]}
    assert status == {"health": "pass", "models": "fail", **dict.fromkeys(ENGINE_CHECKS, "skip")}
    models = next(c for c in doc["checks"] if c["id"] == "models")
    assert f"not an OpenAI-compatible server at {url}" in models["message"]
    assert "not an OpenAI model list" in models["message"] and '{"status":"ok"}' in models["message"]
    assert doc["engine"] == {}  # no engine was found to describe
    check_one_line_cells(doc["checks"])
    assert not [r for r in seen if r.startswith("POST")], seen

    text = rigctl("verify", "--url", url, "--model", "m", "--timeout", "20")
    assert text.returncode == ExitCode.CHECKS_FAILED
    assert "not an OpenAI model list" in " ".join(text.stdout.split())  # the cell may wrap


HTML = "<!DOCTYPE html><html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


@pytest.mark.parametrize(("answer", "verdict"), [
    (HttpAnswer(502, HTML, 0.0, "text/html"), None),  # a proxy before a booting engine: not a verdict
    (HttpAnswer(503, '{"error": {"message": "Loading model"}}', 0.0, "application/json"), None),
    (HttpAnswer(401, '{"error": {"message": "no key"}}', 0.0, "application/json"), None),  # an engine, locked
    (HttpAnswer(200, '{"object": "list", "data": []}', 0.0, "text/html"), None),  # a list, mislabelled
    (HttpAnswer(404, HTML.replace("502 Bad Gateway", "404 Not Found"), 0.0, "text/html"), "'404 Not Found'"),
    (HttpAnswer(404, '{"detail": "Not Found"}', 0.0, "application/json"), "404 application/json: Not Found"),
    (HttpAnswer(200, "<html><p>hello</p></html>", 0.0, ""), "an HTML page"),
    (HttpAnswer(200, "hello", 0.0, "text/plain"), ", not JSON"),
])
def test_which_answers_mean_no_openai_api(answer: HttpAnswer, verdict: str | None) -> None:
    found = not_openai(answer)
    if verdict is None:
        assert found is None
    else:
        assert found is not None and verdict in found and "\n" not in found
