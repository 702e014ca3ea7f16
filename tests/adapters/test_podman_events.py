"""``podman events --format json`` as podman 4.3 and 5.4 really print it (captured on the two testbeds):
the time is a string in one and epoch numbers in the other; both give the same death."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.deploy import conftest as testbed  # its testbed_env, imported by name, would be collected

from rigctl.adapters.podman import parse_events

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "podman-events"
# What each podman's own events say of two passing health checks and a kill (captured on the testbeds; the first
# line of each file names the version and the commands). podman 4.3 reports a check with the state it had
# before the check: the first passing one still says "starting".
SEEN_HEALTH = {"podman-4.3.1.jsonl": ["starting", "healthy"], "podman-5.4.2.jsonl": ["healthy", "healthy"]}


@pytest.mark.parametrize("name", sorted(SEEN_HEALTH))
def test_a_captured_health_check_and_death_are_read(name: str) -> None:
    path = FIXTURES / name
    if not path.exists():
        pytest.fail(f"{path} missing: capture it on the testbed (see test_a_real_health_check_and_death_are_read)")
    text = path.read_text()
    assert text.startswith("# podman version "), "a fixture names the podman that printed it"
    events = parse_events(text)
    assert [e.health for e in events if e.status == "health_status"] == SEEN_HEALTH[name]
    (died,) = [e for e in events if e.status == "died"]
    assert died.exit_code == 137 and died.at > 0
    assert all(e.id == died.id for e in events)


PODMAN_43 = ('{"ContainerExitCode":3,"ID":"87cf6b1b","Image":"localhost/rigctl-test-engine@sha256:8e7b",'
             '"Name":"ev-test","Status":"died","Time":"2026-12-02T14:32:42.084588472Z","Type":"container",'
             '"Attributes":{"io.buildah.version":"1.28.2"}}')
PODMAN_54 = ('{"ContainerExitCode":3,"ID":"d981ff79","Image":"localhost/rigctl-test-engine@sha256:00a4",'
             '"Name":"ev-test","Status":"died","time":1796221958,"timeNano":1796221958706376040,"Type":"container",'
             '"Attributes":{"io.buildah.version":"1.39.3"}}')


@pytest.mark.parametrize(("line", "at"), [(PODMAN_43, 1796221962.084588), (PODMAN_54, 1796221958.706376)])
def test_a_death_is_read_from_either_podman(line: str, at: float) -> None:
    (event,) = parse_events(line)
    assert event.status == "died" and event.exit_code == 3
    assert abs(event.at - at) < 1e-3


def test_an_unreadable_line_is_skipped() -> None:
    events = parse_events("not json\n" + PODMAN_43 + '\n{"Status":"died"}\n')
    assert [(e.status, e.exit_code) for e in events] == [("died", 3)]


# A health check's result, read from what the podman on this machine prints (its key is ``health_status``; an
# earlier fixture typed from memory spelt ``HealthStatus`` and hid that rigctl read no health at all). Run on
# each testbed flavour: podman 4.3 (`.ci/testbed.sh up`) and 5.4 (`.ci/testbed.sh exec --podman 5 -- ...`).
@pytest.mark.integration
@pytest.mark.timeout(180)
def test_a_real_health_check_and_death_are_read(need: Callable[[bool, str], None]) -> None:
    env = testbed.testbed_env()
    image = env.get("RIGCTL_TEST_ENGINE_IMAGE")
    need(image is not None and shutil.which("podman") is not None, "no test-engine image (.ci/testbed.sh up)")
    name = f"rigctl-ev-{os.getpid()}"

    def podman(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["podman", *args], env=env, capture_output=True, text=True, timeout=60, check=False)

    try:
        started = podman("run", "-d", "--name", name, "--health-cmd", "true", "--health-interval", "disable",
                         "--entrypoint", "sleep", str(image), "600")
        assert started.returncode == 0, started.stderr
        for _ in range(2):  # podman 4.3's event carries the state before the check (starting), 5.4's after it
            assert podman("healthcheck", "run", name).returncode == 0  # the check, run now: no timer needed
        assert podman("kill", name).returncode == 0
        podman("wait", name)
        raw = podman("events", "--stream=false", "--since", "120s", "--filter", f"container={name}",
                     "--format", "json").stdout
        with os.fdopen(os.open(os.environ.get("RIGCTL_EVENTS_CAPTURE", os.devnull), os.O_WRONLY | os.O_CREAT
                               | os.O_APPEND, 0o644), "w") as capture:
            capture.write(podman("--version").stdout + raw)  # kept for a fixture when asked to
        events = [e for e in parse_events(raw) if e.status in ("died", "health_status")]
        assert [(e.status, e.health) for e in events][-2] == ("health_status", "healthy"), raw
        assert [e.exit_code for e in events if e.status == "died"] == [137], raw
        assert [e.status for e in events] == ["health_status", "health_status", "died"], raw
    finally:
        podman("rm", "-f", "--", name)
