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


# Two containers' output in the one k8s-file log a unit's containers share, as podman 4.3.1 wrote it on the
# testbed (the file's first line says how); the second container started at STARTED, as `podman container
# inspect` gives State.StartedAt in its JSON.
SHARED = Path(__file__).resolve().parents[1] / "fixtures" / "k8s-file" / "two-containers.log"
STARTED = "2026-12-07T11:53:29.164923343Z"


def test_the_running_containers_output_is_marked_apart_from_earlier_ones(tmp_path: Path) -> None:
    log = tmp_path / "rigctl-x.log"
    log.write_text("".join(line for line in SHARED.read_text().splitlines(keepends=True) if not line.startswith("#")))
    info = ContainerInfo(id="c2c2c2c2c2c2c2", name="rigctl-x", running=True, exit_code=0, pid=1, image_digest="",
                         started_at=STARTED, labels={}, log_driver="k8s-file", log_path=str(log))
    # podman logs would run the two together (and put stderr after stdout): the file is read in order instead
    podman = FakePodman(containers={"rigctl-x": info},
                        output={"rigctl-x": ["first container line", "second container line", "to stderr"]})
    got = _collect(podman, None)
    assert [text for _, text, _ in got[:2]] == ["first container line", "to stderr"]
    assert got[2][0] == RIGCTL and "the running container (c2c2c2c2c2c2" in got[2][1]
    assert got[3:] == [("podman", "second container line", False)]


def test_a_log_of_one_container_has_no_marker(tmp_path: Path) -> None:
    log = tmp_path / "rigctl-x.log"
    log.write_text("2026-12-07T11:53:29.2+00:00 stdout F only this one\n")
    info = ContainerInfo(id="c2", name="rigctl-x", running=True, exit_code=0, pid=1, image_digest="",
                         started_at=STARTED, labels={}, log_driver="k8s-file", log_path=str(log))
    assert _collect(FakePodman(containers={"rigctl-x": info}), None) == [("podman", "only this one", False)]
