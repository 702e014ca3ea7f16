"""`status` counts a service's GPU memory over the container's whole process tree (#12 point 6).

An engine's GPU memory is held by its workers, children of the process podman reports as the container's
(vLLM's API server holds none under tensor parallelism). ``procfs.process_tree`` is checked against psutil
on real processes here, against the PID namespace of a real container of the testbed, and ``status``
is checked to hand the whole tree to the GPU-memory adapter. The adapter itself was run against a real
driver on an H200 (tools/gpu_memory_probe.py; see the closing note of #12)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import psutil
import pytest
from tests.conftest import podman_flavour, require_or_skip
from tests.fakes import FakeClock, FakePodman, FakeSystemd

from rigctl.adapters.podman import ContainerInfo
from rigctl.deploy.status import Managed, describe
from rigctl.host.procfs import process_tree
from rigctl.host.unit import Unit
from rigctl.places import Scope

CHILDREN_SCRIPT = "import subprocess,sys,time\n" \
    "kids=[subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)']) for _ in range(2)]\n" \
    "print('ready', flush=True); time.sleep(60)\n"


@pytest.fixture
def family(tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """A parent running under an awkward name (spaces and parentheses, as /proc/PID/stat shows them)
    with two children and, below one of them, nothing: three real processes."""
    odd = tmp_path / "eng (core) 1 2"
    odd.symlink_to(sys.executable)
    parent = subprocess.Popen([str(odd), "-c", CHILDREN_SCRIPT], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None and parent.stdout.readline().strip() == "ready"
        yield parent
    finally:
        for child in psutil.Process(parent.pid).children(recursive=True):
            child.kill()
        parent.kill()
        parent.wait(timeout=10)


def test_the_tree_is_the_process_and_all_below_it_as_psutil_sees_it(family: subprocess.Popen[str]) -> None:
    expected = {family.pid} | {c.pid for c in psutil.Process(family.pid).children(recursive=True)}
    assert len(expected) == 3
    assert process_tree(family.pid) == expected


def test_a_process_that_is_gone_is_a_tree_of_one() -> None:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    gone = int(done.stdout)
    assert process_tree(gone) == {gone}


def test_a_tree_read_from_a_written_proc(tmp_path: Path) -> None:
    """Names that hold ") " and digits must not shift the parent field; a truncated stat is skipped."""
    def stat(pid: int, name: str, parent: int) -> None:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) S {parent} {pid} {pid} 0 -1\n")

    stat(10, "vllm", 1)
    stat(11, "worker) S 10 (x", 10)
    stat(12, "VLLM::Worker_TP0", 11)
    stat(13, "other", 1)
    (tmp_path / "14").mkdir()
    (tmp_path / "14" / "stat").write_text("14 (broken")
    (tmp_path / "self").mkdir()
    assert process_tree(10, proc=str(tmp_path)) == {10, 11, 12}
    assert process_tree(13, proc=str(tmp_path)) == {13}


def _podman_env() -> dict[str, str]:
    from tests.deploy.conftest import testbed_env

    return testbed_env()


def test_a_real_container_tree_holds_every_process_of_the_container() -> None:
    """The tree of the pid podman inspects is every process in the container's PID namespace, as the kernel
    says (each process's /proc/PID/ns/pid): with podman 4.3 and 5.4 alike. ``podman top NAME hpid`` agrees on
    4.3; podman 5.4's own listing is no witness on the testbeds (cgroup v1, runc): it lists the host's
    processes, each with HPID "?"."""
    env = _podman_env()
    require_or_skip(shutil.which("podman") is not None and "RIGCTL_TEST_ENGINE_IMAGE" in env,
                    "podman and the test-engine image (.ci/testbed.sh up)")
    name = f"rigctl-tree-{uuid.uuid4().hex[:8]}"
    image = env["RIGCTL_TEST_ENGINE_IMAGE"]
    run = ["podman", "run", "-d", "--rm", "--name", name, "--entrypoint", "python3", "--", image, "-c", CHILDREN_SCRIPT]
    subprocess.run(run, env=env, check=True, capture_output=True, timeout=60)
    try:
        _wait_for_ready(name, env)  # the script prints it once both children are started
        pid = int(subprocess.run(["podman", "inspect", "--format", "{{.State.Pid}}", "--", name], env=env,
                                 check=True, capture_output=True, text=True, timeout=30).stdout)
        members = _in_pid_namespace_of(pid)
        assert len(members) == 3, f"the container's PID namespace holds {sorted(members)}"
        assert process_tree(pid) == members
        if podman_flavour() < (5, 0):
            hpids = _container_pids(name, env, want=3)
            assert hpids == members, f"podman lists {sorted(hpids)}, the namespace holds {sorted(members)}"
    finally:
        subprocess.run(["podman", "rm", "-f", "-t", "0", "--", name], check=False, env=env, capture_output=True, timeout=60)


def _in_pid_namespace_of(pid: int, proc: str = "/proc") -> set[int]:
    """Every process (by its pid here) in the PID namespace ``pid`` is in: for a container's init, every
    process of the container."""
    want = os.stat(f"{proc}/{pid}/ns/pid")
    found = set()
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            ns = os.stat(f"{proc}/{entry.name}/ns/pid")
        except OSError:  # gone meanwhile, or a kernel thread's namespace this process may not read
            continue
        if (ns.st_dev, ns.st_ino) == (want.st_dev, want.st_ino):
            found.add(int(entry.name))
    return found


def _wait_for_ready(name: str, env: dict[str, str]) -> None:
    deadline = time.monotonic() + 60
    while True:
        logs = subprocess.run(["podman", "logs", "--", name], check=False, env=env, capture_output=True, text=True,
                              timeout=30)
        if "ready" in logs.stdout.split() or time.monotonic() > deadline:
            assert "ready" in logs.stdout.split(), f"podman logs {name}: {logs.stdout} {logs.stderr}"
            return
        time.sleep(0.2)


def _container_pids(name: str, env: dict[str, str], *, want: int) -> set[int]:
    deadline = time.monotonic() + 30
    while True:
        done = subprocess.run(["podman", "top", name, "hpid"], check=False, env=env, capture_output=True, text=True, timeout=30)
        pids = {int(w) for w in done.stdout.split() if w.isdigit()}
        if len(pids) >= want or time.monotonic() > deadline:
            assert len(pids) >= want, f"podman top {name}: {done.stdout} {done.stderr}"
            return pids
        time.sleep(0.2)


class PerProcessGpu:
    """NVML as rigctl reads it: memory per process id (what nvmlDeviceGetComputeRunningProcesses lists)."""

    def __init__(self, usage_mib: dict[int, int]) -> None:
        self.usage_mib = usage_mib
        self.asked: list[set[int]] = []

    def used_by(self, pids: set[int]) -> int | None:
        self.asked.append(set(pids))
        return sum(mib for pid, mib in self.usage_mib.items() if pid in pids)

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        return None


def test_status_counts_the_memory_the_workers_hold(family: subprocess.Popen[str], tmp_path: Path) -> None:
    workers = sorted(c.pid for c in psutil.Process(family.pid).children())
    gpu = PerProcessGpu({workers[0]: 40_000, workers[1]: 38_500, os.getpid(): 999})
    info = ContainerInfo(id="c0", name="svc", running=True, exit_code=0, pid=family.pid, image_digest="",
                         started_at="", labels={})
    unit = tmp_path / "svc.container"
    unit.write_text("[Container]\nContainerName=svc\nImage=localhost/engine@sha256:" + "0" * 64
                    + "\nLabel=rigctl.managed=true\n")
    systemd = FakeSystemd(tmp_path, FakeClock())
    loaded = Unit.of(str(unit), unit.read_text(), scope="user")  # as the loader hands it over
    found = describe(Managed(Scope.USER, "svc.service", unit, None, loaded), systemd=systemd,
                     podman=FakePodman({"svc": info}), probe=_NoProbe(), gpu=gpu)
    assert found.gpu_memory_mib == 78_500
    assert gpu.asked and gpu.asked[0] >= {family.pid, *workers}


class _NoProbe:
    def check(self, base_url: str, health_path: str, served_name: str) -> object:
        raise AssertionError("no endpoint: status must not probe")

    def close(self) -> None:
        pass
