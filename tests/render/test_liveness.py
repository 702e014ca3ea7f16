"""The liveness rule (render.liveness): requests running and no new token for the stall limit = hung. The
pure rule, its timing against the window, the sh form run for real (each client it may pick) against the
same steps as the rule, and what the unit gets."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.support.recipes import recipe_with

from rigctl.errors import InvalidInputError
from rigctl.render import liveness
from rigctl.render.liveness import PROGRESS_METRICS, Progress, Sample, judge, liveness_prefix, parse_metrics, timing
from rigctl.render.units import HEALTH_RETRIES, render_units

VLLM = PROGRESS_METRICS["vllm"]


def _metrics(running: list[float], tokens: list[float]) -> str:
    """/metrics as vLLM v1 writes it: one series per engine (data parallel), labels model_name and engine."""
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{model_name="my model",engine="{i}"}} {v!r}' for i, v in enumerate(running)]
    lines += ["# TYPE vllm:num_requests_running_other gauge", "vllm:num_requests_running_other 7.0",
              "# TYPE vllm:generation_tokens_total counter"]
    lines += [f'vllm:generation_tokens_total{{model_name="my model",engine="{i}"}} {v!r}' for i, v in enumerate(tokens)]
    lines += ['vllm:generation_tokens_created{model_name="my model",engine="0"} 1.7e+09']
    return "\n".join(lines) + "\n"


def test_parse_reads_every_engine_and_only_the_two_series() -> None:
    assert parse_metrics(_metrics([0.0], [0.0]), VLLM) == Sample(False, "0.0,")
    assert parse_metrics(_metrics([0.0, 2.0], [12.0, 7557572.0]), VLLM) == Sample(True, "12.0,7557572.0,")
    assert parse_metrics("", VLLM) == Sample(False, "")
    assert parse_metrics('{"detail":"Not Found"}', VLLM) == Sample(False, "")


def test_judge() -> None:
    busy, idle = Sample(True, "5.0,"), Sample(False, "5.0,")
    assert judge(None, busy, 100, 60) == (False, Progress(True, "5.0,", 100))
    kept = Progress(True, "5.0,", 100)
    assert judge(kept, busy, 159, 60) == (False, kept)  # a stall shorter than the limit
    assert judge(kept, busy, 160, 60) == (True, kept)  # and at it: hung, the time kept
    assert judge(kept, Sample(True, "6.0,"), 300, 60) == (False, Progress(True, "6.0,", 300))  # tokens moved
    assert judge(kept, idle, 300, 60) == (False, Progress(False, "5.0,", 300))  # the work is done
    # work that arrives after an idle check is counted from the first check that sees it, not the idle one
    assert judge(Progress(False, "5.0,", 100), busy, 500, 60) == (False, Progress(True, "5.0,", 500))
    assert judge(Progress(True, "", 100), Sample(True, ""), 500, 60)[0] is False  # no counter: no judgement


def test_the_kill_comes_within_the_window_and_the_stall_limit_is_at_least_half_of_it() -> None:
    for window in range(liveness.MIN_WINDOW_S, 3601):
        interval, stall = timing(window, HEALTH_RETRIES, 30)
        assert 1 <= interval <= 30
        # the module's worst case from the last token, each check counted with its run time
        assert stall + (HEALTH_RETRIES + 1) * (interval + liveness.CHECK_RUN_S) <= window
        assert stall * 2 >= window


def test_timing_of_the_default_window() -> None:
    assert timing(180, 5, 30) == (13, 90)
    assert timing(36, 5, 30) == (1, 18)
    with pytest.raises(ValueError, match="below"):
        timing(35, 5, 30)


# --- the sh form, run --------------------------------------------------------------------------------


class _Engine:
    """Serves /metrics (settable) and /health (200)."""

    def __init__(self) -> None:
        self.text = ""
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = (engine.text if self.path == "/metrics" else "").encode()
                self.send_response(200)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def engine() -> Iterator[_Engine]:
    e = _Engine()
    yield e
    e.server.shutdown()
    e.server.server_close()


def _bin(tmp: Path, client: str) -> Path:
    """A PATH with the tools the check needs, one client (curl, python3 or bash), and a `date` that says
    what the test wants."""
    bin_ = tmp / f"bin-{client}"
    bin_.mkdir()
    for tool in ("grep", "mv", "cat", "timeout", client):
        found = shutil.which(tool)
        if found is None:
            pytest.skip(f"{tool} is not installed")
        (bin_ / tool).symlink_to(found)
    (bin_ / "date").write_text(f"#!/bin/sh\ncat {tmp}/now\n")
    (bin_ / "date").chmod(0o755)
    return bin_


@pytest.mark.parametrize("client", ["curl", "python3", "bash"])
def test_the_sh_form_judges_as_the_rule_does(client: str, engine: _Engine, tmp_path: Path) -> None:
    bin_ = _bin(tmp_path, client)
    state = tmp_path / "state"
    state.mkdir()
    stall = 30
    cmd = liveness_prefix(engine.port, stall, VLLM, str(state)) + "; echo plain"
    steps = [  # (now, running per engine, tokens per engine)
        (1000, [0.0], [0.0]), (1010, [1.0], [0.0]), (1020, [1.0], [3.0]), (1030, [1.0], [3.0]), (1049, [1.0], [3.0]),
        (1050, [1.0], [3.0]), (1060, [1.0], [3.0]), (1070, [0.0], [3.0]), (1200, [1.0], [3.0]), (1229, [1.0], [3.0]),
        (1230, [1.0], [3.0]), (1231, [1.0], [4.0]), (1300, [2.0, 0.0], [4.0, 9.0]), (1400, [2.0, 0.0], [4.0, 9.0]),
        (1401, [2.0, 1.0], [4.0, 10.0]),
    ]
    prev: Progress | None = None
    verdicts = []
    for now, running, tokens in steps:
        engine.text = _metrics(running, tokens)
        (tmp_path / "now").write_text(f"{now}\n")
        done = subprocess.run(["/bin/sh", "-c", cmd], env={"PATH": str(bin_)}, capture_output=True, text=True,
                              timeout=10, check=False)
        hung, prev = judge(prev, parse_metrics(engine.text, VLLM), now, stall)
        assert (done.returncode == 1) is hung, (now, done)
        said = f"requests running, no new token for {now - prev.since} s\n" if hung and prev else "plain\n"
        assert done.stdout == said, done
        assert not done.stderr, done.stderr
        verdicts.append(hung)
    assert verdicts == [False, False, False, False, False, True, True, False, False, False, True, False, False,
                        True, False]
    assert [p.name for p in state.iterdir()] == [f"rigctl-liveness-{engine.port}"]  # one line, no temporaries


def test_without_metrics_or_tools_the_plain_check_decides(tmp_path: Path) -> None:
    bin_ = tmp_path / "bin"
    bin_.mkdir()  # no client, no grep, no date: the prefix judges nothing
    cmd = liveness_prefix(1, 30, VLLM, str(tmp_path)) + "; echo plain"
    done = subprocess.run(["/bin/sh", "-c", cmd], env={"PATH": str(bin_)}, capture_output=True, text=True,
                          timeout=10, check=False)
    assert (done.returncode, done.stdout) == (0, "plain\n")


# --- the unit ------------------------------------------------------------------------------------------


def _unescaped(text: str, key: str) -> str:
    [value] = re.findall(rf"^{key}=(.*)$", text, re.M)
    return value.replace("$$", "$").replace("%%", "%")  # what systemd hands podman


def test_a_vllm_unit_checks_liveness_within_its_window() -> None:
    text = render_units(recipe_with("qwen3-8b-vllm"), podman_version=(5, 4)).files[0].text
    cmd = _unescaped(text, "HealthCmd")
    assert cmd.startswith(liveness_prefix(8000, 90, VLLM) + "; ")
    assert cmd.endswith(_unescaped(text, "HealthStartupCmd"))  # warmup has no work to judge: /health alone
    assert "HealthInterval=13s" in text and "HealthRetries=5" in text
    assert "killed within 180 s of its last token" in text


def test_window_zero_and_engines_without_counters_keep_the_plain_check() -> None:
    off = render_units(recipe_with("qwen3-8b-vllm", service__liveness_window_s=0), podman_version=(5, 4))
    text = off.files[0].text
    assert _unescaped(text, "HealthCmd") == _unescaped(text, "HealthStartupCmd") and "HealthInterval=30s" in text
    sglang = render_units(recipe_with("qwen3-8b-vllm", engine__kind="sglang"), podman_version=(5, 4))
    assert "/metrics" not in sglang.files[0].text
    assert any("no token counter" in n.message for n in sglang.notes)


def test_old_quadlet_gets_the_same_check_in_podman_args() -> None:
    text = render_units(recipe_with("qwen3-8b-vllm"), podman_version=(4, 4), quadlet_version=(4, 4)).files[0].text
    assert "--health-interval=13s" in text and "/metrics" in text


@pytest.mark.parametrize("window", [1, 35, 3601, -1])
def test_the_window_is_zero_or_bounded(window: int) -> None:
    with pytest.raises(InvalidInputError, match="liveness_window_s"):
        recipe_with("qwen3-8b-vllm", service__liveness_window_s=window)


def test_no_state_on_shared_memory() -> None:
    # with ipc=host /dev/shm is the host's: two units would share one state file
    assert "/dev/shm" not in liveness_prefix(8000, 90, VLLM) and os.sep == "/"
