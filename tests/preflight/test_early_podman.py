"""`rigctl preflight` starts `podman images` and `podman version` before it loads the recipe and the
facts models (``host.early``), and the podman probe collects them: what it reports must be what it
reports when it runs them itself. Run against the real podman of this machine, and real commands for
``util.proc.Started`` (timeouts, a missing binary, cancelling)."""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from rigctl.host.early import EarlyProbes, NvmlStart, probes_started, start_podman_cli
from rigctl.host.gather import facts_for_recipe, gather_facts
from rigctl.host.probes import probe_podman
from rigctl.host.quadlet import QUADLET_ENV, QuadletAsked, ask_version
from rigctl.places import Scope
from rigctl.recipe.load import load
from rigctl.util.proc import CANCELLED, Started, run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def test_started_returns_what_run_returns() -> None:
    argv = [sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"]
    started = Started(argv, timeout=30)
    assert started.wait() == run(argv, timeout=30)
    assert started.wait().rc == 3 and started.wait().stdout == "out\n"  # collected once, kept


def test_started_counts_its_timeout_from_the_start() -> None:
    started = Started([sys.executable, "-c", "import time; print('begun', flush=True); time.sleep(30)"], timeout=1.0)
    time.sleep(1.2)  # the caller was busy past the deadline: the command is not given another second
    t0 = time.monotonic()
    done = started.wait()
    assert time.monotonic() - t0 < 0.5
    assert done.rc == 124 and done.stdout == "begun\n" and "timed out after 1.0s" in done.stderr


def test_a_missing_binary_is_rc_127_as_with_run(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-podman")
    assert Started([missing, "version"]).wait() == run([missing, "version"])
    assert Started([missing, "version"]).wait().rc == 127


def test_cancel_kills_and_reaps() -> None:
    started = Started([sys.executable, "-c", "import time; time.sleep(30)"])
    process = started._proc  # the test looks at the process itself
    assert process is not None
    started.cancel()
    assert process.returncode is not None  # reaped: no zombie left behind
    assert started.wait().rc == -9
    started.cancel()  # idempotent


@pytest.fixture
def podman(need: Callable[[bool, str], None]) -> str:
    found = shutil.which("podman")
    need(found is not None, "podman is not installed here")
    assert found is not None
    return found


def test_the_probe_reports_the_same_from_calls_started_early(podman: str) -> None:
    early = start_podman_cli(sockets=[])
    assert early is not None
    with_early = probe_podman(sockets=[], started=early)
    itself = probe_podman(sockets=[])
    assert with_early == itself
    assert with_early.installed and with_early.version and with_early.images_via == "cli"


def test_a_podman_that_is_not_there_reads_the_same(tmp_path: Path) -> None:
    missing = str(tmp_path / "podman")
    early = start_podman_cli(sockets=[], podman_bin=missing)
    assert early is not None
    assert probe_podman(sockets=[], podman_bin=missing, started=early) == probe_podman(sockets=[], podman_bin=missing)
    assert not probe_podman(sockets=[], podman_bin=missing).installed


def test_an_api_socket_means_nothing_is_started(tmp_path: Path) -> None:
    socket_path = tmp_path / "podman.sock"
    socket_path.touch()  # exists: probe_podman would ask the API first, so the CLI is not started
    assert start_podman_cli(sockets=[str(socket_path)]) is None


def test_a_replayed_inventory_cancels_calls_started_for_nothing(podman: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    early = start_podman_cli(sockets=[])
    assert early is not None
    facts = facts_for_recipe(load("qwen3-8b-vllm").recipe, FIXTURES / "h200.json",
                             early=EarlyProbes(early, NvmlStart()))
    assert facts.gpu.devices[0].name == "NVIDIA H200"
    for call in (early.images, early.version):
        process = call._proc  # the test looks at the process itself
        assert process is None or process.returncode is not None  # finished or killed, and reaped


def test_a_gather_with_calls_started_early_is_a_gather(podman: str) -> None:
    early = start_podman_cli(sockets=[])
    facts = gather_facts([], include_cache_dirs=False, podman_sockets=[], early=EarlyProbes(early, NvmlStart()))
    assert facts.podman == probe_podman(sockets=[])
    assert "podman" not in facts.probe_errors


def test_a_quadlet_version_asked_early_reads_the_same(podman: str) -> None:
    for scope in (Scope.USER, Scope.SYSTEM):
        itself = probe_podman(sockets=[], scope=scope)
        asked = ask_version(scope)
        assert probe_podman(sockets=[], scope=scope, quadlet=asked) == itself
        other = ask_version(Scope.SYSTEM if scope == Scope.USER else Scope.USER)
        assert probe_podman(sockets=[], scope=scope, quadlet=other) == itself  # another scope's: asked again
        other.cancel()
        assert itself.quadlet_scope == scope


def test_the_quadlet_asked_early_is_the_one_reported(podman: str) -> None:
    # a stand-in that answers a version no real quadlet has: the probe must report the early call's answer
    asked = QuadletAsked(Scope.USER, "/stand-in/quadlet", Started([sys.executable, "-c", "print('quadlet 9.8.7')"]))
    found = probe_podman(sockets=[], scope=Scope.USER, quadlet=asked)
    assert (found.quadlet, found.quadlet_version, found.quadlet_scope) == ("/stand-in/quadlet", "9.8.7", Scope.USER)


def test_probes_started_for_a_scope_ask_that_scopes_quadlet_and_reap_it(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = [sys.executable, "-c", "import time; time.sleep(60)"]
    monkeypatch.setattr("rigctl.host.quadlet.find_quadlet", lambda scope: slow[0])
    monkeypatch.setattr("rigctl.host.quadlet.Started", lambda argv, timeout: Started(slow, timeout=timeout))
    with probes_started(scope=Scope.USER) as early:
        assert early is not None and early.quadlet is not None and early.quadlet.version is not None
        assert early.quadlet.scope == Scope.USER
        process = early.quadlet.version._proc  # the test looks at the process itself
        assert process is not None and process.poll() is None  # still running: nobody asked yet
    assert process.returncode is not None  # killed and reaped on the way out
    assert early.quadlet.version.wait().rc == CANCELLED


def test_a_quadlet_that_cannot_run_is_an_answer_not_a_crash(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    broken = tmp_path / "quadlet"
    broken.write_bytes(b"\x00not a program")
    broken.chmod(0o755)
    monkeypatch.setenv(QUADLET_ENV, str(broken))
    with probes_started(scope=Scope.USER) as early:
        assert early is not None and early.quadlet is not None and early.quadlet.version is not None
        assert early.quadlet.version.wait().rc == 126
        found = probe_podman(sockets=[], scope=Scope.USER, quadlet=early.quadlet)
    assert found.quadlet == str(broken) and found.quadlet_version is None


def test_a_wait_on_one_thread_and_a_cancel_on_another_meet_safely() -> None:
    # a probe thread collects while the main thread cancels (Ctrl-C): one reads the pipes, both see one answer
    for _ in range(20):
        started = Started([sys.executable, "-c", "import time; time.sleep(60)"], timeout=60)
        answers: list[int] = []
        waiter = threading.Thread(target=lambda s=started, a=answers: a.append(s.wait().rc))
        waiter.start()
        time.sleep(0.01)
        started.cancel()
        waiter.join(timeout=30)
        assert not waiter.is_alive() and answers == [CANCELLED] and started.wait().rc == CANCELLED
