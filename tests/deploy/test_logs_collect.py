"""`rigctl logs` without -f (``deploy.logs.collect``): the container's output while one exists, else the
journal's, else the unit's engine log (which outlives --rm), else a line that says the output is gone."""

from __future__ import annotations

from pathlib import Path

from tests.fakes import FakePodman

from rigctl.adapters.podman import ContainerInfo
from rigctl.deploy.logs import RIGCTL, collect
from rigctl.recipe.model import CrashSignature

SIG = CrashSignature.model_validate({"id": "replayssm-row-mismatch", "pattern": "ReplaySSM prefill", "meaning": "m",
                                     "remedy": "set USE_REPLAYSSM=0"})


class NoJournal:
    def available(self) -> bool:
        return False

    def lines(self, unit: str, *, since: str | None = None, tail: int | None = None) -> list[str]:
        raise AssertionError("no journal here")


def _collect(podman: FakePodman, engine_log: Path | None) -> list[tuple[str, str, bool]]:
    got = collect(container="rigctl-x", unit="rigctl-x.service", podman=podman, journal=NoJournal(),  # type: ignore[arg-type]
                  signatures=[SIG], record=None, since=None, tail=None, engine_log=engine_log)
    return [(ln.source, ln.text, ln.signature is not None) for ln in got]


def test_no_container_left_reads_the_engine_log(tmp_path: Path) -> None:
    log = tmp_path / "rigctl-x.log"
    log.write_text("2026-12-02T10:00:00.1+00:00 stdout F INFO serving\n"
                   "2026-12-02T10:00:05.2+00:00 stderr F ValueError: ReplaySSM prefill source/state row count mismatch\n")
    assert _collect(FakePodman(), log) == [
        ("engine-log", "INFO serving", False),
        ("engine-log", "ValueError: ReplaySSM prefill source/state row count mismatch", True),
    ]


def test_the_running_container_comes_first(tmp_path: Path) -> None:
    log = tmp_path / "rigctl-x.log"
    log.write_text("2026-12-02T10:00:00.1+00:00 stdout F from the file\n")
    podman = FakePodman(output={"rigctl-x": ["from podman"]})
    assert _collect(podman, log) == [("podman", "from podman", False)]


def test_nothing_anywhere_says_the_output_is_gone(tmp_path: Path) -> None:
    got = _collect(FakePodman(), tmp_path / "never-written.log")
    assert len(got) == 1 and got[0][0] == RIGCTL
    assert got[0][1].startswith("--- older output is gone: no rigctl-x container") and "never-written.log" in got[0][1]


def test_a_container_with_no_output_yet_is_not_called_gone(tmp_path: Path) -> None:
    info = ContainerInfo(id="c1", name="rigctl-x", running=True, exit_code=0, pid=1, image_digest="", started_at="",
                         labels={})
    assert _collect(FakePodman(containers={"rigctl-x": info}), tmp_path / "none.log") == []
