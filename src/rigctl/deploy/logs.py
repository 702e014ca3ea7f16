"""`rigctl logs`: the engine's output from podman (and the journal where there is one), plus the output of
the last failed warmup that rigctl kept, each line checked against the recipe's crash signatures.

``follow_service`` follows the SERVICE, not one container: quadlet runs the engine with ``--rm``, so each
restart under ``Restart=always`` is a new container with the same name, and an operator watching the
output is watching exactly for that. Where the engine writes to the journal, ``journalctl -f`` already
spans restarts; otherwise (podman's k8s-file logs, as on the testbed) each new container is picked up
after the last one's stream ends. Either way the restart is marked in the stream, and following stops by
itself once the unit is stopped for good, or when no new container appears within a bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from rigctl.adapters.clock import Clock
from rigctl.adapters.journal import Journal
from rigctl.adapters.lines import LineStream
from rigctl.adapters.logfile import Boundary, LogFileLines, parse_stamp
from rigctl.adapters.podman import ContainerInfo, Podman
from rigctl.adapters.systemd import Systemd, UnitState
from rigctl.deploy.state import DeploymentRecord
from rigctl.recipe.model import CrashSignature
from rigctl.util.safefs import open_regular
from rigctl.verify.signatures import SignatureMatch, match_signatures

RESTART_WAIT_S = 120.0  # default bound on waiting for systemd to start the next container
POLL_S = 0.5  # between looks at podman and systemd while no stream is open ...
EXIT_POLL_S = 0.2  # ... and while the exit status is not yet seen: systemd keeps it only until the next start
STREAM_CHECK_S = 2.0  # how often an open stream that says nothing is checked against the unit
UNIT_CHECK_S = 1.0  # how often the journal follower looks at the unit
DRAIN_S = 2.0  # what a stream may still deliver once its container or unit has stopped
RIGCTL = "rigctl"  # the source of lines rigctl writes into the stream itself


@dataclass(frozen=True)
class LogLine:
    source: str  # podman | journal | engine-log | last-failure | rigctl (a marker rigctl adds)
    text: str
    signature: SignatureMatch | None = None


def _mark(source: str, lines: Sequence[str], signatures: Sequence[CrashSignature]) -> list[LogLine]:
    hits = {m.line_number: m for m in match_signatures(signatures, lines)}
    return [LogLine(source, line, hits.get(i)) for i, line in enumerate(lines, start=1)]


def last_failure(record: DeploymentRecord | None, signatures: Sequence[CrashSignature]) -> list[LogLine]:
    """The output of the last failed warmup, as rigctl kept it in the deployment record."""
    if record is None or not record.last_failure:
        return []
    return _mark("last-failure", list(record.last_failure.get("last_lines", [])), signatures)


ENGINE_LOG_TAIL = 2000  # the lines shown from the engine log when no --tail is given


def engine_log_lines(path: Path, tail: int | None) -> list[str] | None:
    """The last lines of a unit's engine log (``places.engine_log``), the one its containers share and
    that outlives them; None when there is none to read (a unit rendered before rigctl kept one)."""
    fd = open_regular(path)
    if fd is None:
        return None
    stream = LogFileLines(fd, str(path), lambda: False, tail=ENGINE_LOG_TAIL if tail is None else tail)
    try:
        return list(stream)
    finally:
        stream.close()


def _shared_log(podman: Podman, container: str, signatures: Sequence[CrashSignature],
                tail: int | None) -> list[LogLine] | None:
    """The running container's k8s-file log read whole, where a unit's containers share it (rigctl's units
    do: it outlives --rm), with a marker where this container's output begins after older ones'; None when
    there is no such log to read (podman logs, the journal or the engine log then)."""
    info = podman.container(container)
    started = parse_stamp(info.started_at or info.created_at) if info is not None else None
    if info is None or info.log_driver != "k8s-file" or not info.log_path or started is None:
        return None
    fd = open_regular(info.log_path)
    if fd is None:
        return None
    stream = LogFileLines(fd, info.log_path, lambda: False, tail=ENGINE_LOG_TAIL if tail is None else tail,
                          mark_at=started)
    try:
        lines = list(stream)
    finally:
        stream.close()
    shown = time.strftime("%H:%M:%S", time.localtime(started))
    out: list[LogLine] = []
    for line in lines:
        if isinstance(line, Boundary):
            out.append(LogLine(RIGCTL, f"--- the running container ({info.id[:12]}, started {shown}) from here; "
                                       "the lines above are earlier containers' ---"))
        else:
            out.append(_signed("podman", line, signatures))
    return out or None


def collect(
    *, container: str, unit: str, podman: Podman, journal: Journal, signatures: Sequence[CrashSignature],
    record: DeploymentRecord | None, since: str | None, tail: int | None, engine_log: Path | None = None,
) -> list[LogLine]:
    """The last failed warmup's kept output, then the engine's: from its container (whose k8s-file log,
    in a unit rigctl rendered, holds the earlier containers' output too), else from the journal, else,
    the container gone, from the unit's engine log; when none of them has any, a line that says the
    output is gone."""
    out: list[LogLine] = last_failure(record, signatures) if since is None else []
    shared = _shared_log(podman, container, signatures, tail) if since is None else None
    if shared:
        return out + shared
    lines = podman.logs(container, tail=tail, since=since)
    if lines:
        return out + _mark("podman", lines, signatures)
    if journal.available():
        # The container is gone (quadlet runs it with --rm): its output may survive in the journal.
        lines = journal.lines(unit, since=since, tail=tail)
        if lines:
            return out + _mark("journal", lines, signatures)
    kept = engine_log_lines(engine_log, tail) if engine_log is not None and since is None else None
    if kept:
        return out + _mark("engine-log", kept, signatures)
    if podman.container(container) is None:
        where = f"; none in {engine_log}" if engine_log is not None and since is None else ""
        out.append(LogLine(RIGCTL, f"--- older output is gone: no {container} container (it is removed when it "
                                   f"exits, --rm), no journal{where}; units rendered by this rigctl keep it "
                                   f"(`rigctl up` again to re-render) ---"))
    return out


# --- following the service across restarts --------------------------------------------------------


@dataclass
class FollowEnd:
    """Why following stopped by itself (Ctrl-C is not an end: it interrupts)."""

    reason: str = ""  # stopped | failed (the unit ended failed) | gave-up (no new container in time)
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.reason == "stopped"


def stopped_for_good(state: UnitState) -> bool:
    """The unit is down and systemd will not start it again: stopped, failed past its start limit, or
    not loaded at all. A unit waiting to restart is ``activating``/``auto-restart``."""
    if state.load == "not-found":
        return True
    return state.active in {"inactive", "failed"} and not state.restart_pending


def _restart_marker(exit_status: int | None) -> LogLine:
    said = f"exit {exit_status}" if exit_status is not None else "exit status not seen"
    return LogLine(RIGCTL, f"--- container restarted ({said}), following the new one ---")


def _stopped(unit: str, state: UnitState, end: FollowEnd) -> LogLine:
    end.reason = "stopped" if state.result in {"", "success"} else "failed"
    result = "" if state.result in {"", "success"} else f", result {state.result}"
    if state.load == "not-found":
        end.detail = f"{unit} is gone (not loaded), so nothing will restart it"
    else:
        end.detail = f"{unit} is {state.active}/{state.sub}{result} and no restart is pending"
    return LogLine(RIGCTL, f"--- {end.detail}: done following ---")


def _gave_up(unit: str, state: UnitState | None, waited_s: float, end: FollowEnd) -> LogLine:
    end.reason = "gave-up"
    where = f"; {unit} is {state.active}/{state.sub}" if state is not None else ""
    end.detail = f"no new container within {waited_s:.0f} s{where}"
    return LogLine(RIGCTL, f"--- {end.detail}: stopped following (`rigctl logs -f` again to resume) ---")


def _signed(source: str, line: str, signatures: Sequence[CrashSignature]) -> LogLine:
    hit = match_signatures(signatures, [line])
    return LogLine(source, line, hit[0] if hit else None)


def follow_service(
    *, container: str, unit: str, podman: Podman, journal: Journal, systemd: Systemd, clock: Clock,
    signatures: Sequence[CrashSignature], tail: int | None = None, since: str | None = None,
    restart_wait_s: float = RESTART_WAIT_S, end: FollowEnd | None = None,
) -> Iterator[LogLine]:
    """The service's output as it comes, across restarts, until the unit is stopped for good (then a
    closing marker) or no new container appears within ``restart_wait_s`` after one exits. ``tail`` and
    ``since`` apply to the output already there when following starts. ``end`` (when given) is filled
    with why following stopped."""
    end = end if end is not None else FollowEnd()
    current = podman.container(container)
    if current is not None and current.log_driver in {"journald", "passthrough"} and journal.available():
        yield from _follow_journal(unit=unit, journal=journal, systemd=systemd, clock=clock, signatures=signatures,
                                   tail=tail, since=since, restart_wait_s=restart_wait_s, end=end)
        return
    yield from _follow_podman(current, container=container, unit=unit, podman=podman, systemd=systemd, clock=clock,
                              signatures=signatures, tail=tail, since=since, restart_wait_s=restart_wait_s, end=end)


def _follow_podman(
    current: ContainerInfo | None, *, container: str, unit: str, podman: Podman, systemd: Systemd, clock: Clock,
    signatures: Sequence[CrashSignature], tail: int | None, since: str | None, restart_wait_s: float,
    end: FollowEnd,
) -> Iterator[LogLine]:
    followed: str | None = None  # the id of the container whose stream ended last
    while True:
        if current is None or current.id == followed:
            exit_status: int | None = None
            deadline = clock.monotonic() + restart_wait_s
            state: UnitState | None = None
            while True:
                found = podman.container(container)
                if found is not None and found.id != followed:
                    current = found
                    break
                if found is not None and not found.running:
                    exit_status = found.exit_code  # the old one, not yet removed
                state = systemd.show(unit)
                if exit_status is None and state.exit_status is not None:
                    # systemd keeps the main process's status until it starts the next one
                    exit_status = state.exit_status
                if stopped_for_good(state):
                    yield _stopped(unit, state, end)
                    return
                if clock.monotonic() >= deadline:
                    yield _gave_up(unit, state, restart_wait_s, end)
                    return
                clock.sleep(POLL_S if exit_status is not None or followed is None else EXIT_POLL_S)
            if followed is not None:
                yield _restart_marker(exit_status)
        first = followed is None
        followed = current.id
        # By id: the name passes to the next container the moment this one is replaced.
        stream = podman.follow(current.id, tail=tail if first else None, since=since if first else None, known=current)
        try:
            yield from _drain_container(stream, current.id, podman, clock, signatures)
        finally:
            stream.close()


def _drain_container(stream: LineStream, container_id: str, podman: Podman, clock: Clock,
                     signatures: Sequence[CrashSignature]) -> Iterator[LogLine]:
    """One container's output until its stream ends. ``podman logs -f`` ends when the container exits;
    should it hang on after that (the container removed under it), the stream is cut after DRAIN_S."""
    quiet_since = clock.monotonic()
    gone_since: float | None = None
    while True:
        lines = stream.next_lines(STREAM_CHECK_S)
        if lines is None:
            return
        for line in lines:
            yield _signed("podman", line, signatures)
        now = clock.monotonic()
        if lines:
            quiet_since = now
            continue
        if now - quiet_since < STREAM_CHECK_S:
            continue
        info = podman.container(container_id)
        if info is not None and info.running:
            gone_since = None
            continue
        gone_since = now if gone_since is None else gone_since
        if now - gone_since >= DRAIN_S:
            return


def _follow_journal(
    *, unit: str, journal: Journal, systemd: Systemd, clock: Clock, signatures: Sequence[CrashSignature],
    tail: int | None, since: str | None, restart_wait_s: float, end: FollowEnd,
) -> Iterator[LogLine]:
    """``journalctl -f -u UNIT`` spans restarts by itself; the unit's restart counter says when one
    happened, and its state when it is over (looked at once a second at most, however chatty the engine)."""
    stream = journal.follow(unit, tail=tail, since=since)
    try:
        seen_restarts = systemd.show(unit).restarts
        exit_status: int | None = None
        down_since: float | None = None
        checked = clock.monotonic()
        ended = False
        while True:
            lines = None if ended else stream.next_lines(UNIT_CHECK_S)
            if lines is None:
                ended = True  # journalctl went away: the unit's state still decides when to stop
                clock.sleep(UNIT_CHECK_S)
            for line in lines or []:
                yield _signed("journal", line, signatures)
            now = clock.monotonic()
            if now - checked < UNIT_CHECK_S:
                continue
            checked = now
            state = systemd.show(unit)
            if state.exit_status is not None:
                exit_status = state.exit_status
            if state.restarts > seen_restarts:
                seen_restarts = state.restarts
                yield _restart_marker(exit_status)
                exit_status = None
            if stopped_for_good(state):
                for line in ([] if ended else stream.next_lines(DRAIN_S) or []):
                    yield _signed("journal", line, signatures)
                yield _stopped(unit, state, end)
                return
            # no main process: between two containers (a warmup has one, however long it takes)
            down_since = None if state.main_pid else (now if down_since is None else down_since)
            if down_since is not None and now - down_since >= restart_wait_s:
                yield _gave_up(unit, state, restart_wait_s, end)
                return
    finally:
        stream.close()
