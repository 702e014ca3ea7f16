"""A verify check is one function plus one REGISTRY entry: added to the registry and nowhere else, it is
accepted by --checks, named in the help, run in order, reported, and judged like the others. Against the
test engine running as a real process on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from typer.testing import CliRunner

from rigctl.severity import Severity
from rigctl.verify import Endpoint, Expectations, run_checks
from rigctl.verify.checks import REGISTRY, VerifyCheck
from rigctl.verify.client import Request
from rigctl.verify.report import CheckResult
from rigctl.verify.runner import check_ids, parse_checks
from rigctl.verify.session import Session

from .conftest import FakeEngine

Start = Callable[..., FakeEngine]


async def check_greeting(s: Session) -> CheckResult:
    """The model answers a greeting (a check the registry did not have)."""
    done = await s.complete("greeting", Request(max_tokens=16, messages=(("user", "Say hello."),)))
    severity = Severity.OK if done.text.strip() else Severity.FAIL
    return CheckResult("greeting", severity, f"answered {len(done.text)} characters", {"answer": done.text})


@pytest.fixture
def with_greeting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(REGISTRY, "greeting", VerifyCheck(check_greeting))


@pytest.mark.usefixtures("with_greeting")
def test_a_check_added_to_the_registry_runs_and_reports(fake_engine: Start) -> None:
    engine = fake_engine("healthy", "--max-model-len", "4096")
    assert check_ids()[-1] == "greeting" and parse_checks("greeting,health") == ("health", "greeting")
    report = run_checks(Endpoint(engine.url, engine.model), Expectations(context=4096, request_timeout_s=10.0),
                        checks=("greeting", "health", "repetition"))
    assert [c.id for c in report.checks] == ["health", "repetition", "greeting"]  # the registry's order
    greeting = report.get("greeting")
    assert greeting is not None and greeting.status == "pass", report.to_dict()
    assert greeting.figures["answer"] and greeting.figures["dialect"] == "vllm"  # stamped like every check
    repetition = report.get("repetition")  # judged after every check, over the new check's output too
    assert repetition is not None and repetition.status == "pass"
    assert repetition.figures["outputs_checked"] == 4  # its three probes and the greeting


@pytest.mark.usefixtures("with_greeting")
def test_the_command_line_takes_and_lists_a_check_added_to_the_registry(fake_engine: Start) -> None:
    from rigctl.cli.app import app  # every command registered

    engine = fake_engine("healthy", "--max-model-len", "4096")
    runner = CliRunner()
    result = runner.invoke(app, ["verify", "--url", engine.url, "--model", engine.model, "--checks",
                                 "greeting,health", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert doc["command"] == "verify" and doc["ok"] is True
    assert [(c["id"], c["status"]) for c in doc["checks"]] == [("health", "pass"), ("greeting", "pass")]
    shown = runner.invoke(app, ["verify", "--help"])
    assert shown.exit_code == 0, shown.output
    unwrapped = "".join(shown.output.split())  # the help column wraps anywhere, even inside a word
    assert "Checkstorun:health,models,smoke,repetition,determinism,needle,soak,greeting(default:all)." in unwrapped
    refused = runner.invoke(app, ["verify", "--url", engine.url, "--model", engine.model, "--checks", "bogus",
                                  "--json"])
    assert refused.exit_code == 2 and "greeting" in json.loads(refused.output)["error"]["fix"]


async def _probe_with_a_bug(s: Session) -> CheckResult:
    raise RuntimeError("a bug in the probe")


def test_a_registered_check_that_raises_is_isolated_and_still_judged(fake_engine: Start,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    judge = REGISTRY["repetition"].judge
    monkeypatch.setitem(REGISTRY, "repetition", VerifyCheck(_probe_with_a_bug, judge=judge))
    monkeypatch.setitem(REGISTRY, "greeting", VerifyCheck(check_greeting))
    engine = fake_engine("healthy", "--max-model-len", "4096")
    report = run_checks(Endpoint(engine.url, engine.model), Expectations(context=4096, request_timeout_s=10.0),
                        checks=("smoke", "repetition", "greeting"))
    assert [(c.id, c.status) for c in report.checks] == [("smoke", "pass"), ("repetition", "fail"),
                                                         ("greeting", "pass")]
    repetition = report.get("repetition")
    assert repetition is not None
    assert repetition.message == "probe request failed: RuntimeError: a bug in the probe"
    assert repetition.figures["outputs_checked"] == 2  # the smoke answer and the greeting


def test_every_chosen_set_of_checks_names_registered_ones() -> None:
    """`up`'s checks after ready, the canary's default and allowed ones, and the kube verify Job's each choose
    from REGISTRY: a check renamed there cannot leave a name here that --checks would refuse at run time."""
    from rigctl.deploy.canary import ALLOWED_CHECKS, DEFAULT_CHECKS
    from rigctl.deploy.up import VERIFY_CHECKS
    from rigctl.render.kube import VERIFY_CHECKS as KUBE_JOB_CHECKS

    chosen = {"up": VERIFY_CHECKS, "canary default": DEFAULT_CHECKS, "canary allowed": ALLOWED_CHECKS,
              "kube job": tuple(KUBE_JOB_CHECKS.split(","))}
    assert {what: [c for c in checks if c not in REGISTRY] for what, checks in chosen.items()} == {
        what: [] for what in chosen}
    assert set(DEFAULT_CHECKS) <= set(ALLOWED_CHECKS)
    assert set(parse_checks(KUBE_JOB_CHECKS)) == set(KUBE_JOB_CHECKS.split(","))  # the Job's --checks is accepted
