"""``podman events --format json`` as podman 4.3 and 5.4 really print it (captured on the two testbeds):
the time is a string in one and epoch numbers in the other; both give the same death."""

from __future__ import annotations

import pytest

from rigctl.adapters.podman import parse_events

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


def test_podman_5_health_and_an_unreadable_line() -> None:
    health = '{"ID":"d981","Name":"x","Status":"health_status","HealthStatus":"healthy","time":1796221958}'
    events = parse_events("not json\n" + health + '\n{"Status":"died"}\n')
    assert [(e.status, e.health, e.at) for e in events] == [("health_status", "healthy", 1796221958.0)]
