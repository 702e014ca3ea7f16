"""The canary, the metrics, the boot history and verify's export, without the chain: the decisions (restart
once per failure streak, never a loop; a hung probe bounded), the exposition read back by the official
Prometheus parser, a stall judged against earlier boots, and the export's vLLM bench key names."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tests.fakes import RUNNING, FakeClock, FakeProbe, FakeSystemd, Script

from rigctl.deploy import canary, history, metrics
from rigctl.deploy.warmup import Phase, PhaseState, WaitStatus, Warming, wait_ready
from rigctl.errors import LockHeldError, UsageError
from rigctl.places import Scope
from rigctl.render.canary_units import CanaryUnits, render
from rigctl.verify.export import BENCH_KEYS, soak_export

ENGINE = "rigctl-demo.service"


class Units:
    """systemd for the canary: the engine's state, and every call."""

    def __init__(self, active: str = "active") -> None:
        self.active = active
        self.calls: list[str] = []

    def daemon_reload(self) -> None:
        self.calls.append("daemon-reload")

    def enable_now(self, unit: str) -> None:
        self.calls.append(f"enable {unit}")

    def disable_now(self, unit: str) -> None:
        self.calls.append(f"disable {unit}")

    def restart(self, unit: str) -> None:
        self.calls.append(f"restart {unit}")

    def stop(self, unit: str, *, wait: bool, timeout: float) -> None:
        self.calls.append(f"stop {unit}")

    def reset_failed(self, unit: str) -> None:
        self.calls.append(f"reset-failed {unit}")

    def is_active(self, unit: str) -> str:
        return self.active

    def restarts(self) -> int:
        return sum(c.startswith("restart ") for c in self.calls)


def verdicts(*oks: bool) -> Any:
    it = iter(oks)

    def probe(request_timeout_s: float) -> canary.CanaryVerdict:
        ok = next(it)
        return canary.CanaryVerdict(ok, [{"id": "smoke", "status": "pass" if ok else "fail"}],
                                    None if ok else "smoke", None if ok else "'The capital of France is' -> salad",
                                    ttft_ms=12.5 if ok else None)

    return probe


def install_config(state_dir: Path, **changes: Any) -> None:
    state = history.CanaryState(config=history.CanaryConfig(**{
        "every_s": 600, "checks": ["smoke"], "on_failure": "restart", "after": 2, "timeout_s": 5, **changes}))
    history.save_canary(state_dir, "demo", state)


def runs(state_dir: Path, probe: Any, n: int, units: Units, **kw: Any) -> list[canary.RunResult]:
    return [canary.run_once("demo", engine_unit=ENGINE, scope=Scope.USER, state_dir=state_dir, probe=probe,
                            systemd=units, **kw) for _ in range(n)]


def test_restart_once_per_failure_streak_never_a_loop(tmp_path: Path) -> None:
    install_config(tmp_path)
    units = Units()
    done = runs(tmp_path, verdicts(True, False, False, False, False, False), 6, units)
    assert [r.ok for r in done] == [True, False, False, False, False, False]
    assert units.restarts() == 1  # after the 2nd failure in a row, and never again in this streak
    assert done[2].action == "restarted" and done[3].action == "restart-skipped"
    state = history.canary_state(tmp_path, "demo")
    assert state.consecutive_failures == 5 and state.counts == {"runs": 6, "failures": 5, "restarts": 1}
    assert state.restarts[0]["unit"] == ENGINE and state.restarts[0]["after_failures"] == 2
    summary = state.summary()
    assert summary is not None and summary["last_result"] == "fail" and summary["restarts"] == 1
    assert "salad" in summary["last_failure_reason"]
    assert any("restarting rigctl-demo.service once" in line for line in done[2].journal)


def test_a_passing_run_starts_a_new_streak(tmp_path: Path) -> None:
    install_config(tmp_path)
    units = Units()
    runs(tmp_path, verdicts(False, False, True, False, False), 5, units)
    assert units.restarts() == 2
    assert history.canary_state(tmp_path, "demo").consecutive_failures == 2


