"""`up`'s warmup without a terminal: a plain line on stderr at each stage, at each change of warmup phase and
at least every 30 s (a ten-minute warmup through a pipe, CI or `ssh host rigctl up` is not ten silent
minutes); ``--progress`` chooses. Time is a fake clock: the warmup loop (``deploy.warmup.wait_ready``) and
the display read the same one, so ten minutes pass in no time and every line's moment is known."""

from __future__ import annotations

import io
import itertools
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import RUNNING, FakeClock, FakeProbe, FakeSystemd

from rigctl.cli import output
from rigctl.cli.views.progress import PLAIN_EVERY_S, LiveDisplay, PlainProgress, progress_mode, seconds
from rigctl.deploy.warmup import Phase, PhaseState, WaitStatus, Warming, WarmupProgress, wait_ready

pytestmark = pytest.mark.timeout(60)

UNIT = "rigctl-test.service"
# (seconds after start, the phase the engine's output has reached): a slow load, as a 70B checkpoint has
PHASES = [(0.0, PhaseState(Phase.STARTING)), (5.0, PhaseState(Phase.LOADING, (1, 8))),
          (40.0, PhaseState(Phase.LOADING, (2, 8))), (300.0, PhaseState(Phase.PROFILING)),
          (420.0, PhaseState(Phase.GRAPHS)), (590.0, PhaseState(Phase.SERVING))]


class ScriptedOutput:
    """The part of ``OutputFollower`` that ``wait_ready`` reads: the phase the output has reached by the
    clock's time, and an output line stamped a moment *after* the loop read the clock (the follower
    thread runs meanwhile), which made the live line say "quiet -0s"."""

    pid = None
    line_count = 0

    def __init__(self, clock: FakeClock, start: float) -> None:
        self.clock, self.start = clock, start

    @property
    def phase(self) -> PhaseState:
        t = self.clock.monotonic() - self.start
        return [state for at, state in PHASES if at <= t][-1]

    @property
    def last_output_mono(self) -> float:
        return self.clock.monotonic() + 0.01

    def tail(self, n: int = 40) -> list[str]:
        return [f"INFO {self.phase.label()}"][-n:]


def warmup(tmp_path: Path, clock: FakeClock, on_progress: Callable[[WarmupProgress], None]) -> WaitStatus:
    """Ten minutes of warmup through ``PHASES``, ready at 600 s, every frame handed to ``on_progress``."""
    systemd = FakeSystemd(tmp_path, clock)
    systemd.loaded.add(UNIT)
    systemd.script.states = [(0.0, RUNNING)]
    systemd.start(UNIT)
    start = clock.monotonic()
    target = Warming(unit=UNIT, container="rigctl-test", base_url="http://127.0.0.1:1", health_path="/health",
                        served_name="m", warmup_budget_s=900, stall_budget_s=300, baseline_restarts=0,
                        start_mono=start)
    follower: Any = ScriptedOutput(clock, start)
    return wait_ready(target, systemd=systemd, probe=FakeProbe(systemd, UNIT, "m", ready_after=600.0),
                      follower=follower, clock=clock, on_progress=on_progress).status


def test_a_piped_warmup_says_each_phase_and_is_never_30_s_silent(tmp_path: Path) -> None:
    clock = FakeClock()  # one clock: the loop's and the display's
    stream = io.StringIO()
    plain = PlainProgress(clock, stream)
    written: list[tuple[float, str]] = []  # (seconds into the warmup, what that frame wrote)

    def on_progress(p: WarmupProgress) -> None:
        before = len(stream.getvalue())
        plain.progress(p)
        if len(stream.getvalue()) != before:
            written.append((p.elapsed_s, stream.getvalue()[before:]))

    plain.stage("start rigctl-test.service")
    assert warmup(tmp_path, clock, on_progress) is WaitStatus.READY
    assert stream.getvalue().startswith("- start rigctl-test.service\n  warmup: starting, 0s of 900s; ")
    said = [re.match(r"  warmup: ([a-z ]+?)(?: \d+/\d+)?, ", text) for _, text in written]
    phases = list(dict.fromkeys(str(state.phase) for _, state in PHASES))
    assert list(dict.fromkeys(m.group(1) for m in said if m)) == phases  # each phase, in order
    begins = {str(state.phase): at for at, state in reversed(PHASES)}
    for phase, at in begins.items():  # ... said within a poll of when it began (not again at "2/8")
        assert any(abs(t - at) <= 0.2 and f"warmup: {phase}" in text for t, text in written), phase
    times = [t for t, _ in written]
    assert max(b - a for a, b in itertools.pairwise(times)) <= PLAIN_EVERY_S + 0.2  # never silent longer
    assert len(written) <= 600 / PLAIN_EVERY_S + len(PHASES) + 1  # and not a line for every poll either
    assert all(text.count("\n    | INFO ") == 1 for _, text in written)  # each with the engine's last output
    # the output stamped just after the loop read the clock is 0 s old, never "-0s"
    assert "-0s" not in stream.getvalue() and "no output for 0s of 300s" in stream.getvalue()


def test_the_frames_never_say_a_negative_quiet_time(tmp_path: Path) -> None:
    frames: list[WarmupProgress] = []
    warmup(tmp_path, FakeClock(), frames.append)
    assert frames and min(f.since_output_s for f in frames) == 0.0
    assert seconds(-0.004) == "0s" and seconds(29.6) == "30s"


@pytest.mark.parametrize("case", [
    ("auto", False, True, False, "live"),
    ("auto", False, False, False, "plain"),  # a pipe, CI, ssh: lines
    ("auto", True, False, False, "none"),  # --json: as before, nothing
    ("plain", True, True, False, "plain"),  # asked for: stderr is not the document
    ("none", False, True, False, "none"),
    ("live", False, False, True, "none"),  # --quiet: no progress
])
def test_progress_mode(monkeypatch: pytest.MonkeyPatch, case: tuple[str, bool, bool, bool, str]) -> None:
    asked, json, terminal, quiet, mode = case  # --progress, --json, stderr a terminal, --quiet: the mode
    monkeypatch.setattr(output.LEVEL, "quiet", quiet)
    assert progress_mode(asked, as_json=json, terminal=terminal) == mode


def test_a_display_in_mode_none_writes_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    display = LiveDisplay(mode="none", clock=FakeClock())
    display.stage("preflight")
    display.progress(WarmupProgress("loading weights", 1.0, 900, 0.0, 300, "active", "running", 0, "x"))
    display.close()
    assert capsys.readouterr().err == ""
    plain = LiveDisplay(mode="plain", clock=FakeClock())
    plain.stage("preflight")
    assert capsys.readouterr().err == "- preflight\n"


def test_up_refuses_an_unknown_progress_word(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "rigctl", "up", "qwen3-8b-vllm", "--progress", "fancy"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 2 and "--progress takes auto, live, plain, none" in done.stderr
