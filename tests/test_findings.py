"""The one result vocabulary (issue #11): one severity order, one "worst of", one finding type for preflight,
verify and doctor, and verify's JSON still spelling ok "pass"."""

from __future__ import annotations

import json

import pytest

from rigctl.cli.output import to_json
from rigctl.doctor.unit_findings import UnitFinding
from rigctl.findings import Finding, any_failing, check_status, worst
from rigctl.preflight.finding import Finding as PreflightFinding
from rigctl.preflight.finding import Severity as PreflightSeverity
from rigctl.severity import Severity
from rigctl.verify.report import CheckResult

pytestmark = pytest.mark.timeout(30)


def test_the_order_is_best_to_worst() -> None:
    best_to_worst = [Severity.OK, Severity.INFO, Severity.SKIP, Severity.WARN, Severity.FAIL, Severity.ERROR]
    assert [s.rank for s in best_to_worst] == list(range(len(Severity)))
    assert sorted(Severity) == best_to_worst  # compared by rank, not alphabetically as words
    assert max(Severity.WARN, Severity.FAIL) is Severity.FAIL and Severity.SKIP < Severity.WARN


def test_failing_is_fail_and_error_only() -> None:
    assert {s for s in Severity if s.failing} == {Severity.FAIL, Severity.ERROR}


@pytest.mark.parametrize(("severities", "want"), [
    ([], Severity.OK),
    ([Severity.OK, Severity.SKIP], Severity.SKIP),
    ([Severity.WARN, Severity.INFO, Severity.OK], Severity.WARN),
    ([Severity.FAIL, Severity.WARN], Severity.FAIL),
    ([Severity.OK, Severity.ERROR, Severity.FAIL], Severity.ERROR),
])
def test_worst_of(severities: list[Severity], want: Severity) -> None:
    findings = [Finding(id=f"c{i}", severity=s, message="m") for i, s in enumerate(severities)]
    assert worst(findings) is want
    assert worst(severities) is want
    assert any_failing(findings) is want.failing


def test_sorting_by_rank_puts_the_worst_last_and_keeps_the_order_within_one_severity() -> None:
    findings = [Finding(id=i, severity=s, message="m") for i, s in
                [("a", Severity.FAIL), ("b", Severity.OK), ("c", Severity.WARN), ("d", Severity.FAIL)]]
    assert [f.id for f in sorted(findings, key=lambda f: f.severity)] == ["b", "c", "a", "d"]


def test_preflight_verify_and_doctor_results_are_findings_of_one_severity_type() -> None:
    assert PreflightFinding is Finding and PreflightSeverity is Severity
    check = CheckResult("smoke", Severity.FAIL, "word salad", {"answers": 2})
    unit = UnitFinding(unit="/etc/containers/systemd/x.container", id="restart-not-always", severity=Severity.WARN,
                       message="Restart=on-failure", fix="Restart=always")
    for result in (check, unit):
        assert isinstance(result, Finding) and isinstance(result.severity, Severity)
    assert check.fails and not unit.fails
    assert worst([check, unit]) is Severity.FAIL


@pytest.mark.parametrize(("severity", "word"), [
    (Severity.OK, "pass"), (Severity.WARN, "warn"), (Severity.FAIL, "fail"), (Severity.SKIP, "skip"),
    (Severity.ERROR, "error"),
])
def test_verify_spells_ok_pass_in_its_json_and_the_other_words_as_they_are(severity: Severity, word: str) -> None:
    check = CheckResult("health", severity, "answered", {"status_code": 200}, 0.12345)
    assert check_status(severity) == word and check.status == word
    doc = json.loads(to_json(check))
    assert doc == {"id": "health", "status": word, "message": "answered", "figures": {"status_code": 200},
                   "duration_s": 0.123}


def test_preflight_json_keeps_its_words_and_keys() -> None:
    doc = json.loads(to_json(Finding(id="port", severity=Severity.FAIL, message="taken", fix="free it")))
    assert doc == {"id": "port", "severity": "fail", "message": "taken", "fix": "free it", "figures": None}


def test_doctor_json_keeps_its_keys_without_figures() -> None:
    doc = json.loads(to_json(UnitFinding(unit="u.container", id="image-not-pinned", severity=Severity.INFO,
                                         message="m", fix="f", line=3)))
    assert doc == {"unit": "u.container", "id": "image-not-pinned", "severity": "info", "message": "m", "fix": "f",
                   "where": None, "line": 3, "managed": False, "autofix": False}


def test_a_severity_outside_the_vocabulary_is_refused() -> None:
    with pytest.raises(ValueError, match="severity"):
        Finding(id="x", severity="passed", message="m")  # type: ignore[arg-type]
