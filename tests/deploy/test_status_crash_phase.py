"""A crash is placed in time by what rigctl itself saw (#35 items 2 and 3): the phase of the engine's last
exit comes from podman's health events of that container where it has health checks, else from the time
rigctl saw the deployment ready (its last boot); and ``restarting`` holds only within the warmup budget of
systemd's new start, after which a unit still not ready is ``not-serving``.

The rules are pure (``deploy.status.last_exit`` and ``judge``); the events here are ``ContainerEvent``
values, the shape ``adapters.podman.parse_events`` reads from podman's own output (its captured fixtures
are in tests/adapters/test_podman_events.py)."""

from __future__ import annotations

import time
from dataclasses import replace

from rigctl.adapters.podman import ContainerEvent
from rigctl.adapters.systemd import UnitState
from rigctl.deploy.state import DeploymentRecord
from rigctl.deploy.status import FAILING, judge, last_exit
from rigctl.places import Scope

NOW = time.time()
READY_AT = NOW - 600  # `up` saw the deployment ready ten minutes ago


def _record(budget: int | None = 300) -> DeploymentRecord:
    return DeploymentRecord(recipe="x", scope=Scope.USER, unit="rigctl-x.service", container="rigctl-x",
                            unit_dir="/tmp/u", unit_files=["rigctl-x.container"], endpoint="http://127.0.0.1:1",
                            served_name="m", image="i@sha256:" + "0" * 64, warmup_budget_s=budget)


def _unit(active: str, *, restarts: int, active_for: float, main_for: float, sub: str = "running") -> UnitState:
    mono = time.monotonic()
    return UnitState(active=active, sub=sub, load="loaded", result="success", restarts=restarts,
                     restart_policy="on-failure", exit_status=None, main_pid=4242,
                     active_since_mono_us=int((mono - active_for) * 1e6), source_path="/run/x.service",
                     main_started_mono_us=int((mono - main_for) * 1e6))


def _died(cid: str, at: float, code: int = 137) -> ContainerEvent:
    return ContainerEvent(at, "died", cid, code)


# --- item 2: the phase of the last exit ----------------------------------------------------------------


def test_a_kill_after_the_model_served_is_not_a_warmup_crash() -> None:
    # the container `up` saw ready served for eight minutes, then was killed; no health checks in the unit
    ended = last_exit(None, [_died("a", READY_AT + 480)], "b", _record(), ready_at=READY_AT)
    assert ended is not None and ended.phase == "serving" and ended.source == "podman-events"
    assert ended.words().endswith("while serving")


def test_a_death_before_rigctl_saw_it_ready_is_in_warmup() -> None:
    ended = last_exit(None, [_died("a", READY_AT - 30, 1)], "b", _record(), ready_at=READY_AT)
    assert ended is not None and ended.phase == "warmup"


def test_a_later_death_of_a_container_rigctl_never_saw_ready_is_not_placed() -> None:
    # killed while serving, restarted by systemd, and that new start died too: rigctl did not watch it
    events = [_died("a", READY_AT + 480), _died("b", READY_AT + 500, 1)]
    ended = last_exit(None, events, "c", _record(), ready_at=READY_AT)
    assert ended is not None and ended.phase is None and "warmup" not in ended.words()


def test_a_passed_health_check_of_that_container_says_serving() -> None:
    events = [ContainerEvent(READY_AT + 700, "health_status", "b", None, "healthy"), _died("a", READY_AT + 480),
              _died("b", READY_AT + 900)]
    ended = last_exit(None, events, "c", _record(), ready_at=READY_AT)
    assert ended is not None and ended.phase == "serving"


def test_health_checks_that_never_passed_say_warmup() -> None:
    events = [_died("a", READY_AT + 480), ContainerEvent(READY_AT + 490, "health_status", "b", None, "starting"),
              _died("b", READY_AT + 500, 1)]
    ended = last_exit(None, events, "c", _record(), ready_at=READY_AT)
    assert ended is not None and ended.phase == "warmup"


def test_without_a_ready_time_or_health_checks_the_phase_is_not_guessed() -> None:
    ended = last_exit(None, [_died("a", NOW - 60)], "b", _record(), ready_at=None)
    assert ended is not None and ended.phase is None


def test_systemds_exit_without_events_is_placed_by_the_ready_time_until_a_restart() -> None:
    mono = time.monotonic()
    ended = UnitState(active="activating", sub="auto-restart", load="loaded", result="signal", restarts=0,
                      restart_policy="always", exit_status=9, main_pid=0,
                      active_since_mono_us=int((mono - 700) * 1e6), source_path="/x", exit_code="killed",
                      exited_mono_us=int((mono - 60) * 1e6))
    first = last_exit(ended, [], None, _record(), ready_at=READY_AT)
    assert first is not None and first.phase == "serving" and first.source == "systemd"
    again = last_exit(replace(ended, restarts=2), [], None, _record(), ready_at=READY_AT)
    assert again is not None and again.phase is None


# --- item 3: restarting only within the warmup budget of the new start ---------------------------------

UNHEALTHY = "unhealthy (/health answered 503)"


def test_a_restart_warming_up_within_its_budget_is_restarting() -> None:
    unit = _unit("active", restarts=1, active_for=60, main_for=60)
    verdict, said = judge(unit, UNHEALTHY, record=_record(300), exit_=None, ready_at=READY_AT, now=NOW)
    assert verdict == "restarting" and "warming up again" in said


def test_a_restart_past_its_warmup_budget_is_not_serving() -> None:
    unit = _unit("active", restarts=1, active_for=2000, main_for=2000)
    verdict, said = judge(unit, UNHEALTHY, record=_record(300), exit_=None, ready_at=NOW - 5000, now=NOW)
    assert verdict == "not-serving" and verdict in FAILING
    assert "warming up" not in said and "warmup budget of 300 s" in said and "restart 1" in said


def test_an_activating_restart_is_timed_from_its_own_start_not_the_last_active_one() -> None:
    # a Notify=healthy unit warms up `activating`: ActiveEnter is still the start before the restart
    fresh = _unit("activating", restarts=1, active_for=5000, main_for=30, sub="start")
    assert judge(fresh, "starting", record=_record(300), exit_=None, now=NOW)[0] == "restarting"
    stuck = _unit("activating", restarts=1, active_for=5000, main_for=900, sub="start")
    assert judge(stuck, "starting", record=_record(300), exit_=None, now=NOW)[0] == "not-serving"


def test_a_restart_of_an_older_record_without_a_budget_stays_restarting() -> None:
    unit = _unit("active", restarts=3, active_for=9000, main_for=9000)
    assert judge(unit, UNHEALTHY, record=_record(None), exit_=None, now=NOW)[0] == "restarting"
