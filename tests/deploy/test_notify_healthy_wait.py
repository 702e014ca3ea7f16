"""`up` on a unit with podman 5's Notify=healthy: systemd keeps it "activating" until podman's health check
passes (seen on the podman 5 testbed: the engine answered 2-30 s before the unit went active). Ready means
systemd agrees, so `status` right after `up` says ready too, and a unit whose checks never pass is not
reported ready while systemd is about to kill it at TimeoutStartSec. Fakes only, on a fake clock."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.fakes import RUNNING, FakeClock, FakeGpu, FakePodman, FakeProbe, FakeSystemd, Script, plan_of, small_recipe

from rigctl.adapters import Adapters
from rigctl.adapters.probe import Readiness
from rigctl.deploy.up import UpOptions, UpResult, up
from rigctl.deploy.warmup import WaitStatus
from rigctl.places import Dirs

pytestmark = pytest.mark.timeout(30)

UNIT = "rigctl-fast.service"
# Type=notify before READY=1: the container runs (MainPID), systemd still waits
ACTIVATING = {**RUNNING, "ActiveState": "activating", "SubState": "start"}


class AnswersWhileActivating(FakeProbe):
    """The engine answers from ``ready_after`` s after the start whether or not systemd has heard yet."""

    def check(self, base_url: str, health_path: str, served_name: str) -> Readiness:
        self.asked += 1
        since = self.systemd.clock.monotonic() - self.systemd.started_at.get(self.unit, 1e9)
        if self.systemd.show(self.unit).active not in {"active", "activating"} or since < 0:
            return Readiness(None, [], None, f"{health_path}: ConnectError: connection refused")
        if self.ready_after is None or since < self.ready_after:
            return Readiness(503, [], None, f"{health_path} answered 503")
        return Readiness(200, [self.served_name], None, "ready")


def _up(tmp: Path, states: list[tuple[float, dict[str, str]]], *, warmup_budget_s: int = 90) -> UpResult:
    recipe = small_recipe(tmp, "fast", port=18998, service={
        "warmup_budget_s": warmup_budget_s, "stall_budget_s": 5, "restart_sec": 1, "stop_timeout_s": 10})
    dirs = Dirs(tmp / "units", tmp / "state")
    clock = FakeClock()
    systemd = FakeSystemd(dirs.units, clock, script=Script(states=states))
    probe = AnswersWhileActivating(systemd, UNIT, "test-model", ready_after=1.5)
    adapters = Adapters(systemd=systemd, podman=FakePodman(), probe=probe, clock=clock, gpu=FakeGpu())
    return up(plan_of(recipe), recipe_source="fast.yaml", adapters=adapters, dirs=dirs,
              options=UpOptions(verify=False, keep_failed=True))


def test_ready_waits_until_systemd_has_the_healthy_signal(tmp_path: Path) -> None:
    # The engine answers at 1.5 s; podman's startup check passes and the unit goes active at 8 s (past the
    # 5 s stall budget, with the engine silent: waiting on systemd is no stall).
    result = _up(tmp_path, [(0.0, ACTIVATING), (8.0, RUNNING)])
    assert result.ok, result.message
    assert result.wait is not None and result.wait.status is WaitStatus.READY
    assert result.wait.unit is not None and result.wait.unit.active == "active"
    assert result.wait.elapsed_s >= 8.0


def test_healthy_signal_that_never_comes_is_a_timeout_that_says_so(tmp_path: Path) -> None:
    result = _up(tmp_path, [(0.0, ACTIVATING)], warmup_budget_s=20)
    assert not result.ok
    assert result.wait is not None and result.wait.status is WaitStatus.TIMEOUT
    assert "systemd still waits for podman's healthy signal" in result.wait.detail
