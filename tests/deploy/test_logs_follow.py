"""`rigctl logs -f` follows the service, not one container: on the real testbed (quadlet, systemd --user,
podman 4.3 with k8s-file logs, no journald) an engine that exits 0 is restarted by Restart=always as a
new container, and the follower marks the restart, goes on with the new container's output, and ends by
itself once the unit is stopped for good. A k8s-file log is read from the file itself, so a container
removed on exit (--rm) keeps its last words. Every wait is bounded."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.deploy.conftest import Rig, shared_prefix_load

from rigctl.adapters.clock import RealClock
from rigctl.adapters.journal import Journalctl
from rigctl.adapters.podman import PodmanCli
from rigctl.adapters.systemd import SystemctlCli
from rigctl.deploy.logs import FollowEnd, LogLine, follow_service
from rigctl.places import Scope

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

RESTART_MARKER = "--- container restarted (exit 0), following the new one ---"
READY_LINE = "Starting vLLM API server"


class Follower:
    """`rigctl logs NAME --user -f` as a subprocess, its stdout read line by line in a thread."""

    def __init__(self, rig: Rig, name: str, *, argv: list[str] | None = None) -> None:
        argv = argv or [sys.executable, "-m", "rigctl", "logs", name, "--user", "-f"]
        self.proc = subprocess.Popen(argv, env=rig.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, text: str, *, after: int = 0, within: float = 90.0) -> int:
        """The index of the first line from ``after`` on that contains ``text``; fails after ``within`` s."""
        deadline = time.monotonic() + within
        while True:
            for i in range(after, len(self.lines)):
                if text in self.lines[i]:
                    return i
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                line = self._queue.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
        pytest.fail(f"no line with {text!r} after line {after} within {within} s; got:\n" + "\n".join(self.lines))

    def finish(self, within: float = 60.0) -> int:
        rc = self.proc.wait(timeout=within)
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        return rc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture
def followers() -> Iterator[list[Follower]]:
    started: list[Follower] = []
    yield started
    for follower in started:
        follower.stop()


def test_follow_spans_an_exit_zero_restart_and_ends_when_the_unit_is_stopped(
    rig: Rig, followers: list[Follower]
) -> None:
    path = rig.recipe("rt-follow", 18210, env={
        "FAKE_VLLM_WARMUP_SECONDS": "1", "FAKE_VLLM_MODE": "crash-under-load", "FAKE_VLLM_CRASH_CONCURRENCY": "4",
        "FAKE_VLLM_CRASH_EXIT_CODE": "0", "FAKE_VLLM_TOKEN_DELAY": "0.05",
    })
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    unit = "rigctl-rt-follow.service"
    first_pid = rig.systemctl("show", "-p", "MainPID", "--value", unit).strip()

    follower = Follower(rig, "rt-follow")
    followers.append(follower)
    first_ready = follower.wait_for(READY_LINE)  # the running container's output so far

    shared_prefix_load("http://127.0.0.1:18210", 6)
    crash = follower.wait_for("ReplaySSM prefill source/state row count mismatch", after=first_ready)
    # the crash line is recognised as the recipe's known signature, with its remedy
    assert follower.lines[crash].startswith(">> ")
    marker = follower.wait_for(RESTART_MARKER, after=crash)
    assert "[replayssm-row-mismatch]" in "\n".join(follower.lines[crash:marker])
    # the new container's own boot, after the marker: the follower moved on to it by itself
    follower.wait_for("vLLM API server version", after=marker)
    follower.wait_for(READY_LINE, after=marker)
    assert rig.systemctl("show", "-p", "MainPID", "--value", unit).strip() != first_pid
    assert int(rig.systemctl("show", "-p", "NRestarts", "--value", unit).strip()) >= 1
    assert follower.proc.poll() is None  # still following

    code, down = rig.run("down", "rt-follow", "--user")
    assert code == 0, down
    assert follower.finish() == 0
    assert follower.lines[-1].startswith(f"--- {unit} is inactive/")
    assert follower.lines[-1].endswith("no restart is pending: done following ---")
    assert follower.lines.count(RESTART_MARKER) == 1
    # each line of the first container's boot shows once: the follower does not replay what it printed
    assert sum(READY_LINE in line for line in follower.lines) == 2


def test_follow_ends_at_once_on_a_unit_that_is_not_running(rig: Rig, followers: list[Follower]) -> None:
    path = rig.recipe("rt-follow-off", 18211, env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    code, doc = rig.run("down", "rt-follow-off", "--user")
    assert code == 0, doc
    follower = Follower(rig, "rt-follow-off")
    followers.append(follower)
    assert follower.finish() == 0
    assert follower.lines[-1] == ("--- rigctl-rt-follow-off.service is inactive/dead and no restart is pending: "
                                  "done following ---")


def test_follow_gives_up_when_no_new_container_comes_within_the_bound(
    rig: Rig, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The unit restarts only after 60 s; the follower waits 4 s for the next container, then says so.
    path = rig.recipe("rt-follow-slow", 18212, env={"FAKE_VLLM_WARMUP_SECONDS": "1"},
                      service={"restart_sec": 60})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    for key in ("XDG_RUNTIME_DIR", "CONTAINERS_CONF"):  # the real adapters run in this process
        monkeypatch.setenv(key, rig.env[key])
    podman = PodmanCli()
    info = podman.container("rigctl-rt-follow-slow")
    assert info is not None and info.running and info.log_driver == "k8s-file"

    end = FollowEnd()
    stream = follow_service(container="rigctl-rt-follow-slow", unit="rigctl-rt-follow-slow.service",
                            podman=podman, journal=Journalctl(Scope.USER), systemd=SystemctlCli(Scope.USER),
                            clock=RealClock(), signatures=[], tail=1, restart_wait_s=4, end=end)
    got: list[LogLine] = []
    for line in stream:
        got.append(line)
        if len(got) == 1:  # tail=1: the last line already there; now stop the engine
            subprocess.run(["podman", "kill", "--signal", "TERM", "--", "rigctl-rt-follow-slow"], env=rig.env,
                           capture_output=True, timeout=30, check=True)
    assert end.reason == "gave-up", [ln.text for ln in got]
    assert got[-1].source == "rigctl"
    assert got[-1].text.startswith("--- no new container within 4 s; rigctl-rt-follow-slow.service is ")
    assert any("Shutting down" in ln.text for ln in got)  # the engine's last words (SIGTERM: exit 0)
    assert not any("container restarted" in ln.text for ln in got)


def test_follow_argv_puts_the_name_after_double_dash() -> None:
    # The argv is the adapter's whole contract with podman: the name after --, options before it.
    stream = PodmanCli(binary="echo").follow("--name-like-an-option", tail=5, since="10m")
    try:
        assert stream.next_lines(10) == ["logs -f --tail 5 --since 10m -- --name-like-an-option"]
        assert stream.next_lines(10) is None
    finally:
        stream.close()


def _podman_logs_children(container_id: str) -> list[str]:
    """Running `podman logs -f` processes on this container (read from /proc: they must not outlive rigctl)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if b"logs" in words and container_id.encode() in words:
            found.append(cmdline.parent.name)
    return found


