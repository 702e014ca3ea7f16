"""Deploy's safety pieces without the testbed: the service lock, atomic installs, the account of a
Ctrl-C, and reading warmup phases from real engine output lines."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from rigctl.deploy.install import install_files
from rigctl.deploy.state import ServiceLock
from rigctl.deploy.up import _interrupted_state
from rigctl.deploy.warmup import Phase, PhaseState, parse_phase
from rigctl.errors import DeployError
from rigctl.util.interrupts import sigint_deferred


def test_second_lock_on_same_service_is_refused_with_holder(tmp_path: Path) -> None:
    with ServiceLock("glm53-flash", "up glm53-flash", tmp_path):
        with pytest.raises(DeployError) as err:
            ServiceLock("glm53-flash", "down glm53-flash", tmp_path).acquire()
        assert f"pid {os.getpid()}: rigctl up glm53-flash" in err.value.message
        with ServiceLock("other", "up other", tmp_path):  # another service is independent
            pass
    with ServiceLock("glm53-flash", "down glm53-flash", tmp_path):  # released on exit
        pass


def test_lock_is_host_wide_across_processes(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from rigctl.deploy.state import ServiceLock
        with ServiceLock("svc", "up svc", Path({str(tmp_path)!r})):
            print("held", flush=True)
            time.sleep(30)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "held"
        with pytest.raises(DeployError, match=f"pid {child.pid}"):
            ServiceLock("svc", "down svc", tmp_path).acquire()
    finally:
        child.kill()
        child.wait()
    with ServiceLock("svc", "down svc", tmp_path):  # the kernel dropped the dead holder's lock
        pass


def test_install_is_idempotent_and_leaves_no_temporaries(tmp_path: Path) -> None:
    first = install_files(tmp_path, {"a.container": "[Container]\nImage=x\n"})
    assert first.changed and (tmp_path / "a.container").read_text() == "[Container]\nImage=x\n"
    again = install_files(tmp_path, {"a.container": "[Container]\nImage=x\n"})
    assert not again.changed
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.container"]


def test_sigint_during_install_commit_is_deferred_until_all_files_are_in(tmp_path: Path) -> None:
    (tmp_path / "a.container").write_text("old a\n")

    def commit() -> None:
        with sigint_deferred():
            os.kill(os.getpid(), signal.SIGINT)  # arrives mid-commit...
            (tmp_path / "a.container").write_text("new a\n")  # ...but the commit still completes
            (tmp_path / "b.container").write_text("new b\n")

    with pytest.raises(KeyboardInterrupt):
        commit()
    assert (tmp_path / "b.container").read_text() == "new b\n"


def test_interrupted_state_says_which(tmp_path: Path) -> None:
    files = {"rigctl-x.container": "new\n"}
    assert "nothing changed" in _interrupted_state(files, tmp_path, "rigctl-x.service", started=False)
    (tmp_path / "rigctl-x.container").write_text("old\n")
    assert "nothing changed" in _interrupted_state(files, tmp_path, "rigctl-x.service", started=False)
    (tmp_path / "rigctl-x.container").write_text("new\n")
    assert "fully installed" in _interrupted_state(files, tmp_path, "rigctl-x.service", started=False)
    assert "keeps warming it up" in _interrupted_state(files, tmp_path, "rigctl-x.service", started=True)


@pytest.mark.parametrize(
    ("line", "label"),
    [
        ("Trying to pull ghcr.io/tpurtell/glm-5.3-flash-exl3-4bpw-2x-rtx@sha256:fe24...", "pulling image"),
        ("INFO 05-20 10:00:01 [default_loader.py:262] Loading safetensors checkpoint shards:  45% Completed "
         "| 54/120 [01:02<01:15,  1.14s/it]", "loading weights 54/120"),
        ("INFO 05-20 10:04:11 [gpu_model_runner.py:2410] Capturing CUDA graphs (mixed prefill-decode, "
         "PIECEWISE): 33/67", "graph capture 33/67"),
        ("INFO 05-20 10:05:02 [core.py:210] Warming up the model with dummy runs", "warmup"),
        ("INFO 05-20 10:05:40 [api_server.py:1818] Starting vLLM API server on http://0.0.0.0:8000",
         "starting server"),
    ],
)
def test_phase_from_engine_output(line: str, label: str) -> None:
    assert parse_phase(line, PhaseState(Phase.STARTING)).label() == label


def test_unrelated_line_keeps_phase() -> None:
    current = PhaseState(Phase.LOADING, (3, 8))
    assert parse_phase("NCCL INFO Channel 00/02 : 0 1", current) == current