def test_no_restart_with_on_failure_none_or_a_stopped_engine_or_a_held_lock(tmp_path: Path) -> None:
    install_config(tmp_path, on_failure="none")
    units = Units()
    runs(tmp_path, verdicts(False, False, False), 3, units)
    assert units.restarts() == 0

    stopped = tmp_path / "stopped"
    install_config(stopped)
    idle = Units(active="inactive")
    done = runs(stopped, verdicts(False, False), 2, idle)
    assert idle.restarts() == 0 and done[1].action == "restart-skipped"

    held = tmp_path / "held"
    install_config(held)
    busy = Units()

    def lock() -> Any:
        raise LockHeldError("held")

    done = runs(held, verdicts(False, False, False), 3, busy, lock=lock)
    assert busy.restarts() == 0 and done[1].action == "restart-skipped"
    assert history.canary_state(held, "demo").restarted_in_streak is False  # the next failure may still restart


def test_a_hung_probe_is_a_failure_in_time(tmp_path: Path) -> None:
    install_config(tmp_path, timeout_s=1)
    release = threading.Event()

    def hang(request_timeout_s: float) -> canary.CanaryVerdict:
        release.wait(30)
        return canary.CanaryVerdict(True, [])

    try:
        done = runs(tmp_path, hang, 1, Units())[0]
    finally:
        release.set()
    assert not done.ok and done.failed_check == "timeout" and "hung" in (done.reason or "")


def test_runs_are_rotated(tmp_path: Path) -> None:
    install_config(tmp_path)
    runs(tmp_path, verdicts(*([True] * (history.RUNS_KEPT + 5))), history.RUNS_KEPT + 5, Units())
    state = history.canary_state(tmp_path, "demo")
    assert len(state.runs) == history.RUNS_KEPT and state.counts["runs"] == history.RUNS_KEPT + 5


def test_no_canary_record_is_no_canary(tmp_path: Path) -> None:
    assert history.canary_state(tmp_path, "demo").summary() is None
    with pytest.raises(UsageError):
        runs(tmp_path, verdicts(True), 1, Units())


@pytest.mark.parametrize("damage", ["not JSON", "too big", "a list", "settings"])
def test_a_damaged_canary_record_is_a_failing_canary_its_run_records(tmp_path: Path, damage: str) -> None:
    """Never "no canary", never a run of the default checks: the run records the failure and why, and the
    canary stays failing until its settings are written again."""
    (tmp_path / "history").mkdir()
    path = tmp_path / "history" / "demo.canary.json"
    install_config(tmp_path)
    sound = json.loads(path.read_text())
    text = {"not JSON": "{not json", "a list": "[]",
            "too big": json.dumps({**sound, "padding": "x" * history.safefs.RECORD_LIMIT}),
            "settings": json.dumps({**sound, "config": {**sound["config"], "timeout_s": 10**400}})}[damage]
    path.write_text(text)
    summary = history.canary_state(tmp_path, "demo").summary()
    assert summary is not None and summary["unreadable"] and str(path) in summary["unreadable"]
    asked: list[float] = []
    units = Units()
    done = runs(tmp_path, lambda t: asked.append(t) or canary.CanaryVerdict(True, []), 2, units)
    assert not asked and units.restarts() == 0  # nothing run, nothing restarted on settings it cannot know
    assert [r.ok for r in done] == [False, False] and done[0].failed_check == "canary"
    assert "cannot be read" in (done[0].reason or "")
    state = history.canary_state(tmp_path, "demo")
    assert state.unreadable and state.consecutive_failures == 2 and len(state.runs) == 2
    written = json.loads(path.read_text())
    assert written["config"] is not None  # never `config: null`, which would read as "no canary"
    assert len(path.read_bytes()) <= history.safefs.RECORD_LIMIT


