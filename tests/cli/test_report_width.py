"""A piped preflight report fits the width it is laid out for: the message column gets the room (a fix that
would squeeze it goes on lines of its own under its check), prose wraps (the scope hint, the GPU list), and
only a command to copy (one backtick span, never broken) may run past the width.

The GPU box is the real single-H200 capture (tests/fixtures/inventory/nvml-h200-capture.json, taken by
capture-on-gpu.sh; /work/shared/reference/nvml-h200.json where it is present) answered by the NVML fake, the
one thing faked: everything else is this host's, so the tests assert the layout, not the findings."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support.on_capture import rigctl_on_capture

from rigctl.cli import plaintable
from rigctl.cli.views.reports import MESSAGE_BESIDE_FIX, MESSAGE_LEAST, preflight
from rigctl.findings import Finding
from rigctl.preflight.layout import Choice, ChosenGpu
from rigctl.preflight.registry import PreflightReport
from rigctl.severity import Severity

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
SHARED = Path("/work/shared/reference/nvml-h200.json")
CAPTURE = SHARED if SHARED.is_file() else REPO / "tests" / "fixtures" / "inventory" / "nvml-h200-capture.json"

def overflows(line: str, width: int) -> bool:
    """Whether ``line`` is longer than ``width`` and more than one unbreakable token (a backtick span, or
    one word with no space to break at)."""
    return len(line) > width and len(plaintable.words(line.strip())) > 1


def message_column(lines: list[str]) -> int:
    """The width of the message column: the third run of dashes in the rule under the headers."""
    rule = next(line for line in lines if re.fullmatch(r"-+( +-+)+", line))
    return len(rule.split()[2])


@pytest.mark.parametrize("columns", [None, 80, 60])
def test_piped_preflight_on_a_gpu_box_fits_its_width(tmp_path: Path, columns: int | None) -> None:
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "NO_COLOR", "COLUMNS"}}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    if columns is not None:
        env["COLUMNS"] = str(columns)
    width = columns or plaintable.WIDTH
    done = rigctl_on_capture(CAPTURE, "preflight", "qwen3-8b-vllm", env=env, timeout=100)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "preflight qwen3-8b-vllm" and "NVIDIA H200" in done.stdout  # the fake box was seen
    assert not [line for line in lines if overflows(line, width)]
    # the message column is readable: never the fragments a fix column left it (14 at 160 before)
    assert message_column(lines) >= MESSAGE_LEAST
    for line in lines:  # a fix under its check, not a column that squeezes the message
        if "`" in line and line.lstrip().startswith("fix:"):
            assert line.startswith("  fix:")


def _report(fix: str) -> PreflightReport:
    long = "podman 4.3.1 has no quadlet (it came with 4.4) and no quadlet generator is installed for the system manager"
    return PreflightReport(findings=[
        Finding(id="gpu-compute-capability", severity=Severity.OK, message="GPU 0: sm_90"),
        Finding(id="podman", severity=Severity.FAIL, message=long, fix=fix),
    ], choice=Choice(wanted=1))


HINT = ("the system manager has no quadlet generator here, the user manager has one "
        "(/run/systemd/user-generators/podman-user-generator): `rigctl preflight qwen3-8b-vllm --user`")
DIGEST = "`podman pull docker.io/vllm/vllm-openai@sha256:" + "0a51" * 16 + "`"


@pytest.mark.parametrize("width", [160, 120, 80, 60, 40])
def test_the_report_wraps_prose_and_keeps_commands_whole(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    preflight(_report(f"{DIGEST} (a few GB; the first start would otherwise pull it inside the warmup budget)"),
              "qwen3-8b-vllm", hint=HINT)(out)
    lines = out.getvalue().splitlines()
    assert not [line for line in lines if overflows(line, width)]
    assert any(DIGEST in line for line in lines)  # the command, whole on one line
    assert "rigctl preflight qwen3-8b-vllm --user" in out.getvalue()
    joined = " ".join(line.strip() for line in lines)
    assert "pull it inside the warmup budget" in joined and "(/run/systemd/user-generators" in joined
    rules = [line for line in lines if re.fullmatch(r"-+( +-+)+", line)]
    if rules:  # a table: its message column is readable
        assert message_column(lines) >= MESSAGE_LEAST
    else:  # too narrow for one: each finding stacked, its message on full lines
        assert any(line == "podman  fail" for line in lines)


def test_a_fix_column_only_beside_a_readable_message(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    preflight(_report("install podman >= 5.0, or a quadlet generator from a newer release"), "x")(out)
    lines = out.getvalue().splitlines()
    assert lines[1].split() == ["check", "result", "message", "fix"]  # short fixes: a column of their own
    assert message_column(lines) >= MESSAGE_BESIDE_FIX
    wide = io.StringIO()
    preflight(_report(DIGEST), "x")(wide)
    assert wide.getvalue().splitlines()[1].split() == ["check", "result", "message"]  # the command goes below
    assert f"  fix: {DIGEST}" in wide.getvalue().splitlines()


def test_the_gpu_list_wraps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    report = _report("")
    gpus = [ChosenGpu(index=i, name="NVIDIA H200", uuid=f"GPU-bf1b89c8-b248-e7e3-5c2a-4bab27d7528{i}") for i in range(8)]
    report = PreflightReport(findings=report.findings, choice=Choice(wanted=8, gpus=gpus))
    out = io.StringIO()
    preflight(report, "x")(out)
    lines = out.getvalue().splitlines()
    assert not [line for line in lines if len(line) > 80]
    listed = " ".join(line.strip() for line in lines[lines.index(next(x for x in lines if x.startswith("GPUs: "))):])
    assert all(f"{g.index} NVIDIA H200 {g.uuid}" in listed for g in gpus)


@pytest.mark.parametrize("columns", [80, 60])
def test_piped_dry_run_prose_fits_its_width(tmp_path: Path, columns: int) -> None:
    """`up --dry-run`'s sentences around the unit (layout problems, render notes, why the unit cannot be
    rendered, the scope hint, the plan's notes) wrap at the width; only the unit file's own lines, printed as
    they would be installed, may be longer. A GPU-less run: NVML is missing, so the layout line is there."""
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "NO_COLOR"}}
    env |= {"XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": str(columns)}
    done = subprocess.run([sys.executable, "-m", "rigctl", "up", "glm53-flash", "--dry-run"],
                          capture_output=True, text=True, env=env, timeout=100, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    unit_start = next(i for i, line in enumerate(lines) if line.startswith("# would"))
    unit_end = next(i for i, line in enumerate(lines) if line.startswith("WantedBy="))
    prose = lines[:unit_start] + lines[unit_end + 1:]
    assert any(line.startswith("# render note") for line in prose)  # the notes are among the lines judged
    assert not [line for line in prose if overflows(line, columns)]


@pytest.mark.parametrize("columns", [80, 60])
@pytest.mark.parametrize("command", [["recipes"], ["checks"], ["doctor", "--path", "EMPTY"]])
def test_piped_lists_wrap_their_prose(tmp_path: Path, columns: int, command: list[str]) -> None:
    """`recipes`' descriptions, `checks`' "guards" column and doctor's summary and directory list wrap at the
    width (before, each was one line of up to 150 characters): at 80 each continuation under the start of its
    column, at 60 (too narrow for a column beside the others) on lines of their own under the row, as its
    header is."""
    (tmp_path / "EMPTY").mkdir()
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "NO_COLOR"}}
    env |= {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
            "COLUMNS": str(columns)}
    argv = [str(tmp_path / "EMPTY") if word == "EMPTY" else word for word in command]
    done = subprocess.run([sys.executable, "-m", "rigctl", *argv], capture_output=True, text=True, env=env,
                          timeout=100, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) > 3 and not [line for line in lines if overflows(line, columns)], done.stdout
    if command[0] != "doctor" and columns == 80:  # a continuation starts under the header's last word
        start = lines[0].rindex(" ") + 1
        continued = [line for line in lines[1:] if line.startswith(" " * start) and line.strip()]
        assert continued and all(not line[start - 1].strip() and line[start].strip() for line in continued)


@pytest.mark.parametrize("columns", [200, 80])
def test_the_inventory_never_cuts_a_gpu_uuid(tmp_path: Path, columns: int) -> None:
    """`inventory` on the real H200 capture: a GPU's UUID is what --gpus takes, so it is never cut into a
    narrow column (at 80, piped from a real H100, it came out as three pieces); it stays in the table where
    the table fits the width, else goes on a line of its own under its GPU's row."""
    env = {k: v for k, v in os.environ.items() if k not in {"FORCE_COLOR", "NO_COLOR"}}
    env |= {"XDG_STATE_HOME": str(tmp_path / "state"), "COLUMNS": str(columns)}
    done = rigctl_on_capture(CAPTURE, "inventory", env=env, timeout=100)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    uuid = "GPU-bf1b89c8-b248-e7e3-5c2a-4bab27d75285"  # the capture's
    lines = done.stdout.splitlines()
    (holding,) = [line for line in lines if uuid in line]
    header = next(line for line in lines if line.startswith("#  name"))
    if columns == 80:
        assert holding.strip() == f"uuid {uuid}" and "uuid" not in header
    else:
        assert holding.startswith("0  NVIDIA H200") and header.endswith("uuid")
    assert not [line for line in lines if overflows(line, columns)], done.stdout
