"""--quiet leaves out what is only informative (notes, progress, the checks that passed), never a warning:
`-q preflight` lists what warns beside what fails, and `-q render` still says on stderr what may be wrong
with the unit it prints."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigctl.cli import output
from rigctl.cli.views.reports import preflight_result
from rigctl.findings import Finding
from rigctl.preflight.layout import Choice
from rigctl.preflight.registry import PreflightReport
from rigctl.severity import Severity

pytestmark = pytest.mark.timeout(60)


def test_quiet_preflight_keeps_the_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output.LEVEL, "quiet", True)
    report = PreflightReport(findings=[
        Finding(id="shm", severity=Severity.OK, message="private IPC with a 8.0 GiB /dev/shm"),
        Finding(id="gpu-power", severity=Severity.WARN, message="GPU 0: limit 450 W of 700 W",
                fix="`nvidia-smi -pl 700`"),
        Finding(id="draft", severity=Severity.SKIP, message="no draft model"),
        Finding(id="cdi", severity=Severity.FAIL, message="no CDI spec"),
    ], choice=Choice(wanted=1))
    out = io.StringIO()
    preflight_result(report)(out)
    assert out.getvalue().splitlines() == [
        "warn gpu-power: GPU 0: limit 450 W of 700 W", "  fix: `nvidia-smi -pl 700`",
        "fail cdi: no CDI spec",
        "not ready: 1 ok, 1 warn, 1 skip, 1 fail",
    ]


def test_quiet_render_still_warns(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    argv = [sys.executable, "-m", "rigctl", "render", "glm53-flash", "--podman-version", "5.4"]
    loud = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    if "rigctl render: warning: " not in loud.stderr:
        pytest.skip("this host has GPU facts: the render has no warning to keep")
    quiet = subprocess.run([argv[0], "-m", "rigctl", "-q", *argv[3:]], capture_output=True, text=True, env=env,
                           timeout=60, check=False)
    assert quiet.returncode == loud.returncode == 0 and quiet.stdout == loud.stdout
    warnings = [line for line in loud.stderr.splitlines() if line.startswith("rigctl render: warning: ")]
    assert quiet.stderr.splitlines() == warnings  # the warning stays; the notes go
    assert len(loud.stderr.splitlines()) > len(warnings)
