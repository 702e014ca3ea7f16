"""`up()`'s decisions, fast: the plan carried out against the fake adapters of ``tests/fakes.py`` (systemd's
states as `systemctl show` reports them, on a clock that moves only when slept through), with the real
install into a temporary quadlet directory and the real deployment records. Each case checks the action,
the exit code, the systemd calls made and the message. Smoke and repetition run for real, against the
test engine on 127.0.0.1 (healthy, or answering word salad). The whole chain runs on the testbed in
test_chain.py; these run anywhere in well under a few seconds together."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import (
    RUNNING,
    FakeClock,
    FakeGpu,
    FakePodman,
    FakeProbe,
    FakeSystemd,
    Script,
    exited,
    plan_of,
    small_recipe,
)

from rigctl.adapters import Adapters
from rigctl.deploy import state as records
from rigctl.deploy.up import UpInterrupted, UpOptions, UpResult, up
from rigctl.deploy.warmup import OutputFollower, Phase, WaitStatus
from rigctl.exitcodes import ExitCode
from rigctl.places import Dirs
from rigctl.recipe.model import Recipe

pytestmark = pytest.mark.timeout(30)

UNIT = "rigctl-fast.service"
CRASH = "ValueError: ReplaySSM prefill source/state row count mismatch"
ENGINE = Path(__file__).resolve().parents[1] / "engine" / "fake_vllm.py"


def make_recipe(tmp: Path, *, port: int = 18999, env: dict[str, str] | None = None, **service: int) -> Recipe:
    return small_recipe(tmp, "fast", port=port, container={"env": env or {}}, service={
        "warmup_budget_s": 90, "stall_budget_s": 30, "restart_sec": 1, "stop_timeout_s": 10, **service},
        known_issues={"signatures": [{"id": "replayssm-row-mismatch", "pattern": "ReplaySSM prefill source",
                                      "meaning": "the KDA ReplaySSM path crashed", "remedy": "set USE_REPLAYSSM=0"}]})


class Box:
    """One host: a quadlet and a state directory in tmp, and the fake outside world around them."""

    def __init__(self, tmp: Path, *, script: Script | None = None, ready_after: float | None = 1.5,
                 interrupt_on: str | None = None, interrupt_after: float | None = None) -> None:
        self.dirs = Dirs(tmp / "units", tmp / "state")
        self.clock = FakeClock(interrupt_after=interrupt_after)
        self.systemd = FakeSystemd(self.dirs.units, self.clock, script=script, interrupt_on=interrupt_on)
        self.podman = FakePodman(output={"rigctl-fast": ["INFO Loading safetensors checkpoint shards: 1/1", CRASH]})
        self.probe = FakeProbe(self.systemd, UNIT, "test-model", ready_after=ready_after)
        self.adapters = Adapters(systemd=self.systemd, podman=self.podman, probe=self.probe, clock=self.clock,
                                 gpu=FakeGpu())

    def up(self, recipe: Recipe, *, verify: bool = False, keep_failed: bool = False,
           on_stage: Any = None) -> UpResult:
        self.systemd.calls.clear()
        return up(plan_of(recipe), recipe_source="fast.yaml", adapters=self.adapters, dirs=self.dirs,
                  options=UpOptions(verify=verify, keep_failed=keep_failed), on_stage=on_stage)


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, int]]:
    """The test engine, healthy and word-salad, on free ports of 127.0.0.1 (the model is the only fake)."""
    procs = {mode: subprocess.Popen([sys.executable, str(ENGINE), "--port", "0", "--mode", mode,
                                     "--served-name", "test-model", "--max-model-len", "4096", "--token-delay", "0"],
                                    stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for mode in ("healthy", "word-salad")}
    try:
        ports = {}
        for mode, proc in procs.items():
            assert proc.stdout is not None
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and mode not in ports:
                found = re.search(r"listening on 127\.0\.0\.1:(\d+)", proc.stdout.readline())
                if found:
                    ports[mode] = int(found.group(1))
            assert mode in ports, f"the {mode} test engine did not start"
        yield ports
    finally:
        for proc in procs.values():
            proc.kill()
            proc.wait(timeout=10)


def test_ready_installs_starts_and_records(tmp_path: Path) -> None:
    box = Box(tmp_path)
    res = box.up(make_recipe(tmp_path))
    assert (res.action, res.exit_code, res.ok) == ("installed", ExitCode.OK, True)
    assert box.systemd.calls == ["daemon-reload", f"reset-failed {UNIT}", f"start {UNIT}"]
    assert res.message == "test-model ready at http://127.0.0.1:18999"
    assert res.wait is not None and res.wait.status is WaitStatus.READY and res.wait.elapsed_s >= 1.5
    assert (box.dirs.units / "rigctl-fast.container").is_file()
    record = records.load_record(box.dirs.state, "fast")
    assert record is not None and record.endpoint == "http://127.0.0.1:18999" and record.last_failure is None


def test_ready_and_verified_against_a_real_engine(tmp_path: Path, engines: dict[str, int]) -> None:
    box = Box(tmp_path)
    res = box.up(make_recipe(tmp_path, port=engines["healthy"]), verify=True)
    assert (res.action, res.exit_code, res.ok) == ("installed", ExitCode.OK, True)
    assert box.systemd.calls == ["daemon-reload", f"reset-failed {UNIT}", f"start {UNIT}"]
    assert res.checks is not None and {c.id: c.status for c in res.checks.results} == {
        "health": "pass", "models": "pass", "smoke": "pass", "repetition": "pass"}
    assert res.message == f"test-model ready at http://127.0.0.1:{engines['healthy']}"


def test_smoke_failed_leaves_it_running_and_says_so(tmp_path: Path, engines: dict[str, int]) -> None:
    box = Box(tmp_path)
    res = box.up(make_recipe(tmp_path, port=engines["word-salad"]), verify=True)
    assert (res.action, res.exit_code, res.ok) == ("installed", ExitCode.CHECKS_FAILED, False)
    assert box.systemd.calls == ["daemon-reload", f"reset-failed {UNIT}", f"start {UNIT}"]  # not stopped
    assert res.checks is not None and {c.id: c.status for c in res.checks.results}["smoke"] == "fail"
    assert res.message == (f"test-model is serving at http://127.0.0.1:{engines['word-salad']} but failed "
                           "verification; the service was left running")


@pytest.mark.parametrize("status", [1, 0])
def test_died_in_warmup_is_stopped_with_its_last_words(tmp_path: Path, status: int) -> None:
    box = Box(tmp_path, script=Script([(0.0, RUNNING), (2.0, exited(status))]), ready_after=None)
    res = box.up(make_recipe(tmp_path))
    assert (res.action, res.exit_code, res.ok) == ("installed", ExitCode.DEPLOY_FAILED, False)
    assert box.systemd.calls == ["daemon-reload", f"reset-failed {UNIT}", f"start {UNIT}", f"stop {UNIT}",
                                 f"reset-failed {UNIT}"]  # stopped to the end: no failed state the stop made
    assert res.wait is not None and res.wait.status is WaitStatus.DIED and res.wait.exit_status == status
    assert res.message.startswith(f"died: the engine exited with status {status} during warmup")
    assert ("exit 0 is still a crash" in res.message) is (status == 0)
    assert res.stopped_after_failure and [s.id for s in res.signatures] == ["replayssm-row-mismatch"]
    record = records.load_record(box.dirs.state, "fast")
    assert record is not None and record.last_failure is not None
    assert record.last_failure["exit_status"] == status and CRASH in record.last_failure["last_lines"]


def test_a_restart_systemd_has_queued_is_a_death_too(tmp_path: Path) -> None:
    """systemd 254 and later say ``auto-restart-queued`` once the restart job is queued (Debian 13's 257):
    the warmup reads it as the death it is, one rule for every reader (``UnitState.restart_pending``)."""
    queued = {**exited(1), "SubState": "auto-restart-queued"}
    box = Box(tmp_path, script=Script([(0.0, RUNNING), (2.0, queued)]), ready_after=None)
    res = box.up(make_recipe(tmp_path))
    assert res.wait is not None and (res.wait.status, res.wait.exit_status) == (WaitStatus.DIED, 1)
    assert res.message.startswith("died: the engine exited with status 1 during warmup"), res.message


def test_probes_of_the_recipes_own_health_path_are_not_progress() -> None:
    """rigctl's readiness polls show up in the engine's access log; they are neither progress (they would hide a
    stall) nor the engine's last words, whatever health path the recipe names."""
    clock = FakeClock()
    follower = OutputFollower(FakePodman(), "c", clock, health_path="/ping")
    for line in ['INFO: 127.0.0.1:51234 - "GET /ping HTTP/1.1" 503 Service Unavailable',
                 'INFO: 127.0.0.1:51234 - "GET /v1/models HTTP/1.1" 200 OK',
                 "[GIN] 2026/12/03 | 200 | GET /ping HTTP/1.1"]:
        follower._add(line)
    assert follower.line_count == 0 and follower.tail(5) == []
    follower._add('INFO: 127.0.0.1:51234 - "GET /health HTTP/1.1" 404 Not Found')  # not rigctl's poll here
    follower._add("Loading safetensors checkpoint shards: 1/8")
    assert follower.line_count == 2 and follower.phase.phase is Phase.LOADING


def test_died_with_keep_failed_is_left_to_systemd(tmp_path: Path) -> None:
    box = Box(tmp_path, script=Script([(0.0, RUNNING), (2.0, exited(1))]), ready_after=None)
    res = box.up(make_recipe(tmp_path), keep_failed=True)
    assert (res.action, res.exit_code) == ("installed", ExitCode.DEPLOY_FAILED)
    assert box.systemd.calls == ["daemon-reload", f"reset-failed {UNIT}", f"start {UNIT}"]
    assert not res.stopped_after_failure and res.message.startswith("died: the engine exited with status 1")


def test_stalled_is_stopped(tmp_path: Path) -> None:
    box = Box(tmp_path, ready_after=None)
    res = box.up(make_recipe(tmp_path, stall_budget_s=5))
    assert (res.action, res.exit_code, res.ok) == ("installed", ExitCode.DEPLOY_FAILED, False)
    assert box.systemd.calls == ["daemon-reload", f"reset-failed {UNIT}", f"start {UNIT}", f"stop {UNIT}", f"reset-failed {UNIT}"]
    assert res.wait is not None and res.wait.status is WaitStatus.STALLED
    assert res.message == "stalled: no output, CPU time or cache growth for 5 s (stall budget 5 s)"


def test_interrupted_at_install_changed_nothing(tmp_path: Path) -> None:
    def ctrl_c_at_install(stage: str) -> None:
        if stage == "install":
            raise KeyboardInterrupt

    box = Box(tmp_path)
    with pytest.raises(UpInterrupted) as err:
        box.up(make_recipe(tmp_path), on_stage=ctrl_c_at_install)
    assert err.value.exit_code is ExitCode.INTERRUPTED
    assert err.value.message.startswith("interrupted before the unit was installed: nothing changed")
    assert box.systemd.calls == [] and not (box.dirs.units / "rigctl-fast.container").exists()


def test_interrupted_after_install_before_start(tmp_path: Path) -> None:
    box = Box(tmp_path, interrupt_on="daemon-reload")
    with pytest.raises(UpInterrupted) as err:
        box.up(make_recipe(tmp_path))
    assert err.value.exit_code is ExitCode.INTERRUPTED
    assert "fully installed" in err.value.message and "before it was started" in err.value.message
    assert box.systemd.calls == ["daemon-reload"]


def test_interrupted_after_start_leaves_it_warming_up(tmp_path: Path) -> None:
    box = Box(tmp_path, ready_after=None, interrupt_after=1003.0)  # the clock starts at 1000
    with pytest.raises(UpInterrupted) as err:
        box.up(make_recipe(tmp_path))
    assert err.value.exit_code is ExitCode.INTERRUPTED
    assert err.value.message.startswith(f"interrupted after {UNIT} was started")
    assert "keeps warming it up" in err.value.message
    assert box.systemd.calls == ["daemon-reload", f"reset-failed {UNIT}", f"start {UNIT}"]  # not stopped


def test_unchanged_and_healthy_is_left_alone(tmp_path: Path) -> None:
    box = Box(tmp_path)
    recipe = make_recipe(tmp_path)
    assert box.up(recipe).action == "installed"
    box.clock.sleep(10)
    res = box.up(recipe)
    assert (res.action, res.exit_code, res.ok) == ("unchanged", ExitCode.OK, True)
    assert box.systemd.calls == []  # no reload, no restart
    assert res.message == "test-model ready at http://127.0.0.1:18999" and res.wait is None


def test_changed_unit_is_replaced(tmp_path: Path) -> None:
    box = Box(tmp_path)
    assert box.up(make_recipe(tmp_path)).action == "installed"
    box.clock.sleep(10)
    res = box.up(make_recipe(tmp_path, env={"FAKE_VLLM_MAX_MODEL_LEN": "4096"}))
    assert (res.action, res.exit_code, res.ok) == ("replaced", ExitCode.OK, True)
    assert box.systemd.calls == ["daemon-reload", f"stop {UNIT}", f"reset-failed {UNIT}", f"start {UNIT}"]
    assert "FAKE_VLLM_MAX_MODEL_LEN=4096" in (box.dirs.units / "rigctl-fast.container").read_text()
    assert res.message == "test-model ready at http://127.0.0.1:18999"


def test_refused_plan_touches_nothing(tmp_path: Path) -> None:
    from rigctl.preflight.finding import Finding, Severity

    box = Box(tmp_path)
    recipe = make_recipe(tmp_path)
    res = up(plan_of(recipe, findings=[Finding(id="port", severity=Severity.FAIL, message="taken")]),
             recipe_source="fast.yaml", adapters=box.adapters, dirs=box.dirs, options=UpOptions(verify=False))
    assert (res.action, res.exit_code, res.ok) == ("refused", ExitCode.CHECKS_FAILED, False)
    assert box.systemd.calls == [] and not box.dirs.units.exists()
    assert res.message == "preflight failed: nothing was installed or started"
    assert res.to_dict()["preflight"] == [{"id": "port", "severity": "fail", "message": "taken", "fix": None,
                                           "figures": None}]


def test_render_notes_reach_the_result(tmp_path: Path) -> None:
    """`up --json` carries the renderer's notes (they were dropped on this path; the dry run showed them)."""
    box = Box(tmp_path)
    plan = plan_of(make_recipe(tmp_path), podman=(4, 3), quadlet=(5, 4))
    assert plan.rendered is not None and plan.rendered.notes
    res = up(plan, recipe_source="fast.yaml", adapters=box.adapters, dirs=box.dirs, options=UpOptions(verify=False))
    assert res.ok and res.to_dict()["render_notes"] == [{"kind": n.kind, "message": n.message}
                                                         for n in plan.rendered.notes]
    assert any(n["kind"] == "adapted" and "Notify=healthy" in n["message"] for n in res.to_dict()["render_notes"])


def test_a_manager_that_reads_elsewhere_is_named_before_anything_is_installed(tmp_path: Path) -> None:
    """Operator issue, item 3: XDG_CONFIG_HOME set in the operator's shell but not in the user manager made
    `up --user` install where the generator never looks, then blame the recipe and leave the file."""
    from rigctl.errors import DeployError

    box = Box(tmp_path)
    box.systemd.manager_env = {"HOME": str(tmp_path / "home"), "PATH": "/usr/bin"}
    with pytest.raises(DeployError) as err:
        box.up(make_recipe(tmp_path))
    assert f"reads {tmp_path / 'home' / '.config' / 'containers' / 'systemd'}" in err.value.message
    assert f"installs into {box.dirs.units}" in err.value.message and "set-environment" in (err.value.fix or "")
    assert box.systemd.calls == [] and not box.dirs.units.exists() and not box.dirs.state.exists()
    # where they agree, up goes on
    agreeing = Box(tmp_path / "b")
    agreeing.dirs = Dirs(tmp_path / "b" / "cfg" / "containers" / "systemd", tmp_path / "b" / "state")
    agreeing.systemd.unit_dir = agreeing.dirs.units
    agreeing.systemd.manager_env = {"XDG_CONFIG_HOME": str(tmp_path / "b" / "cfg")}
    assert agreeing.up(make_recipe(tmp_path)).ok


def test_a_unit_the_manager_never_generates_is_taken_back(tmp_path: Path) -> None:
    """The manager does not load the unit after daemon-reload and it did not exist before: what this up
    installed (the unit file and the record) is removed again, and the message says so."""
    from rigctl.errors import DeployError

    box = Box(tmp_path)
    box.systemd.unit_dir = tmp_path / "where-the-generator-looks"  # it never sees box.dirs.units
    with pytest.raises(DeployError) as err:
        box.up(make_recipe(tmp_path))
    assert "systemd has no rigctl-fast.service after daemon-reload" in err.value.message
    assert "removed what this up installed" in err.value.message
    assert list(box.dirs.units.iterdir()) == [] and records.load_record(box.dirs.state, "fast") is None


@pytest.mark.parametrize("cause", ["image", "port", "unknown"])
def test_podmans_own_failure_is_named_as_podmans(tmp_path: Path, cause: str) -> None:
    """Operator issue, item 5: a swap to an image that cannot be pulled, or to a taken port, said "the engine
    exited with status 125 during warmup" with no output. The engine never ran: podman's exit is named as
    podman's, with the cause it can find (a real listener on 127.0.0.1 holds the port)."""
    import socket

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1] if cause == "port" else 18999
    with holder:
        box = Box(tmp_path, script=Script([(0.0, RUNNING), (0.5, exited(125))]), ready_after=None)
        box.podman.output = {}  # the container never wrote a line
        recipe = make_recipe(tmp_path, port=port)
        box.podman.images = set() if cause == "image" else {recipe.image}
        res = box.up(recipe)
    assert res.exit_code == ExitCode.DEPLOY_FAILED and res.wait is not None
    assert "podman exited 125 (podman itself failed): the engine never ran" in res.message
    assert "the engine exited" not in res.message
    expected = {"image": f"`podman pull {recipe.image}`", "port": f"127.0.0.1:{port} is taken by PID {os.getpid()}",
                "unknown": f"journalctl --user -u {UNIT}"}[cause]
    assert expected in res.message, res.message


