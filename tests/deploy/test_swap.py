"""`rigctl swap`: the state machine with fake deploy operations at every failure point, and once for
real on the testbed (a word-salad TO rolls back and FROM serves again). GPU memory is the real NVML adapter
over the NVML fake of a real H200 capture, whose answers change on the swap's clock (FROM's memory going away
after a delay, as tests/fixtures/inventory/nvml-h200-release.json saw it go on an H200)."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.deploy import conftest as testbed  # its testbed_env, imported by name, would be collected
from tests.fakes import FakeClock, FakeGpu, FakePodman, plan_of
from tests.preflight.conftest import healthy_facts
from tests.support.nvml_fake import FakeNvml, holding

from rigctl.adapters.gpu_memory import GpuMemory, NvmlGpuMemory
from rigctl.adapters.podman import ContainerInfo
from rigctl.deploy import canary as canaries
from rigctl.deploy.down import DownResult
from rigctl.deploy.swap import HostSwapDeploy, Side, SwapOptions, SwapStep, free_facts, swap
from rigctl.deploy.up import ChecksOutcome, UpResult
from rigctl.deploy.warmup import WaitResult, WaitStatus
from rigctl.errors import DeployError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.places import Dirs, Scope
from rigctl.plan.plan import Plan
from rigctl.preflight.finding import Finding, Severity
from rigctl.recipe.load import load
from rigctl.verify.report import CheckResult

GIB = 1024**3
H200 = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "nvml-h200-capture.json")
                  .read_text())  # the real single-H200 capture: 140.4 GiB, 615 MiB used with no process
# pids no Linux system can have (pid_max is at most 2^22): /proc never names them, whatever runs here
FROM_ENGINE, FROM_WORKER, OTHER = 4_300_001, 4_300_002, 4_300_099


def _recipe_file(tmp: Path, name: str, port: int, *, gpus: int = 0, image: str = "localhost/x@sha256:" + "a" * 64,
                 env: dict[str, str] | None = None) -> Path:
    ckpt = tmp / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 1000)
    data: dict[str, Any] = {
        "name": name, "description": "swap test", "family": "test", "served_name": "test-model", "image": image,
        "checkpoint": {"format": "safetensors", "source": "test/fake", "path": str(ckpt), "shards": 1,
                       "total_bytes": 1000, "license": {"id": "apache-2.0"}},
        "engine": {"kind": "vllm", "port": 8000},
        "context_length": 4096,
        "gpus": {"count": gpus},
        "container": {"publish": {"port": port}, "volumes": [{"host": str(ckpt), "container": "/models/test"}],
                      "env": {"FAKE_VLLM_NO_ACCESS_LOG": "1", **(env or {})}},
        "service": {"warmup_budget_s": 30, "stall_budget_s": 20, "restart_sec": 1, "stop_timeout_s": 10},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _up_result(recipe: str, *, ok: bool, wait: WaitStatus = WaitStatus.READY, checks_ok: bool = True) -> UpResult:
    res = UpResult(recipe=recipe, scope=Scope.USER, unit=f"rigctl-{recipe}.service", container=f"rigctl-{recipe}",
                   endpoint="http://127.0.0.1:1", served_name="test-model", image="img", ok=ok,
                   exit_code=ExitCode.OK if ok else ExitCode.DEPLOY_FAILED, action="installed")
    res.wait = WaitResult(status=wait, elapsed_s=1.0, phase="warmup", detail=f"{wait}", unit=None, readiness=None)
    if wait is WaitStatus.READY:
        severity = Severity.OK if checks_ok else Severity.FAIL
        res.checks = ChecksOutcome(ok=checks_ok, results=[
            CheckResult("smoke", severity, "Paris" if checks_ok else "word salad"),
            CheckResult("repetition", severity, "no loop" if checks_ok else "loop of 'capital France'"),
        ])
    res.message = "ready" if ok else f"{wait}"
    return res


class FakeDeploy:
    """Records every call; each operation's answer is set per test."""

    def __init__(self, clock: FakeClock | None = None, *, stop_s: float = 0) -> None:
        self.clock, self.stop_s = clock, stop_s  # a stop takes stop_s on clock
        self.calls: list[str] = []
        self.preflight_ok = True
        self.freed: tuple[tuple[str, ...], int | None, Collection[int] | None] | None = None
        self.pids: dict[str, set[int]] = {}  # each side's container processes (none: not known)
        self.stop_fails: set[str] = set()
        self.up_answer: Callable[[str], UpResult] = lambda name: _up_result(name, ok=True)
        self.restore_answer: Callable[[str], UpResult] = lambda name: _up_result(name, ok=True)
        self.serving: set[str] = set()
        self.canaries: set[str] = set()  # deployments with a canary
        self.paused: set[str] = set()

    def preflight(self, side: Side, *, freed_gpus: Sequence[str], freed_port: int | None,
                  freed_pids: Collection[int] | None = None) -> Plan:
        self.calls.append(f"preflight {side.name}")
        self.freed = (tuple(freed_gpus), freed_port, freed_pids)
        findings = [] if self.preflight_ok else [Finding(id="gpu-memory", severity=Severity.FAIL, message="too small")]
        return plan_of(side.recipe, findings=findings, gpu_ids=["0"])

    def holders(self, side: Side) -> set[int] | None:
        return self.pids.get(side.name)

    def stop(self, side: Side, *, remove: bool) -> DownResult:
        self.calls.append(f"stop {side.name}" + (" remove" if remove else ""))
        if side.name in self.stop_fails:
            raise DeployError(f"systemctl stop rigctl-{side.name}.service timed out")
        if self.clock is not None:
            self.clock.sleep(self.stop_s)
        self.serving.discard(side.name)
        return DownResult(recipe=side.name, unit=f"rigctl-{side.name}.service", was_active="active", stopped=True,
                          container_gone=True, removed=["x.container"] if remove else [])

    def up(self, side: Side) -> UpResult:
        self.calls.append(f"up {side.name}")
        res = self.up_answer(side.name)
        if res.wait is not None and res.wait.status is WaitStatus.READY:
            self.serving.add(side.name)  # up leaves a wrong-but-running engine running
        return res

    def restore(self, side: Side) -> UpResult:
        self.calls.append(f"restore {side.name}")
        res = self.restore_answer(side.name)
        if res.ok:
            self.serving.add(side.name)
        return res

    def pause_canary(self, side: Side) -> canaries.Held | None:
        self.calls.append(f"pause-canary {side.name}")
        if side.name not in self.canaries:
            return None
        self.paused.add(side.name)
        return canaries.Held(side.name, None, f"rigctl-{side.name}-canary.timer")

    def resume_canary(self, held: canaries.Held) -> None:
        self.calls.append(f"resume-canary {held.deployment}")
        self.paused.discard(held.deployment)

    def move_canary(self, held: canaries.Held, target: Side) -> canaries.CanaryChange:
        self.calls.append(f"move-canary {held.deployment} {target.name}")
        self.canaries.discard(held.deployment)
        self.paused.discard(held.deployment)
        self.canaries.add(target.name)
        return canaries.CanaryChange(target.name, "installed", f"rigctl-{target.name}-canary.timer",
                                     f"rigctl-{target.name}-canary.service", "/u", message="moved")


