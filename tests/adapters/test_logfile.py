"""Reading a container's k8s-file log through rigctl's own descriptor (``adapters.logfile``): records
in conmon's shape, continued lines, tail, rotation, and above all the lines written just before the
writer died and the file was removed (what ``--rm`` takes from ``podman logs -f``)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from rigctl.adapters.logfile import LINE_LIMIT, LogFileLines, conmon_alive, parse_record, parse_stamp
from rigctl.util.safefs import open_regular

TS = "2026-12-02T10:58:30.123456789+00:00"


def rec(text: str, *, stream: str = "stdout", tag: str = "F") -> str:
    return f"{TS} {stream} {tag} {text}\n"


class Writer:
    """A stand-in for conmon: appends records, then 'dies'."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.alive = True
        self.f = path.open("a", encoding="utf-8")

    def write(self, data: str) -> None:
        self.f.write(data)
        self.f.flush()

    def die(self) -> None:
        self.f.close()
        self.alive = False


def stream_for(path: Path, writer: Writer, **kw: object) -> LogFileLines:
    fd = open_regular(str(path))
    assert fd is not None
    return LogFileLines(fd, str(path), lambda: writer.alive, poll_s=0.02, **kw)  # type: ignore[arg-type]


def read_all(stream: LogFileLines, within: float = 10.0) -> list[str]:
    out: list[str] = []
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = stream.next_lines(0.5)
        if got is None:
            return out
        out += got
    pytest.fail(f"the stream did not end within {within} s; got {out[-3:]}")


def test_records_in_conmon_shape_become_lines_and_partials_are_joined(tmp_path: Path) -> None:
    log = tmp_path / "ctr.log"
    w = Writer(log)
    w.write(rec("INFO first") + rec("a long li", tag="P") + rec("ne in two", tag="F", stream="stderr")
            + "not a conmon record at all\n")
    s = stream_for(log, w)
    w.die()
    assert read_all(s) == ["INFO first", "a long line in two", "not a conmon record at all"]


def test_parse_record_keeps_spaces_in_the_text() -> None:
    assert parse_record(f"{TS} stderr F Traceback (most recent call last):".encode()) == (
        b"Traceback (most recent call last):", True, TS.encode())
    assert parse_record(f"{TS} stdout P ".encode()) == (b"", False, TS.encode())
    assert parse_record(b"plain") == (b"plain", True, b"")


def test_parse_stamp_reads_conmon_and_podman_times() -> None:
    conmon = parse_stamp("2026-12-02T10:58:30.123456789+00:00")
    assert conmon is not None and abs(conmon - 1796209110.123456789) < 1e-6
    assert parse_stamp("2026-12-02T11:58:30.123456789+01:00") == conmon  # an offset, as conmon writes local time
    assert parse_stamp("2026-12-02T10:58:30.123456789Z") == conmon  # podman inspect's Created
    assert parse_stamp("2026-12-02T10:58:30Z") == int(conmon)
    assert parse_stamp("yesterday") is None


def test_not_before_skips_the_lines_of_an_earlier_container_in_a_shared_log(tmp_path: Path) -> None:
    # every container of a rigctl unit writes one log (it outlives --rm): a new container's follower
    # starts at the new container's creation, not at the crash before it
    log = tmp_path / "shared.log"
    w = Writer(log)
    w.write("2026-12-02T10:00:00.5+00:00 stderr F ValueError: the previous container's crash\n"
            "2026-12-02T10:00:09.999999999+00:00 stdout F INFO the new one starts\n"
            "2026-12-02T10:00:08.0+00:00 stdout F later lines are kept whatever their time\n")
    s = stream_for(log, w, not_before=parse_stamp("2026-12-02T10:00:09Z"))
    w.die()
    assert read_all(s) == ["INFO the new one starts", "later lines are kept whatever their time"]


