"""Liveness through the real chain (podman 5 testbed: quadlet, podman's health check, `systemd --user`): the
test engine switched to hang takes a request that never yields a token while /health stays 200; the unit's
health check sees requests running and no new token (render.liveness), podman kills the container and
systemd starts a new one, within the recipe's liveness window. An engine streaming under a bounded load
for longer than the window is left alone.

The window is 36 s here (the least a recipe may give): checks 1 s apart, a stall limit of 18 s."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import pytest
from tests.deploy.conftest import Rig
from tests.deploy.test_chain_canary import _engine_dir

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

WINDOW_S = 36


@pytest.fixture
def rig5(rig: Rig) -> Rig:
    if rig.flavour != "podman5":
        pytest.skip("podman 5 only: .ci/testbed.sh up --podman 5, then .ci/testbed.sh exec --podman 5 -- pytest ...")
    return rig


def _up(rig: Rig, name: str, port: int, **env: str) -> tuple[str, Path]:
    engine, knob = _engine_dir(rig)
    rig.env["RIGCTL_TESTBED"] = "1"
    (knob / "mode").write_text("healthy\n")
    path = rig.recipe(name, port, env={"FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_MODE_FILE": "/knob/mode", **env},
                      container={"publish": {"port": port}, "volumes": [
                          {"host": str(rig.ckpt), "container": "/models/test"},
                          {"host": str(engine), "container": "/opt/rigctl-test-engine"},
                          {"host": str(knob), "container": "/knob"}]},
                      service={"liveness_window_s": WINDOW_S})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    unit = f"rigctl-{name}.service"
    assert "/metrics" in rig.systemctl("cat", unit) and "--health-interval 1s" in rig.systemctl("cat", unit)
    deadline = time.monotonic() + 30  # Notify=healthy: active once the startup check passed
    while time.monotonic() < deadline and _props(rig, unit)["ActiveState"] != "active":
        time.sleep(0.5)
    assert _props(rig, unit)["ActiveState"] == "active"
    return unit, knob / "mode"


def _props(rig: Rig, unit: str) -> dict[str, str]:
    out = rig.systemctl("show", "-p", "ActiveState,NRestarts", unit)
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _container_id(rig: Rig, name: str) -> str:
    return rig.podman("container", "inspect", "--format", "{{.Id}}", "--", f"rigctl-{name}").strip()


def _stream(url: str, max_tokens: int, timeout: float) -> int:
    """One streamed completion; the number of chunks it got (0 when it got none before the timeout)."""
    body = {"model": "test-model", "prompt": "Tell me about rivers.", "max_tokens": max_tokens, "stream": True}
    chunks = 0
    try:
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=timeout) as r:
            for line in r.iter_lines():
                chunks += line.startswith("data: {")
    except httpx.HTTPError:
        pass  # a hung engine never answers; the killed one closes the connection
    return chunks


def test_a_hung_engine_with_a_request_in_flight_is_restarted_within_the_window(rig5: Rig) -> None:
    name, port = "lv-hung", 18471
    unit, knob = _up(rig5, name, port)
    url = f"http://127.0.0.1:{port}"
    first = _container_id(rig5, name)
    knob.write_text("hang\n")
    got: list[int] = []
    started = time.monotonic()
    client = threading.Thread(target=lambda: got.append(_stream(url, 50, WINDOW_S + 30)), daemon=True)
    client.start()
    killed_after = None
    while time.monotonic() - started < WINDOW_S + 45:
        if killed_after is None and _container_id(rig5, name) != first:
            killed_after = time.monotonic() - started  # the old container is gone: killed and removed
        if killed_after is not None and int(_props(rig5, unit)["NRestarts"] or 0) >= 1 \
                and _props(rig5, unit)["ActiveState"] == "active":
            break
        # /health stays 200 the whole time: only the liveness rule can fail the check
        assert killed_after is not None or httpx.get(url + "/health", timeout=5).status_code == 200
        time.sleep(0.5)
    restarted_after = time.monotonic() - started
    client.join(timeout=WINDOW_S + 35)
    knob.write_text("healthy\n")
    print(f"liveness: killed {killed_after} s, active again {restarted_after:.1f} s after the request; window "
          f"{WINDOW_S} s")
    assert killed_after is not None, _props(rig5, unit)
    # measured from the request's start, polled every 0.5 s or so: within the window and a second
    assert killed_after <= WINDOW_S + 1, killed_after
    assert int(_props(rig5, unit)["NRestarts"]) >= 1 and _props(rig5, unit)["ActiveState"] == "active"
    assert got == [0]  # the hung request got no token
    assert _stream(url, 5, 30) > 0  # the new engine answers (nothing runs: the hang mode left is idle)


def test_an_engine_busy_streaming_for_longer_than_the_window_is_not_restarted(rig5: Rig) -> None:
    name, port = "lv-busy", 18472
    unit, _ = _up(rig5, name, port, FAKE_VLLM_TOKEN_DELAY="0.05")
    url = f"http://127.0.0.1:{port}"
    first = _container_id(rig5, name)
    stop = time.monotonic() + WINDOW_S + 6
    chunks: list[int] = []

    def worker() -> None:
        while time.monotonic() < stop:
            chunks.append(_stream(url, 200, 30))

    workers = [threading.Thread(target=worker, daemon=True) for _ in range(4)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=WINDOW_S + 40)
    metrics = httpx.get(url + "/metrics", timeout=5).text
    assert _container_id(rig5, name) == first, "the busy engine's container was replaced"
    assert int(_props(rig5, unit)["NRestarts"] or 0) == 0 and _props(rig5, unit)["ActiveState"] == "active"
    assert chunks and all(c > 0 for c in chunks), chunks  # every request streamed tokens
    assert 'vllm:generation_tokens_total{model_name="test-model",engine="0"}' in metrics
    print(f"liveness: {len(chunks)} streams over {WINDOW_S + 6} s at 4 at once, no restart")
