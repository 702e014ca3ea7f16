"""A canary that cannot run is a failing canary (issue #35 items 1 and 4): one whose last run is older than two
intervals (and its run's bound), or whose service systemd marks failed, is stale; a stale or failing canary
fails its deployment in `status` (exit 7, in ``failing``), in `metrics` (``rigctl_canary_ok`` 0 and
``rigctl_canary_stale`` 1) and in `doctor` (rule ``canary-failing``); status shows the canary's restarts and
a last failure with its time, said as past once a run passed since."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from rigctl.deploy import history, metrics
from rigctl.deploy.status import ServiceStatus
from rigctl.places import Scope

NOW = 1_750_000_000.0


def state(*runs: tuple[float, bool], every: int = 600, installed: float = NOW - 7200) -> history.CanaryState:
    s = history.CanaryState(config=history.CanaryConfig(every, ["smoke"], "restart", 2, 60, installed_at=installed))
    for at, ok in runs:
        s.runs.append({"at": at, "ok": ok, "duration_s": 1.0, "checks": [], "failed_check": None if ok else "smoke",
                       "reason": None if ok else "salad", "ttft_ms": None, "itl_ms": None, "action": None})
    return s


def test_a_recent_passing_canary_is_fresh_and_not_failing() -> None:
    summary = state((NOW - 300, True)).summary(now=NOW, service="inactive")
    assert summary is not None and summary["stale"] is False and summary["failing"] is False
    assert summary["last_run_age_s"] == 300


def test_a_last_run_older_than_two_intervals_is_stale_and_failing() -> None:
    summary = state((NOW - 2000, True)).summary(now=NOW, service="inactive")  # 600 s interval, 60 s bound
    assert summary is not None and summary["stale"] is True and summary["failing"] is True
    assert "2000" in summary["stale_reason"] or "33m" in summary["stale_reason"]


def test_a_canary_that_never_ran_since_long_past_its_install_is_stale() -> None:
    summary = state(installed=NOW - 3 * 600).summary(now=NOW, service="inactive")
    assert summary is not None and summary["stale"] is True and "never ran" in summary["stale_reason"]
    fresh = state(installed=NOW - 100).summary(now=NOW, service="inactive")
    assert fresh is not None and fresh["stale"] is False and fresh["failing"] is False


def test_a_failed_canary_service_is_stale() -> None:
    summary = state((NOW - 10, True)).summary(now=NOW, service="failed")
    assert summary is not None and summary["stale"] is True and "failed" in summary["stale_reason"]


def test_a_failing_last_run_fails_and_a_passing_one_makes_the_old_failure_past() -> None:
    failing = state((NOW - 900, True), (NOW - 300, False)).summary(now=NOW, service="inactive")
    assert failing is not None and failing["failing"] is True and failing["last_failure_current"] is True
    passed = state((NOW - 900, False), (NOW - 300, True)).summary(now=NOW, service="inactive")
    assert passed is not None and passed["failing"] is False and passed["last_failure_current"] is False
    assert passed["last_failure_at"] == NOW - 900


def _row(canary: dict[str, Any] | None, verdict: str = "serving") -> ServiceStatus:
    return ServiceStatus(recipe="demo", scope=Scope.USER, unit="rigctl-demo.service", unit_file=None,
                         active="active", sub="running", restarts=0, restart_policy="always", exit_status=None,
                         health="ready", endpoint="http://127.0.0.1:1", model="m", image="i", image_digest=None,
                         uptime_s=10.0, gpu_memory_mib=None, canary=canary, verdict=verdict, verdict_detail="serving")


def test_a_serving_model_whose_canary_fails_or_is_stale_fails_status() -> None:
    assert _row(state((NOW - 300, True)).summary(now=NOW, service="inactive")).failing is False
    assert _row(state((NOW - 300, False)).summary(now=NOW, service="inactive")).failing is True
    assert _row(state((NOW - 5000, True)).summary(now=NOW, service="inactive")).failing is True
    assert _row(None).failing is False


def _series(canary: dict[str, Any]) -> dict[str, float]:
    row = metrics.row_of(_row(canary))
    text = metrics.exposition([row])
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_metrics_say_a_stale_canary_is_not_ok() -> None:
    stale = _series(state((NOW - 5000, True)).summary(now=NOW, service="inactive"))
    assert stale["rigctl_canary_ok"] == 0 and stale["rigctl_canary_stale"] == 1
    assert stale["rigctl_canary_last_run_age_seconds"] == 5000
    fresh = _series(state((NOW - 300, True)).summary(now=NOW, service="inactive"))
    assert fresh["rigctl_canary_ok"] == 1 and fresh["rigctl_canary_stale"] == 0


def test_status_shows_restarts_and_the_last_failure_with_its_time_wrapped(monkeypatch: Any) -> None:
    from rigctl.cli.views import deploy as views

    s = state((NOW - 900, False), (NOW - 300, True))
    s.restarts.append({"at": NOW - 880, "unit": "rigctl-demo.service", "after_failures": 2, "reason": "salad " * 40})
    summary = s.summary(now=NOW, service="inactive")
    out = io.StringIO()
    monkeypatch.setenv("COLUMNS", "60")
    views.status([_row(summary)])(out)
    text = out.getvalue()
    assert "restarted rigctl-demo.service" in text
    import time

    assert "last failure (past" in text and time.strftime("%H:%M:%S", time.localtime(NOW - 900)) in text
    assert all(len(line) <= 60 for line in text.splitlines() if "canary" in line or line.startswith("    ")), text


def test_doctor_rule_canary_failing(tmp_path: Path, monkeypatch: Any) -> None:
    from rigctl.doctor.rules import REGISTRY
    from rigctl.doctor.rules import canary as rule

    assert any(r.id == "canary-failing" for r in REGISTRY)
    hits = rule.hits_for("demo", state((NOW - 5000, True)).summary(now=NOW, service="inactive"))
    assert hits and "stale" in hits[0].message
    assert rule.hits_for("demo", state((NOW - 30, True)).summary(now=NOW, service="inactive")) == []


def test_the_install_line_and_canary_name_list_the_same_checks() -> None:
    from rigctl.cli.views.canary import canary_summary

    base = {"recipe": "demo", "model": "m", "date": "d", "image_digest": None, "source": "s",
            "answers": [{"source": "smoke[0]", "prompt": "p", "max_tokens": 4, "text": "t"}]}
    s = history.CanaryState(config=history.CanaryConfig(600, ["health", "smoke"], "none", 2, 60, baseline=base))
    out = io.StringIO()
    canary_summary("demo", s.summary(now=NOW))(out)
    assert "checks health,smoke,baseline," in out.getvalue().replace(", on failure", ",")


def test_a_canary_paused_by_a_running_up_is_not_stale_but_one_left_paused_is(tmp_path: Path) -> None:
    """`up` and `swap` stop the canary's timer while they hold the deployment's lock (a warmup may last longer
    than two intervals): that pause is not a canary that stopped running. The same lock file left by a process
    that is gone (a killed `up`) is no holder: the canary is stale again."""
    import os
    import subprocess
    import sys

    from rigctl.deploy.state import lock_holder, locked

    with locked("paused-one", "up paused-one", tmp_path):
        holder = lock_holder("paused-one", tmp_path)
        assert holder is not None and holder.startswith(f"pid {os.getpid()}: rigctl up paused-one")
        summary = state((NOW - 2000, True)).summary(now=NOW, service="inactive", paused_by=holder)
        assert summary is not None and summary["stale"] is False and summary["failing"] is False
        assert summary["paused_by"] == holder
    assert lock_holder("paused-one", tmp_path) is None  # released: the file is emptied
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    (tmp_path / "paused-two.lock").write_text(f"pid {gone.stdout.strip()}: rigctl up paused-two\n")
    assert lock_holder("paused-two", tmp_path) is None
    # a failed canary service is failing even while paused: the pause did not fail it
    failed = state((NOW - 2000, True)).summary(now=NOW, service="failed", paused_by="pid 1: rigctl up x")
    assert failed is not None and failed["stale"] is True


def test_doctor_asks_systemd_for_the_canary_service_of_a_rigctl_unit() -> None:
    """A canary whose service failed (its run could not even start) fails in doctor as in status, though its
    last recorded run is recent: doctor asks the manager for rigctl units' canary services, others not."""
    from rigctl.adapters.systemd import UnitState
    from rigctl.doctor.host_state import live_units
    from rigctl.doctor.rules import canary as rule

    asked: list[str] = []

    class Manager:
        def show(self, unit: str) -> UnitState:
            asked.append(unit)
            failed = unit.endswith("-canary.service")
            return UnitState(active="failed" if failed else "active", sub="failed" if failed else "running",
                             load="loaded", result="exit-code" if failed else "success", restarts=0,
                             restart_policy="no", exit_status=None, main_pid=0, active_since_mono_us=0,
                             source_path="")

    targets = {"/u/rigctl-demo.container": ("user", "rigctl-demo.service"), "/u/other.service": ("user", "other.service")}
    live = live_units(targets, lambda _scope: Manager())  # type: ignore[arg-type,return-value]
    assert live["/u/rigctl-demo.container"].canary == "failed" and live["/u/other.service"].canary is None
    assert "other-canary.service" not in asked
    summary = state((NOW - 30, True)).summary(now=NOW, service=live["/u/rigctl-demo.container"].canary)
    hits = rule.hits_for("demo", summary)
    assert hits and "stale" in hits[0].message and "failed" in hits[0].message