def _holds_open(pid: int, path: str) -> bool:
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            if os.readlink(fd) == path:
                return True
        except OSError:
            continue
    return False


def test_ctrl_c_stops_following_and_leaves_no_podman_behind(rig: Rig, followers: list[Follower]) -> None:
    path = rig.recipe("rt-follow-int", 18213, env={"FAKE_VLLM_WARMUP_SECONDS": "1"})
    code, doc = rig.run("up", str(path), "--user", "--no-verify")
    assert code == 0, doc
    container_id = subprocess.run(["podman", "container", "inspect", "--format", "{{.Id}}", "--", "rigctl-rt-follow-int"],
                                  env=rig.env, capture_output=True, text=True, timeout=30, check=True).stdout.strip()
    # Python leaves SIGINT ignored when its parent ignored it (a background job); make Ctrl-C real.
    boot = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
            "sys.argv = ['rigctl', 'logs', 'rt-follow-int', '--user', '-f']; "
            "runpy.run_module('rigctl', run_name='__main__')")
    follower = Follower(rig, "rt-follow-int", argv=[sys.executable, "-c", boot])
    followers.append(follower)
    follower.wait_for(READY_LINE)
    log_path = subprocess.run(["podman", "container", "inspect", "--format", "{{.HostConfig.LogConfig.Path}}", "--",
                               container_id], env=rig.env, capture_output=True, text=True, timeout=30,
                              check=True).stdout.strip()
    # k8s-file on the testbed: the follower reads the log through its own descriptor (nothing to leave
    # behind but that), where another driver would have it run `podman logs -f` on the container's id
    assert _holds_open(follower.proc.pid, log_path) or _podman_logs_children(container_id)
    follower.proc.send_signal(signal.SIGINT)
    assert follower.finish() == 130
    deadline = time.monotonic() + 10  # its child is terminated on the way out; give the kernel a moment
    while _podman_logs_children(container_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _podman_logs_children(container_id) == []


def test_follow_keeps_the_last_words_of_a_container_removed_on_exit(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # quadlet's --rm removes the log with the container; podman-logs(1) says `logs -f` may then miss the
    # end. The adapter reads the k8s-file through its own descriptor: the end is read after the removal.
    for key in ("XDG_RUNTIME_DIR", "CONTAINERS_CONF"):
        monkeypatch.setenv(key, rig.env[key])
    podman = PodmanCli()
    image = rig.env["RIGCTL_TEST_ENGINE_IMAGE"]
    program = ("import sys, time\nfor k in range(200): print('INFO line', k, flush=True)\ntime.sleep(1.5)\n"
               "print('Traceback (most recent call last):', flush=True)\n"
               "print('ValueError: ReplaySSM prefill source/state row count mismatch', file=sys.stderr, flush=True)\n")
    for attempt in range(3):
        name = f"rigctl-lf-rm-{attempt}"
        subprocess.run(["podman", "run", "-d", "--rm", "--log-driver", "k8s-file", "--name", name,
                        "--entrypoint", "python3", "--", image, "-c", program],
                       env=rig.env, capture_output=True, timeout=60, check=True)
        stream = podman.follow(name)
        lines: list[str] = []
        deadline = time.monotonic() + 60
        try:
            while time.monotonic() < deadline:
                got = stream.next_lines(1.0)
                if got is None:
                    break
                lines += got
            else:
                pytest.fail(f"following {name} did not end within 60 s")
        finally:
            stream.close()
        assert type(stream).__name__ == "LogFileLines"  # the testbed's driver is k8s-file: read from the file
        assert lines[-1] == "ValueError: ReplaySSM prefill source/state row count mismatch", lines[-3:]
        assert len(lines) == 202
        gone = subprocess.run(["podman", "container", "exists", "--", name], env=rig.env, capture_output=True,
                              timeout=30, check=False)
        assert gone.returncode == 1  # removed by --rm: these lines came from rigctl's own descriptor