def test_a_second_up_of_the_same_deployment_is_refused_by_up_itself(tmp_path: Path) -> None:
    """The lock is up()'s own, not only the CLI's: while one up() of a deployment runs (held here at its install
    stage, in another thread), a second up() of it is refused (exit 6, LOCK_HELD) naming the first; the
    first then finishes as it would alone, and its lock is free again after."""
    import threading

    from rigctl.errors import LockHeldError

    first, second = Box(tmp_path / "a"), Box(tmp_path / "b")
    recipe = make_recipe(tmp_path)
    at_install, go_on = threading.Event(), threading.Event()
    done: list[UpResult] = []

    def hold(stage: str) -> None:
        if stage == "install":
            at_install.set()
            assert go_on.wait(20)

    running = threading.Thread(target=lambda: done.append(first.up(recipe, on_stage=hold)), daemon=True)
    running.start()
    try:
        assert at_install.wait(20)
        with pytest.raises(LockHeldError, match=f"pid {os.getpid()}: rigctl up fast") as refused:
            second.up(recipe)
        assert refused.value.exit_code == ExitCode.LOCK_HELD
        assert second.systemd.calls == []  # refused before anything was touched
    finally:
        go_on.set()
        running.join(20)
    assert done and done[0].ok and done[0].action == "installed"
    assert second.up(recipe).ok  # the first one's lock went with it