def test_install_and_remove(tmp_path: Path) -> None:
    units = Units()
    unit_dir, state_dir = tmp_path / "units", tmp_path / "state"
    change = canary.install("demo", engine_unit=ENGINE, every_s=600, checks=["smoke"], on_failure="none", after=2,
                            timeout_s=60, command=["/usr/bin/python3", "-m", "rigctl", "canary", "demo", "--run-once",
                                                   "--user"], unit_dir=unit_dir, state_dir=state_dir, systemd=units,
                            now=1.0)
    assert change.action == "installed" and sorted(p.name for p in unit_dir.iterdir()) == [
        "rigctl-demo-canary.service", "rigctl-demo-canary.timer"]
    assert "enable rigctl-demo-canary.timer" in units.calls
    again = canary.install("demo", engine_unit=ENGINE, every_s=600, checks=["smoke"], on_failure="none", after=2,
                           timeout_s=60, command=["/usr/bin/python3", "-m", "rigctl", "canary", "demo", "--run-once",
                                                  "--user"], unit_dir=unit_dir, state_dir=state_dir, systemd=units,
                           now=2.0)
    assert again.action == "unchanged"
    gone = canary.remove("demo", unit_dir=unit_dir, state_dir=state_dir, systemd=units)
    assert gone.action == "removed" and not list(unit_dir.iterdir())
    assert history.canary_state(state_dir, "demo").summary() is None
    assert canary.remove("demo", unit_dir=unit_dir, state_dir=state_dir, systemd=units).action == "absent"


def test_settings_refused() -> None:
    assert canary.parse_span("10m", option="--every") == 600 and canary.parse_span("45", option="--every") == 45
    with pytest.raises(UsageError):
        canary.parse_span("ten", option="--every")
    with pytest.raises(UsageError):  # a few seconds only on the test bed
        canary.check_settings(3, ["smoke"], 2, 3, minimum=canary.min_interval({}))
    canary.check_settings(3, ["smoke"], 2, 3, minimum=canary.min_interval({"RIGCTL_TESTBED": "1"}))
    with pytest.raises(UsageError):
        canary.check_settings(600, ["soak"], 2, 60, minimum=60)


