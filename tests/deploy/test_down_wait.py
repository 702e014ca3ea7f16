"""`down` waits, bounded, for the container to vanish before it says whether the GPUs were released."""

from __future__ import annotations

from rigctl.deploy.down import CONTAINER_GONE_POLL_S, CONTAINER_GONE_WAIT_S, _wait_until_gone


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


class VanishingPodman:
    def __init__(self, polls_until_gone: int | None) -> None:
        self.left = polls_until_gone
        self.asked = 0

    def container(self, name: str) -> object | None:
        self.asked += 1
        if self.left is None:
            return {"Name": name}
        if self.left == 0:
            return None
        self.left -= 1
        return {"Name": name}


def test_returns_as_soon_as_the_container_is_gone() -> None:
    clock, podman = FakeClock(), VanishingPodman(3)
    assert _wait_until_gone(podman, "rigctl-x", clock) is True  # type: ignore[arg-type]
    assert podman.asked == 4
    assert clock.slept == [CONTAINER_GONE_POLL_S] * 3


def test_gives_up_after_the_bound() -> None:
    clock, podman = FakeClock(), VanishingPodman(None)
    assert _wait_until_gone(podman, "rigctl-x", clock) is False  # type: ignore[arg-type]
    assert abs(clock.now - CONTAINER_GONE_WAIT_S) < 1e-6