@pytest.fixture
def sides(tmp_path: Path) -> tuple[Side, Side]:
    a = load(str(_recipe_file(tmp_path, "sw-a", 18301, gpus=1))).recipe
    b = load(str(_recipe_file(tmp_path, "sw-b", 18301, gpus=1))).recipe
    return Side(a, "sw-a.yaml", ("GPU-aaaa",), 18301), Side(b, "sw-b.yaml")


def _run(sides: tuple[Side, Side], deploy: FakeDeploy, tmp_path: Path, gpu: GpuMemory | None = None, *,
         clock: FakeClock | None = None, said: list[str] | None = None, **opts: float) -> Any:
    seen: list[SwapStep] = []
    waits = {} if said is None else {"on_wait": said.append}
    result = swap(sides[0], sides[1], deploy=deploy, gpu=gpu or FakeGpu(), clock=clock or FakeClock(),
                  options=SwapOptions(**opts), lock_dir=tmp_path / "locks", on_step=seen.append, **waits)
    assert [s.name for s in seen] == [s.name for s in result.steps]  # every step is reported as it happens
    return result


def h200(clock: FakeClock, *procs: tuple[int, int]) -> FakeNvml:
    """The H200 with ``procs`` (pid, bytes) holding memory, its answers free to change on ``clock``."""
    capture = copy.deepcopy(H200)
    capture["devices"][0].update(holding(capture["devices"][0], list(procs)))
    return FakeNvml(capture, clock=clock.monotonic)