def test_units_pass_systemd_analyze_verify(tmp_path: Path, need: Any) -> None:
    need(shutil.which("systemd-analyze") is not None, "systemd-analyze is not installed")
    files = render(CanaryUnits("demo", ENGINE, 600, 120, ("health", "smoke"),
                               (shutil.which("python3") or "/usr/bin/python3", "-m", "rigctl", "canary", "demo",
                                "--run-once", "--system")))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run(["systemd-analyze", "verify", *(str(tmp_path / n) for n in files)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "OnUnitActiveSec=600s" in files["rigctl-demo-canary.timer"]
    service = files["rigctl-demo-canary.service"]
    assert "Type=oneshot" in service and "TimeoutStartSec=150s" in service and "--run-once --system" in service


def test_exec_line_quotes_an_odd_interpreter_path() -> None:
    files = render(CanaryUnits("demo", ENGINE, 60, 60, ("smoke",), ("/opt/my env/100%/python", "-m", "rigctl")))
    assert 'ExecStart="/opt/my env/100%%/python" -m rigctl' in files["rigctl-demo-canary.service"]


# --- metrics -------------------------------------------------------------------------------------------------


def test_exposition_reads_back_with_the_official_parser() -> None:
    rows = [
        metrics.MetricRow("demo", "user", ENGINE, up=True, active="active", restarts=3, model='odd "model"\\x',
                          image_digest="sha256:ab", gpu_used_mib=1024, gpu_planned_mib=2048,
                          canary={"last_result": "fail", "last_run_at": 1700000000.5, "interval_s": 600,
                                  "consecutive_failures": 2}, canary_counts={"runs": 9, "failures": 2, "restarts": 1},
                          last_ttft_ms=12.5, last_itl_ms=2.0, last_boot_s=212.4, last_boot_at=1699999000.0),
        metrics.MetricRow("other", "system", "rigctl-other.service", up=False, active="inactive", restarts=None),
    ]
    text = metrics.exposition(rows)
    got: dict[tuple[str, str], float] = {}
    types: dict[str, str] = {}
    for family in text_string_to_metric_families(text):
        assert family.name.startswith("rigctl_")
        types[family.name] = family.type
        for sample in family.samples:
            got[(sample.name, sample.labels["deployment"])] = sample.value
            if sample.name == "rigctl_deployment_info" and sample.labels["deployment"] == "demo":
                assert sample.labels["model"] == 'odd "model"\\x'
    assert got[("rigctl_up", "demo")] == 1 and got[("rigctl_up", "other")] == 0
    assert got[("rigctl_service_restarts_total", "demo")] == 3 and types["rigctl_service_restarts"] == "counter"
    assert got[("rigctl_canary_ok", "demo")] == 0
    assert got[("rigctl_canary_restarts_total", "demo")] == 1
    assert got[("rigctl_gpu_memory_used_bytes", "demo")] == 1024 * 2**20
    assert got[("rigctl_gpu_memory_planned_bytes", "demo")] == 2048 * 2**20
    assert got[("rigctl_last_verify_ttft_seconds", "demo")] == pytest.approx(0.0125)
    assert got[("rigctl_last_boot_duration_seconds", "demo")] == pytest.approx(212.4)
    assert ("rigctl_canary_ok", "other") not in got  # unknown is left out, never 0
    assert ("rigctl_service_restarts_total", "other") not in got
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            assert kind != "counter" or name.endswith("_total"), line


def test_no_deployment_is_an_empty_exposition() -> None:
    assert metrics.exposition([]) == ""


# --- boot history --------------------------------------------------------------------------------------------


def boot(total: float, loading: float, *, status: str = "ready", image: str = "img@sha256:1") -> history.Boot:
    return history.Boot(at=1.0, recipe_digest="sha256:r", image=image, status=status, total_s=total,
                        phases=(("starting", 1.0), (str(Phase.LOADING), loading), ("ready", 0.0)))


def test_boots_are_kept_rotated_and_budgets_need_history(tmp_path: Path) -> None:
    for i in range(history.BOOTS_KEPT + 3):
        history.record_boot(tmp_path, "demo", boot(100 + i, 10))
    kept = history.boots(tmp_path, "demo")
    assert len(kept) == history.BOOTS_KEPT and kept[-1].total_s == 100 + history.BOOTS_KEPT + 2
    assert history.budgets([boot(200, 10)], "sha256:r", "img@sha256:1") is None  # one boot is no history yet
    assert history.budgets([boot(200, 10), boot(240, 12, image="other")], "sha256:r", "img@sha256:1") is None
    assert history.budgets([boot(200, 10), boot(240, 90, status="stalled")], "sha256:r", "img@sha256:1") is None
    budget = history.budgets([boot(212, 10), boot(240, 12)], "sha256:r", "img@sha256:1")
    assert budget is not None and budget.allowance(str(Phase.LOADING), 5) == 36.0
    assert budget.allowance(str(Phase.GRAPHS), 5) is None


class Follower:
    """The warmup watcher's view: in ``phase`` since ``since``; its output keeps coming when ``chatty``."""

    def __init__(self, clock: FakeClock, phase: Phase, since: float, *, chatty: bool) -> None:
        self.clock, self.since, self.chatty = clock, since, chatty
        self.phase = PhaseState(phase)
        self.pid = None
        self.line_count = 0
        self._quiet_from = since

    @property
    def last_output_mono(self) -> float:
        return self.clock.now if self.chatty else self._quiet_from

    def phase_since(self) -> float:
        return self.since

    def tail(self, n: int = 40) -> list[str]:
        return []


def wait(budget: history.BootBudget | None, *, chatty: bool) -> Any:
    clock = FakeClock()
    systemd = FakeSystemd(Path("/nonexistent"), clock, script=Script([(0.0, RUNNING)]))
    systemd.loaded.add(ENGINE)
    systemd.start(ENGINE)
    probe = FakeProbe(systemd, ENGINE, "m", ready_after=None)
    target = Warming(unit=ENGINE, container="rigctl-demo", base_url="http://127.0.0.1:1", health_path="/health",
                        served_name="m", warmup_budget_s=300, stall_budget_s=5, baseline_restarts=0,
                        start_mono=clock.now, budget=budget)
    follower = Follower(clock, Phase.LOADING, clock.now, chatty=chatty)
    return wait_ready(target, systemd=systemd, probe=probe, follower=follower, clock=clock)  # type: ignore[arg-type]


def test_a_stall_is_judged_against_history() -> None:
    budget = history.budgets([boot(212, 10), boot(240, 12)], "sha256:r", "img@sha256:1")
    # a phase that keeps printing but lasts 3x longer than it ever did is a stall, with history
    stalled = wait(budget, chatty=True)
    assert stalled.status is WaitStatus.STALLED
    assert stalled.detail.startswith("the last 2 boots were ready in 212-240 s; 36 s in loading weights is a stall")
    assert wait(None, chatty=True).status is WaitStatus.TIMEOUT  # one flat budget: only the warmup budget ends it
    # a silence longer than the flat stall budget but within what this phase took before is no stall yet
    silent = wait(budget, chatty=False)
    assert silent.status is WaitStatus.STALLED and silent.elapsed_s > 30
    assert wait(None, chatty=False).elapsed_s < 6


# --- verify --export -----------------------------------------------------------------------------------------


def test_export_uses_vllm_bench_key_names() -> None:
    from rigctl.severity import Severity
    from rigctl.verify.report import CheckResult

    figures = {"completed": 7, "failed": 1, "duration_s": 3.5, "total_output_tokens": 300, "request_throughput": 2.0,
               "output_throughput": 85.7, "requests": 8, "concurrency": 4, "prefix_tokens": 2100,
               **{k: 1.0 for k in BENCH_KEYS if k.endswith("_ms")}}
    soak = CheckResult("soak", Severity.FAIL, "1/8 requests failed", figures)
    doc = soak_export(soak, model="m", base_url="http://127.0.0.1:8000", recipe="demo", recipe_source="/r.yaml",
                      image="img@sha256:ab", image_digest="sha256:ab", gpus=[{"index": 0, "name": "H200"}],
                      gpu_note=None, version="rigctl 0", now=0)
    assert {"date", "backend", "model_id", "num_prompts", "max_concurrency", "duration", *BENCH_KEYS} <= set(doc)
    assert doc["duration"] == 3.5 and doc["num_prompts"] == 8 and doc["max_concurrency"] == 4
    assert doc["rigctl"]["image_digest"] == "sha256:ab" and doc["rigctl"]["status"] == "fail"
    json.dumps(doc)


def test_doctor_lists_the_canaries_and_those_without_a_deployment(tmp_path: Path, monkeypatch: Any) -> None:
    import rigctl.places

    units, state = tmp_path / "units", tmp_path / "state"
    units.mkdir()
    state.mkdir()
    for name in ("demo", "gone"):
        for file_name, text in render(CanaryUnits(name, ENGINE, 60, 60, ("smoke",), ("/usr/bin/python3",))).items():
            (units / file_name).write_text(text)
    (units / "rigctl-other.timer").write_text("[Timer]\n")  # not a canary's
    (state / "demo.json").write_text("{}")
    monkeypatch.setattr(canary, "systemd_dir", lambda scope: units)
    monkeypatch.setattr(rigctl.places, "state_dir", lambda scope: state)
    listed = canary.installed([Scope.USER])
    assert [(c["deployment"], c["deployed"]) for c in listed] == [("demo", True), ("gone", False)]
    assert listed[0]["service"] == str(units / "rigctl-demo-canary.service")


# --- across a swap -------------------------------------------------------------------------------------------


def test_pause_move_and_resume(tmp_path: Path) -> None:
    units = Units()
    unit_dir, state_dir = tmp_path / "units", tmp_path / "state"
    command = ["/usr/bin/python3", "-m", "rigctl", "canary", "demo", "--run-once", "--user"]
    canary.install("demo", engine_unit=ENGINE, every_s=90, checks=["smoke", "determinism"], on_failure="restart",
                   after=3, timeout_s=20, command=command, unit_dir=unit_dir, state_dir=state_dir, systemd=units,
                   now=1.0)
    assert canary.pause("other", unit_dir=unit_dir, state_dir=state_dir, systemd=units) is None  # has none
    units.calls.clear()
    held = canary.pause("demo", unit_dir=unit_dir, state_dir=state_dir, systemd=units)
    assert held is not None and held.config is not None and held.config.every_s == 90
    assert units.calls == ["stop rigctl-demo-canary.timer", "stop rigctl-demo-canary.service"]
    assert sorted(p.name for p in unit_dir.iterdir()) == ["rigctl-demo-canary.service", "rigctl-demo-canary.timer"]
    canary.resume(held, systemd=units)
    assert units.calls[-1] == "enable rigctl-demo-canary.timer"

    moved = canary.move(held, "next", engine_unit="rigctl-next.service",
                        command=canary.command_for("next", Scope.USER, "/usr/bin/python3"), unit_dir=unit_dir,
                        state_dir=state_dir, systemd=units, now=5.0)
    assert moved.action == "installed" and "now watches next" in moved.message
    assert sorted(p.name for p in unit_dir.iterdir()) == ["rigctl-next-canary.service", "rigctl-next-canary.timer"]
    service = (unit_dir / "rigctl-next-canary.service").read_text()
    assert "After=rigctl-next.service" in service and "canary next --run-once --user" in service
    assert "OnUnitActiveSec=90s" in (unit_dir / "rigctl-next-canary.timer").read_text()
    assert history.canary_state(state_dir, "demo").summary() is None  # the old record went with it
    config = history.canary_state(state_dir, "next").config
    assert config is not None and (config.checks, config.on_failure, config.after, config.timeout_s) == (
        ["smoke", "determinism"], "restart", 3, 20)
    assert "enable rigctl-next-canary.timer" in units.calls


def test_a_canary_without_readable_settings_is_not_moved(tmp_path: Path) -> None:
    units = Units()
    unit_dir, state_dir = tmp_path / "units", tmp_path / "state"
    canary.install("demo", engine_unit=ENGINE, every_s=90, checks=["smoke"], on_failure="none", after=1,
                   timeout_s=20, command=["/usr/bin/python3"], unit_dir=unit_dir, state_dir=state_dir, systemd=units,
                   now=1.0)
    (state_dir / "history" / "demo.canary.json").write_text("{damaged")
    held = canary.pause("demo", unit_dir=unit_dir, state_dir=state_dir, systemd=units)
    assert held is not None and held.config is None
    moved = canary.move(held, "next", engine_unit="rigctl-next.service", command=["/usr/bin/python3"],
                        unit_dir=unit_dir, state_dir=state_dir, systemd=units, now=5.0)
    assert moved.action == "absent" and "rigctl canary next --every" in moved.message
    assert not list(unit_dir.iterdir())


# --- the baseline: verify --export's answers, asked again ------------------------------------------------------


def exported(answers: list[dict[str, Any]], *, recipe: str | None = "demo") -> dict[str, Any]:
    from rigctl.severity import Severity
    from rigctl.verify.report import CheckResult

    soak = CheckResult("soak", Severity.OK, "ok", {"requests": 8, "concurrency": 4, "duration_s": 1.0})
    return json.loads(json.dumps(soak_export(
        soak, model="m", base_url="http://127.0.0.1:1", recipe=recipe, recipe_source=None, image="img@sha256:ab",
        image_digest="sha256:ab", gpus=[], gpu_note=None, version="rigctl 0", now=0, answers=answers)))


def test_the_export_keeps_the_answers_of_verifys_fixed_requests() -> None:
    from rigctl.verify.client import Request
    from rigctl.verify.export import answers_of, baseline_of
    from rigctl.verify.session import Output

    ocean = Request(48, prompt="Here is one sentence about the ocean:")
    outputs = [
        Output("smoke[0]", " Paris.", Request(16, prompt="The capital of France is")),
        Output("repetition[2]", " The sun rose.", Request(128, messages=(("user", "Describe a sunrise."),))),
        Output("determinism[0]", " Waves.", ocean), Output("determinism[1]", " Waves.", ocean),  # asked once
        Output("soak[3]", " x", Request(64, prompt="shared prefix", stream=True)),  # concurrent: not a baseline
        Output("needle", " codes", Request(100, prompt="long")),
        Output("smoke[1]", " clipped", None),  # its text was cut: no request kept
    ]
    answers = answers_of(outputs)
    assert [a["source"] for a in answers] == ["smoke[0]", "repetition[2]", "determinism[0]"]
    assert answers[1]["messages"] == [["user", "Describe a sunrise."]] and answers[1]["prompt"] is None
    doc = exported(answers)
    assert doc["rigctl"]["answers"] == answers
    base = baseline_of(doc, "x.json")
    assert (base.recipe, base.image_digest, len(base.answers)) == ("demo", "sha256:ab", 3)
    assert base.answers[1].messages == (("user", "Describe a sunrise."),)
    assert type(base).from_dict(base.to_dict()) == base


@pytest.mark.parametrize(("doc", "why"), [
    ({"date": "x"}, "not a `rigctl verify --export` file"),
    ("list", "not a `rigctl verify --export` file"),
    ({"rigctl": {"recipe": "demo", "answers": []}}, "holds no answers"),
    ({"rigctl": {"recipe": "demo", "answers": [{"source": "s", "prompt": "p", "max_tokens": 0, "text": ""}]}},
     "rigctl.answers[0]"),
    ({"rigctl": {"recipe": "demo", "answers": [{"source": "s", "prompt": "p", "messages": [["user", "p"]],
                                                 "max_tokens": 8, "text": ""}]}}, "rigctl.answers[0]"),
    ({"rigctl": {"recipe": None, "answers": [{"source": "s", "prompt": "p", "max_tokens": 8, "text": ""}]}},
     "names no recipe"),
])
def test_a_file_that_is_no_baseline_is_refused(doc: Any, why: str) -> None:
    from rigctl.errors import InvalidInputError
    from rigctl.verify.export import baseline_of

    with pytest.raises(InvalidInputError, match=None) as err:
        baseline_of(doc, "x.json")
    assert why in str(err.value.problems), err.value.problems


def test_drift_says_where_an_answer_changed() -> None:
    from rigctl.verify.export import Answer, drift

    answer = Answer("determinism[0]", "p", None, 8, " Waves break on the shore.")
    assert drift(answer, " Waves break on the shore.") is None
    changed = drift(answer, " Waves break on rocks.")
    assert changed is not None and changed.at == 16 and changed.source == "determinism[0]"
    assert drift(answer, " Waves") is not None and drift(answer, " Waves").at == 6  # type: ignore[union-attr]


class AnsweringEngine:
    """verify's engine API, as far as the baseline asks it: each prompt's answer from a table."""

    def __init__(self, answers: dict[str, str], fail: bool = False) -> None:
        self.answers, self.fail, self.asked = answers, fail, []

    async def complete(self, request: Any, *, timeout: float, idle_timeout: float | None = None) -> Any:
        from rigctl.verify.client import Completion, EngineRequestError

        self.asked.append((request.prompt, request.messages, request.max_tokens, request.temperature))
        if self.fail:
            raise EngineRequestError("timeout", "no answer within 3 s")
        key = request.prompt if request.prompt is not None else request.messages[0][1]
        return Completion(self.answers[key], "stop", None, None, 0.01)


def test_compare_baseline_asks_each_request_again() -> None:
    import asyncio

    from rigctl.verify.export import baseline_of

    answers = [{"source": "smoke[0]", "prompt": "capital", "messages": None, "max_tokens": 16, "text": " Paris."},
               {"source": "repetition[2]", "prompt": None, "messages": [["user", "sunrise"]], "max_tokens": 128,
                "text": " The sun rose."}]
    base = baseline_of(exported(answers), "x.json")
    same = AnsweringEngine({"capital": " Paris.", "sunrise": " The sun rose."})
    assert asyncio.run(canary.compare_baseline(same, base, 3.0)) is None
    assert same.asked == [("capital", None, 16, 0.0), (None, (("user", "sunrise"),), 128, 0.0)]
    other = AnsweringEngine({"capital": " Paris.", "sunrise": " The moon set."})
    reason = asyncio.run(canary.compare_baseline(other, base, 3.0))
    assert reason is not None and reason.startswith("repetition[2]: the answer changed since `verify --export`")
    assert "sha256:ab" in reason and "' The sun rose.'" in reason and "' The moon set.'" in reason
    down = asyncio.run(canary.compare_baseline(AnsweringEngine({}, fail=True), base, 3.0))
    assert down is not None and "the baseline's request failed: no answer within 3 s" in down


def test_a_baseline_is_kept_in_the_record_and_shown_summarised(tmp_path: Path) -> None:
    from rigctl.verify.export import baseline_of

    units = Units()
    unit_dir, state_dir = tmp_path / "units", tmp_path / "state"
    base = baseline_of(exported([{"source": "smoke[0]", "prompt": "capital", "max_tokens": 16, "text": " Paris."}]),
                       "/tmp/demo.json").to_dict()
    change = canary.install("demo", engine_unit=ENGINE, every_s=600, checks=["smoke"], on_failure="none", after=2,
                            timeout_s=60, command=["/usr/bin/python3"], unit_dir=unit_dir, state_dir=state_dir,
                            systemd=units, now=1.0, baseline=base)
    assert change.settings is not None and change.settings["baseline"]["answers"] == 1
    assert "smoke,baseline" in (unit_dir / "rigctl-demo-canary.timer").read_text()
    state = history.canary_state(state_dir, "demo")
    assert state.config is not None and state.config.baseline == base
    summary = state.summary()
    assert summary is not None and summary["baseline"] == {**{k: v for k, v in base.items() if k != "answers"},
                                                           "answers": 1}
    # a damaged baseline is no canary that quietly compares nothing
    path = state_dir / "history" / "demo.canary.json"
    data = json.loads(path.read_text())
    data["config"]["baseline"]["answers"] = [{"source": "smoke[0]"}]
    path.write_text(json.dumps(data))
    assert history.canary_state(state_dir, "demo").config is None
    done = runs(state_dir, verdicts(True), 1, units)[0]  # the probe would pass: it is not asked
    assert not done.ok and done.failed_check == "canary" and "cannot be read" in (done.reason or "")
    assert json.loads(path.read_text())["config"] == data["config"]  # kept as found, for a person to look at

    # a swap moves the canary without the baseline: another model's answers are no baseline
    canary.install("demo", engine_unit=ENGINE, every_s=600, checks=["smoke"], on_failure="none", after=2,
                   timeout_s=60, command=["/usr/bin/python3"], unit_dir=unit_dir, state_dir=state_dir,
                   systemd=units, now=1.0, baseline=base)
    held = canary.pause("demo", unit_dir=unit_dir, state_dir=state_dir, systemd=units)
    assert held is not None
    moved = canary.move(held, "next", engine_unit="rigctl-next.service", command=["/usr/bin/python3"],
                        unit_dir=unit_dir, state_dir=state_dir, systemd=units, now=2.0)
    assert "without demo's baseline" in moved.message
    config = history.canary_state(state_dir, "next").config
    assert config is not None and config.baseline is None


def test_the_cli_takes_a_baseline_of_the_same_deployment_only(tmp_path: Path) -> None:
    from rigctl.cli.cmd_canary import _baseline

    answers = [{"source": "smoke[0]", "prompt": "capital", "max_tokens": 16, "text": " Paris."}]
    path = tmp_path / "demo.json"
    path.write_text(json.dumps(exported(answers)))
    assert _baseline(path, "demo")["answers"][0]["text"] == " Paris."
    with pytest.raises(UsageError, match="the export is of demo, not of other"):
        _baseline(path, "other")
    done = subprocess.run([sys.executable, "-m", "rigctl", "canary", "demo", "--baseline", str(path), "--json"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2 and "give it with --every" in done.stdout + done.stderr


def test_the_baseline_is_no_check_name() -> None:
    with pytest.raises(UsageError) as err:
        canary.check_settings(600, ["smoke", "baseline"], 2, 60, minimum=60)
    assert "--baseline FILE" in (err.value.fix or "")
