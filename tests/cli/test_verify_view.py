"""verify's text: the soak's row and its summary line state which time each is. The row's TIME is the whole
check (runner: sizing the prefix, solo baselines, the concurrent streams, health polls after); the summary's
figure is ``bench_figures``' duration, the concurrent streams alone, over which the rates are computed. They
differed (2.6 s beside "in 0.393s") with nothing to say why."""

from __future__ import annotations

import io
import re

import pytest

from rigctl.cli.views.reports import verify
from rigctl.severity import Severity
from rigctl.verify.client import Endpoint
from rigctl.verify.report import CheckResult, VerifyReport

FIGURES = {"completed": 16, "failed": 0, "duration_s": 0.393, "median_ttft_ms": 41.2, "p99_ttft_ms": 88.0,
           "median_itl_ms": 5.1, "p99_itl_ms": 9.9, "median_e2el_ms": 300.1, "p99_e2el_ms": 380.4,
           "output_throughput": 5210.5}


def test_the_soak_row_and_summary_say_which_time_is_which(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    report = VerifyReport(Endpoint("http://127.0.0.1:8000", "m"), [
        CheckResult("health", Severity.OK, "/health answered 200", {}, 0.01),
        CheckResult("soak", Severity.OK, "16/16 streams", FIGURES, 2.6),
    ])
    out = io.StringIO()
    verify(report)(out)
    text = out.getvalue()
    assert re.search(r"^soak\s+pass\s+2\.6s\s", text, re.M)  # the row: the whole check
    summary = " ".join(line.strip() for line in text[text.index("soak: "):].splitlines())
    assert "the concurrent streams took 0.393 s of the check's 2.6 s" in summary
    assert "5210.5 output tok/s over the streams" in summary
    assert all(len(line) <= 100 for line in text.splitlines())