def test_down_takes_the_lock_and_goes_on_under_a_held_one(tmp_path: Path) -> None:
    """down() is locked as up() is: refused while another thread's operation holds the deployment's lock, and
    run under the lock when the operation that holds it calls it (swap's stop of FROM)."""
    import threading

    from rigctl.deploy.down import down
    from rigctl.deploy.state import deployment_lock
    from rigctl.errors import LockHeldError

    box = Box(tmp_path)
    recipe = make_recipe(tmp_path)
    assert box.up(recipe).ok

    def stop() -> Any:
        return down("fast", unit=UNIT, container=recipe.container_name, unit_dir=box.dirs.units,
                    state_dir=box.dirs.state, remove=False, stop_timeout_s=10, systemd=box.systemd,
                    podman=box.podman, gpu=FakeGpu(), clock=box.clock)

    taken, leave = threading.Event(), threading.Event()

    def other() -> None:
        with deployment_lock("fast", "swap fast other"):
            taken.set()
            leave.wait(20)

    holder = threading.Thread(target=other, daemon=True)
    holder.start()
    try:
        assert taken.wait(20)
        with pytest.raises(LockHeldError, match="rigctl swap fast other"):
            stop()
    finally:
        leave.set()
        holder.join(20)
    assert box.systemd.show(UNIT).active == "active"  # the refused down touched nothing
    with deployment_lock("fast", "swap fast other"):
        assert stop().stopped