def test_last_words_are_read_after_the_file_is_removed(tmp_path: Path) -> None:
    # --rm: the writer prints its crash, exits, and podman removes the file, all before rigctl reads on
    log = tmp_path / "ctr.log"
    w = Writer(log)
    w.write(rec("Loading safetensors checkpoint shards: 1/8"))
    s = stream_for(log, w)
    assert s.next_lines(2.0) == ["Loading safetensors checkpoint shards: 1/8"]
    w.write(rec("ValueError: ReplaySSM prefill source/state row count mismatch", stream="stderr"))
    w.die()
    log.unlink()
    assert read_all(s) == ["ValueError: ReplaySSM prefill source/state row count mismatch"]


def test_following_waits_for_a_live_writer_and_ends_when_it_is_gone(tmp_path: Path) -> None:
    log = tmp_path / "ctr.log"
    w = Writer(log)
    s = stream_for(log, w)
    assert s.next_lines(0.3) == []  # nothing yet, but not over: the writer lives
    threading.Timer(0.2, lambda: (w.write(rec("late line") + rec("no newline", tag="P")), w.die())).start()
    assert read_all(s) == ["late line", "no newline"]  # a piece left when the writer died is still shown


def test_tail_gives_the_last_lines_then_follows(tmp_path: Path) -> None:
    log = tmp_path / "ctr.log"
    w = Writer(log)
    w.write("".join(rec(f"line {i}") for i in range(100)))
    s = stream_for(log, w, tail=3)
    assert s.next_lines(2.0) == ["line 97", "line 98", "line 99"]
    w.write(rec("after"))
    w.die()
    assert read_all(s) == ["after"]


def test_tail_zero_gives_only_what_comes(tmp_path: Path) -> None:
    log = tmp_path / "ctr.log"
    w = Writer(log)
    w.write(rec("old"))
    s = stream_for(log, w, tail=0)
    w.write(rec("new"))
    w.die()
    assert read_all(s) == ["new"]


def test_a_rotated_log_is_followed_into_the_new_file(tmp_path: Path) -> None:
    # conmon's log-size-max writes a new file and renames it over the old name
    log = tmp_path / "ctr.log"
    w = Writer(log)
    w.write(rec("in the old file"))
    s = stream_for(log, w)
    assert s.next_lines(2.0) == ["in the old file"]
    w.write(rec("last of the old file"))
    fresh = tmp_path / "ctr.log.tmp"
    fresh.write_text(rec("first of the new file"))
    os.replace(fresh, log)
    w.f.close()
    w.f = log.open("a", encoding="utf-8")
    w.write(rec("second of the new file"))
    time.sleep(0.1)
    w.die()
    assert read_all(s) == ["last of the old file", "first of the new file", "second of the new file"]


def test_a_line_without_end_is_cut_at_the_limit(tmp_path: Path) -> None:
    log = tmp_path / "ctr.log"
    w = Writer(log)
    w.write(rec("x" * (3 * LINE_LIMIT)) + rec("next"))
    s = stream_for(log, w)
    w.die()
    lines = read_all(s)
    assert [len(line) for line in lines] == [LINE_LIMIT, 4]
    endless = tmp_path / "endless.log"
    w2 = Writer(endless)
    w2.write("y" * (4 * LINE_LIMIT))  # never a newline: cut into bounded pieces, never held whole
    s2 = stream_for(endless, w2)
    w2.die()
    assert all(len(line) <= LINE_LIMIT for line in read_all(s2))


def test_close_stops_following_a_live_writer(tmp_path: Path) -> None:
    log = tmp_path / "ctr.log"
    w = Writer(log)
    s = stream_for(log, w)
    assert s.next_lines(0.1) == []
    s.close()
    assert read_all(s, within=3.0) == []
    w.die()


def test_open_regular_refuses_links_and_non_files(tmp_path: Path) -> None:
    real = tmp_path / "real.log"
    real.write_text(rec("x"))
    link = tmp_path / "link.log"
    link.symlink_to(real)
    assert open_regular(str(link)) is None
    assert open_regular(str(tmp_path)) is None
    os.mkfifo(tmp_path / "fifo")
    assert open_regular(str(tmp_path / "fifo")) is None
    fd = open_regular(str(real))
    assert fd is not None
    os.close(fd)


def test_conmon_alive_is_false_for_another_program() -> None:
    assert conmon_alive(os.getpid()) is False  # this is python, not conmon
    assert conmon_alive(2**22 + 12345) is False  # no such process