@pytest.fixture
def on_h200(tmp_path: Path) -> tuple[Side, Side]:
    """FROM deployed on the H200 (by UUID, as `up` records it), TO to come in its place."""
    a = load(str(_recipe_file(tmp_path, "sw-a", 18401, gpus=1))).recipe
    b = load(str(_recipe_file(tmp_path, "sw-b", 18401, gpus=1))).recipe
    uuid = H200["devices"][0]["nvmlDeviceGetUUID"]["ok"]
    return Side(a, "sw-a.yaml", (uuid,), 18401), Side(b, "sw-b.yaml")


def _names(result: Any) -> list[str]:
    return [s.name for s in result.steps]


def test_swapped_waits_for_gpu_release_and_removes_from(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    gpu = FakeGpu(busy_polls=3)
    result = _run(sides, deploy, tmp_path, gpu)
    assert result.outcome == "swapped" and result.exit_code is ExitCode.OK and result.ok
    assert deploy.calls == ["preflight sw-b", "pause-canary sw-a", "stop sw-a", "up sw-b", "stop sw-a remove"]
    assert deploy.freed == (("GPU-aaaa",), 18301, None)  # TO preflighted as if FROM's GPUs and port were free
    assert _names(result) == ["preflight-to", "stop-from", "gpu-release", "up-to", "remove-from"]
    release = result.steps[2]
    assert release.detail["released"] is True and gpu.looks == 4 and release.detail["waited_s"] > 0
    assert deploy.serving == {"sw-b"}
    doc = result.to_dict()
    assert doc["outcome"] == "swapped" and doc["steps"][0]["step"] == "preflight-to"


def test_preflight_failure_stops_nothing(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    deploy.preflight_ok = False
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "refused" and result.exit_code is ExitCode.CHECKS_FAILED
    assert deploy.calls == ["preflight sw-b"]
    assert deploy.serving == {"sw-a"}
    assert "gpu-memory: too small" in result.steps[0].message and "nothing was stopped" in result.message


def test_death_in_warmup_rolls_back(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    deploy.up_answer = lambda name: _up_result(name, ok=False, wait=WaitStatus.DIED)
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "rolled-back" and result.exit_code is ExitCode.DEPLOY_FAILED
    assert deploy.calls == ["preflight sw-b", "pause-canary sw-a", "stop sw-a", "up sw-b", "stop sw-b remove",
                            "restore sw-a"]
    assert _names(result) == ["preflight-to", "stop-from", "gpu-release", "up-to", "stop-to", "gpu-release-to",
                              "restore-from"]
    assert result.steps[3].detail["wait"]["status"] == "died"
    assert deploy.serving == {"sw-a"}
    assert "up-to" in result.message and "serving again" in result.message


def test_word_salad_rolls_back(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    deploy.up_answer = lambda name: _up_result(name, ok=False, checks_ok=False)
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "rolled-back"
    up_step = result.steps[3]
    assert not up_step.ok and "smoke: word salad" in up_step.message and "repetition" in up_step.message
    assert "stop sw-b remove" in deploy.calls  # the wrong-but-running TO is stopped before FROM returns
    assert deploy.serving == {"sw-a"}


def test_rollback_failure_is_loud(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.up_answer = lambda name: _up_result(name, ok=False, wait=WaitStatus.DIED)
    deploy.restore_answer = lambda name: _up_result(name, ok=False, wait=WaitStatus.DIED)
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "rollback-failed" and result.exit_code is ExitCode.INTERNAL
    assert "ROLLBACK FAILED" in result.message and "NOTHING MAY BE SERVING" in result.message
    assert any("rigctl up sw-a.yaml" in item for item in result.todo)
    assert deploy.serving == set()


def test_rollback_error_raised_by_restore_is_a_failed_rollback(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.up_answer = lambda name: _up_result(name, ok=False, checks_ok=False)

    def broken(name: str) -> UpResult:
        raise DeployError(f"{name}'s unit files are gone")

    deploy.restore_answer = broken
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "rollback-failed"
    assert result.steps[-1].name == "restore-from" and "unit files are gone" in result.steps[-1].message


def test_stop_failure_restores_from_without_touching_to(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    deploy.stop_fails.add("sw-a")
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "rolled-back"
    assert deploy.calls == ["preflight sw-b", "pause-canary sw-a", "stop sw-a", "restore sw-a"]


def test_the_canary_follows_the_swap(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    deploy.canaries.add("sw-a")
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "swapped"
    # paused before FROM stops, moved only once TO is proven and FROM's unit is gone
    assert deploy.calls == ["preflight sw-b", "pause-canary sw-a", "stop sw-a", "up sw-b", "stop sw-a remove",
                            "move-canary sw-a sw-b"]
    assert _names(result) == ["preflight-to", "canary-pause", "stop-from", "gpu-release", "up-to", "remove-from",
                              "canary-move"]
    assert deploy.canaries == {"sw-b"} and not deploy.paused


@pytest.mark.parametrize("restore_ok", [True, False])
def test_a_rollback_gives_the_canary_back_to_from(sides: tuple[Side, Side], tmp_path: Path, restore_ok: bool) -> None:
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    deploy.canaries.add("sw-a")
    deploy.up_answer = lambda name: _up_result(name, ok=False, checks_ok=False)
    if not restore_ok:
        deploy.restore_answer = lambda name: _up_result(name, ok=False, wait=WaitStatus.DIED)
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == ("rolled-back" if restore_ok else "rollback-failed")
    assert deploy.calls[-2:] == ["restore sw-a", "resume-canary sw-a"]
    assert _names(result)[-2:] == ["restore-from", "canary-resume"]
    assert deploy.canaries == {"sw-a"} and not deploy.paused
    assert not any(c.startswith("move-canary") for c in deploy.calls)


def test_a_refused_swap_leaves_the_canary_running(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    deploy.canaries.add("sw-a")
    deploy.preflight_ok = False
    result = _run(sides, deploy, tmp_path)
    assert result.outcome == "refused" and deploy.calls == ["preflight sw-b"] and not deploy.paused


def test_gpu_memory_never_released_rolls_back(sides: tuple[Side, Side], tmp_path: Path) -> None:
    deploy = FakeDeploy()
    result = _run(sides, deploy, tmp_path, FakeGpu(busy_polls=10_000), release_timeout_s=5)
    assert result.outcome == "rolled-back"
    release = result.steps[2]
    assert release.name == "gpu-release" and not release.ok and release.detail["released"] is False
    assert "up sw-b" not in deploy.calls


def test_no_nvml_counts_as_released_and_says_so(sides: tuple[Side, Side], tmp_path: Path) -> None:
    result = _run(sides, FakeDeploy(), tmp_path, FakeGpu(busy_polls=None))
    release = result.steps[2]
    assert release.ok and release.detail["released"] is None and "not verifiable" in release.message


def test_the_fake_lets_memory_go_as_the_real_h200_did() -> None:
    """The NVML fake's holding() against the release measured on a real H200 (nvml-h200-release.json): while the
    process lives it is listed with its bytes and used memory has grown by at least them; then process and
    memory go together, back to exactly the idle used memory the capture the fake answers from holds."""
    measured = json.loads((Path(__file__).resolve().parents[1] / "fixtures" / "inventory" / "nvml-h200-release.json")
                          .read_text())
    idle = H200["devices"][0]["nvmlDeviceGetMemoryInfo"]["ok"]
    for run in measured["runs"]:
        base, held, last = run["base"], run["held"], run["timeline"][-1]
        assert (base["used"], base["total"], base["procs"]) == (idle["used"], idle["total"], [])
        [(pid, nbytes)] = held["procs"]
        assert held["used"] - base["used"] >= nbytes and held["free"] + held["used"] == base["total"]
        assert last["procs"] == [] and last["used"] == base["used"]
        assert all(e["procs"] or e["used"] == base["used"] for e in run["timeline"])  # never memory without a process
        clock = FakeClock()
        lib = h200(clock, (pid, nbytes))
        lib.at(clock.now + run["exited_at"], 0, holding(H200["devices"][0], []))
        gpu = NvmlGpuMemory(lib)
        [now] = gpu.devices([]) or []
        assert [(p.pid, p.used_memory_bytes) for p in now.processes] == [(pid, nbytes)]
        assert now.memory_used_bytes == base["used"] + nbytes
        clock.sleep(run["exited_at"])
        [after] = gpu.devices([]) or []
        assert after.processes == [] and after.memory_used_bytes == base["used"]


def test_swap_waits_until_nvml_shows_from_memory_released(on_h200: tuple[Side, Side], tmp_path: Path) -> None:
    # FROM's worker holds 120 GiB; another process (not FROM's) keeps 2 GiB throughout. NVML lets FROM's
    # memory go 12 s after the stop: TO is started only then, and the wait said how it went on the way.
    clock = FakeClock()
    lib = h200(clock, (FROM_WORKER, 120 * GIB), (OTHER, 2 * GIB))
    lib.at(clock.now + 12, 0, holding(H200["devices"][0], [(OTHER, 2 * GIB)]))
    deploy = FakeDeploy()
    deploy.pids = {"sw-a": {FROM_ENGINE, FROM_WORKER}}
    said: list[str] = []
    result = _run(on_h200, deploy, tmp_path, NvmlGpuMemory(lib), clock=clock, said=said)
    assert result.outcome == "swapped", result.to_dict()
    assert deploy.freed is not None and deploy.freed[2] == {FROM_ENGINE, FROM_WORKER}  # TO judged on FROM's memory
    release = result.steps[2]
    assert release.name == "gpu-release" and release.ok and release.detail["released"] is True
    assert release.detail["waited_s"] == 12.0 and "120.0 GiB memory released" in release.message
    assert len(said) == 3 and all(f"PID {FROM_WORKER} (name not visible, 120.0 GiB)" in line for line in said)
    assert "(0s of 120s)" in said[0] and "(10s of 120s)" in said[-1]
    assert deploy.calls.index("up sw-b") > deploy.calls.index("stop sw-a")


def test_memory_still_in_use_with_no_process_listed_is_waited_for(on_h200: tuple[Side, Side], tmp_path: Path) -> None:
    # a second after the stop NVML lists no process, but 100 GiB are still in use (the holder in a PID namespace
    # NVML does not show here): released is the free memory coming back, not an empty process list
    clock = FakeClock()
    lib = h200(clock, (FROM_WORKER, 100 * GIB))
    gone = {"nvmlDeviceGetComputeRunningProcesses": {"ok": []}}
    lib.at(clock.now + 1, 0, {**holding(H200["devices"][0], [(FROM_WORKER, 100 * GIB)]), **gone})
    lib.at(clock.now + 4, 0, holding(H200["devices"][0], []))
    deploy = FakeDeploy(clock, stop_s=1)
    deploy.pids = {"sw-a": {FROM_WORKER}}
    result = _run(on_h200, deploy, tmp_path, NvmlGpuMemory(lib), clock=clock)
    release = result.steps[2]
    assert result.outcome == "swapped" and release.ok and release.detail["waited_s"] == 3.0


def test_release_timeout_names_the_holders_with_pids(on_h200: tuple[Side, Side], tmp_path: Path) -> None:
    # FROM's worker never lets go (stuck in the driver): the step fails naming it, nothing of TO is started
    clock = FakeClock()
    lib = h200(clock, (FROM_WORKER, 120 * GIB), (OTHER, 2 * GIB))
    deploy = FakeDeploy()
    deploy.pids = {"sw-a": {FROM_ENGINE, FROM_WORKER}}
    result = _run(on_h200, deploy, tmp_path, NvmlGpuMemory(lib), clock=clock, release_timeout_s=5)
    release = result.steps[2]
    assert result.outcome == "rolled-back" and not release.ok and release.detail["released"] is False
    assert f"PID {FROM_WORKER} (name not visible, 120.0 GiB)" in release.message
    assert f"PID {OTHER} (name not visible, 2.0 GiB)" in release.message  # everyone on that GPU is named
    assert f"kill {FROM_WORKER} {OTHER}" in release.message and "after sw-a stopped" in release.message
    assert {h["pid"] for h in release.detail["holders"]} == {FROM_WORKER, OTHER}
    assert release.detail["holders"][0]["used_bytes"] == 120 * GIB
    assert "up sw-b" not in deploy.calls and deploy.calls[-1] == "restore sw-a"


def _host_deploy(tmp_path: Path, podman: FakePodman | None = None) -> HostSwapDeploy:
    """The real deploy operations of a swap, over the fake adapters (no operation here runs a unit)."""
    from tests.fakes import FakeProbe, FakeSystemd

    from rigctl.adapters import Adapters

    clock = FakeClock()
    systemd = FakeSystemd(tmp_path / "units", clock)
    adapters = Adapters(systemd=systemd, podman=podman or FakePodman(), probe=FakeProbe(systemd, "x", "test-model"),
                        clock=clock, gpu=FakeGpu())
    return HostSwapDeploy(Scope.USER, adapters=adapters, dirs=Dirs(tmp_path / "units", tmp_path / "state"))


def test_to_preflight_counts_only_what_from_frees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HostSwapDeploy's preflight of TO on this H200 (its facts NVML's, through the fake): FROM's 120 GiB are
    counted free, another process's memory is not. Qwen3-8B at gpu-memory-utilization 0.9 asks 126.9 of 140.4 GiB."""
    import rigctl.deploy.swap as swap_module

    to = load("qwen3-8b-vllm").recipe
    deploy = _host_deploy(tmp_path)
    uuid = H200["devices"][0]["nvmlDeviceGetUUID"]["ok"]

    def gpu_fit(*procs: tuple[int, int]) -> Any:
        facts = healthy_facts(to, h200(FakeClock(), *procs).capture)
        monkeypatch.setattr(swap_module, "facts_for_recipe", lambda recipe, **_kw: facts)
        plan = deploy.preflight(Side(to, "qwen3-8b-vllm"), freed_gpus=[uuid], freed_port=None,
                                freed_pids={FROM_ENGINE, FROM_WORKER})
        return plan.report.finding("gpu-fit")

    # FROM alone holds the GPU: NVML shows 19.8 GiB free now, yet TO fits in what FROM frees
    alone = gpu_fit((FROM_WORKER, 120 * GIB))
    assert alone.severity is Severity.OK, alone.message
    # another process keeps 16 GiB: FROM's 120 GiB are not enough, and the holder that is not FROM's is named
    shared = gpu_fit((FROM_WORKER, 120 * GIB), (OTHER, 16 * GIB))
    assert shared.severity is Severity.FAIL and f"PID {OTHER}" in shared.message
    assert f"PID {FROM_WORKER}" not in shared.message and "123.8 GiB free" in shared.message


def test_holders_are_the_container_process_tree(tmp_path: Path) -> None:
    recipe = load(str(_recipe_file(tmp_path, "sw-a", 18402))).recipe
    podman = FakePodman()
    deploy = _host_deploy(tmp_path, podman)
    side = Side(recipe, "sw-a.yaml")
    assert deploy.holders(side) is None  # no container: not known
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        podman.containers[recipe.container_name] = ContainerInfo(
            id="c" * 64, name=recipe.container_name, running=True, exit_code=0, pid=os.getpid(), image_digest="",
            started_at="", labels={})
        got = deploy.holders(side)
        assert got is not None and {os.getpid(), child.pid} <= got  # the engine's workers are its children
    finally:
        child.kill()
        child.wait(timeout=10)


def test_same_recipe_is_a_usage_error(sides: tuple[Side, Side], tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        swap(sides[0], sides[0], deploy=FakeDeploy(), gpu=FakeGpu(), clock=FakeClock(), lock_dir=tmp_path)


def test_a_held_lock_refuses_the_swap(sides: tuple[Side, Side], tmp_path: Path) -> None:
    from rigctl.deploy.state import locked

    deploy = FakeDeploy()
    with locked("sw-b", "up sw-b", tmp_path / "locks"), pytest.raises(DeployError, match="another rigctl command"):
        _run(sides, deploy, tmp_path)
    assert deploy.calls == []


def test_free_facts_idles_from_gpus_and_port() -> None:
    from rigctl.host.facts import Gpu, GpuInventory, GpuProcess, HostFacts, Listener, Ports

    gpu = GpuInventory(available=True, devices=[
        Gpu(index=0, uuid="GPU-aaaa", name="H200", memory_total_bytes=100, memory_used_bytes=90,
            processes=[GpuProcess(pid=7)]),
        Gpu(index=1, uuid="GPU-bbbb", name="H200", memory_total_bytes=100, memory_used_bytes=90,
            processes=[GpuProcess(pid=8)]),
    ])
    facts = HostFacts(gpu=gpu, ports=Ports(listening=[Listener(address="127.0.0.1", port=18301),
                                                      Listener(address="127.0.0.1", port=22)]))
    freed = free_facts(facts, ["GPU-aaaa"], 18301)
    assert freed.gpu.devices[0].processes == [] and freed.gpu.devices[0].memory_used_bytes == 0
    assert freed.gpu.devices[1].processes == facts.gpu.devices[1].processes
    assert [lis.port for lis in freed.ports.listening] == [22]


def test_free_facts_frees_what_from_processes_hold_and_no_more() -> None:
    from rigctl.host.facts import Gpu, GpuInventory, GpuProcess, HostFacts

    gpu = GpuInventory(available=True, devices=[
        Gpu(index=0, uuid="GPU-aaaa", name="H200", memory_total_bytes=100, memory_free_bytes=5, memory_used_bytes=95,
            processes=[GpuProcess(pid=7, used_memory_bytes=80), GpuProcess(pid=9, used_memory_bytes=10)]),
        Gpu(index=1, uuid="GPU-bbbb", name="H200", memory_total_bytes=100, memory_free_bytes=5, memory_used_bytes=95,
            processes=[GpuProcess(pid=7, used_memory_bytes=None), GpuProcess(pid=8, used_memory_bytes=30)]),
    ])
    freed = free_facts(HostFacts(gpu=gpu), ["GPU-aaaa"], None, {7})
    zero, one = freed.gpu.devices
    assert (zero.memory_free_bytes, zero.memory_used_bytes) == (85, 15)  # 5 free + FROM's 80; pid 9 keeps its 10
    assert [p.pid for p in zero.processes] == [9]
    # NVML did not say what FROM holds there: all but what the others are known to hold
    assert (one.memory_free_bytes, [p.pid for p in one.processes]) == (70, [8])


# --- on the real testbed ---------------------------------------------------------------------------------


def _rigctl(env: dict[str, str], *args: str, timeout: float = 60) -> tuple[int, dict[str, Any]]:
    import json

    done = subprocess.run([sys.executable, "-m", "rigctl", *args, "--json"], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        return done.returncode, {"stdout": done.stdout, "stderr": done.stderr}


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_swap_to_word_salad_rolls_back_on_testbed(need: Callable[[bool, str], None], tmp_path: Path) -> None:
    env = testbed.testbed_env()
    need("RIGCTL_TEST_ENGINE_IMAGE" in env, "no test-engine image: run `.ci/testbed.sh up`")
    need(shutil.which("podman") is not None and shutil.which("systemctl") is not None,
         "podman/systemd missing (.ci/testbed.sh up)")
    image = env.get("RIGCTL_TEST_ENGINE_IMAGE", "")
    port = 18311
    good = _recipe_file(tmp_path, "sw-good", port, image=image)
    salad = _recipe_file(tmp_path, "sw-salad", port, image=image, env={"FAKE_VLLM_MODE": "word-salad"})
    try:
        code, doc = _rigctl(env, "up", str(good), "--user")
        assert code == 0, doc
        code, doc = _rigctl(env, "swap", "sw-good", str(salad), "--user")
        assert code == ExitCode.DEPLOY_FAILED, doc
        assert doc["command"] == "swap" and doc["ok"] is False and doc["outcome"] == "rolled-back"
        steps = {s["step"]: s for s in doc["steps"]}
        assert [s["step"] for s in doc["steps"]] == ["preflight-to", "stop-from", "gpu-release", "up-to", "stop-to",
                                                     "gpu-release-to", "restore-from"]
        assert steps["gpu-release"]["ok"] and "nothing to release" in steps["gpu-release"]["message"]
        assert not steps["up-to"]["ok"] and "smoke" in steps["up-to"]["message"]
        assert steps["restore-from"]["ok"] and steps["restore-from"]["detail"]["action"] == "started"
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/completions", timeout=10, json={
            "model": "test-model", "prompt": "The capital of France is", "max_tokens": 8, "temperature": 0})
        assert "Paris" in answer.json()["choices"][0]["text"]  # FROM serves again, and correctly
        code, status = _rigctl(env, "status", "--user")
        units = {s["unit"]: s for s in status["services"]}
        assert units["rigctl-sw-good.service"]["health"] == "ready"
        assert "rigctl-sw-salad.service" not in units  # TO's unit was removed, not left to start at boot
    finally:
        for name in ("sw-salad", "sw-good"):
            _rigctl(env, "down", name, "--user", "--remove")


def test_the_cold_swap_measures_its_downtime(sides: tuple[Side, Side], tmp_path: Path) -> None:
    """One model at a time: the endpoint has no verified model from FROM's stop to TO's verified ready (or to
    the restored FROM's); a refused swap stopped nothing and had none."""
    clock = FakeClock()
    deploy = FakeDeploy()
    deploy.serving.add("sw-a")
    answer = deploy.up_answer

    def slow_up(name: str) -> UpResult:
        clock.sleep(42.0)  # TO's warmup
        return answer(name)

    deploy.up_answer = slow_up
    result = _run(sides, deploy, tmp_path, clock=clock)
    assert result.outcome == "swapped" and result.mode == "cold"
    assert result.downtime_s is not None and 42.0 <= result.downtime_s < 60.0
    assert "s without a model (a cold swap" in result.message and result.to_dict()["downtime_s"] == result.downtime_s

    back = FakeDeploy()
    back.serving.add("sw-a")
    back.up_answer = lambda name: (clock.sleep(5.0), _up_result(name, ok=False, wait=WaitStatus.DIED))[1]
    rolled = _run(sides, back, tmp_path, clock=clock)
    assert rolled.outcome == "rolled-back" and rolled.downtime_s is not None and rolled.downtime_s >= 5.0

    refused = FakeDeploy()
    refused.serving.add("sw-a")
    refused.preflight_ok = False
    assert _run(sides, refused, tmp_path, clock=clock).downtime_s is None
