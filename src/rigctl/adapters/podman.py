"""podman, through its CLI (``rigctl.util.proc.run``): containers by name, their output, and following
it. Every container name is passed after ``--``: names come from recipes and deployment records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from rigctl.adapters.lines import LineStream, ProcLines
from rigctl.adapters.logfile import LogFileLines, conmon_alive, parse_stamp
from rigctl.util.proc import run
from rigctl.util.safefs import open_regular


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    running: bool
    exit_code: int
    pid: int
    image_digest: str
    started_at: str
    labels: dict[str, str]
    log_driver: str = ""  # k8s-file, journald, passthrough...: where `logs -f` must read the output from
    log_path: str = ""  # the k8s-file log (podman's own storage unless the unit gives a path)
    conmon_pid: int = 0  # the log's writer
    created_at: str = ""  # RFC 3339: a log shared by a unit's containers holds older ones' lines before it


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


@dataclass(frozen=True)
class ContainerEvent:
    """One of podman's events about a container: ``died`` (with its exit code) or ``health_status``."""

    at: float  # seconds since the epoch
    status: str  # died | health_status
    id: str
    exit_code: int | None = None  # died: podman leaves it out for 0
    health: str = ""  # health_status: starting | healthy | unhealthy


EVENTS_KEPT = 2000  # the newest events of one container looked at; a long-lived box has many more


def _event_time(item: dict[str, Any]) -> float:
    """When an event happened: podman 4 writes ``"Time": "<RFC 3339, UTC>"``; podman 5 ``"time"`` (seconds)
    and ``"timeNano"`` (nanoseconds since the epoch)."""
    nano = item.get("timeNano")
    if isinstance(nano, int) and not isinstance(nano, bool):
        return nano / 1e9
    seconds = item.get("time")
    if isinstance(seconds, int | float) and not isinstance(seconds, bool):
        return float(seconds)
    at = parse_stamp(str(item["Time"]))
    if at is None:
        raise ValueError("not an RFC 3339 time")
    return at


def parse_events(text: str) -> list[ContainerEvent]:
    """``podman events --format json``: one object a line; what cannot be read is skipped. A health check's
    result is under ``health_status`` (podman 4.3 and 5.4 alike), beside ``"Status": "health_status"``."""
    out: list[ContainerEvent] = []
    for line in text.splitlines()[-EVENTS_KEPT:]:
        try:
            item = json.loads(line)
            at = _event_time(item)
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
        code = item.get("ContainerExitCode")
        out.append(ContainerEvent(at, str(item.get("Status", "")), str(item.get("ID", "")),
                                  int(code) if isinstance(code, int) else (0 if item.get("Status") == "died" else None),
                                  str(item.get("health_status") or "")))
    return out


class Podman(Protocol):
    def container(self, name: str) -> ContainerInfo | None: ...
    def logs(self, name: str, *, tail: int | None = None, since: str | None = None) -> list[str]: ...
    def follow(self, name: str, *, tail: int | None = None, since: str | None = None,
               known: ContainerInfo | None = None) -> LineStream: ...
    def image_present(self, ref: str) -> bool | None: ...
    def events(self, name: str, *, since_s: float) -> list[ContainerEvent]: ...


class PodmanCli:
    def __init__(self, binary: str = "podman") -> None:
        self.binary = binary

    def container(self, name: str) -> ContainerInfo | None:
        done = run([self.binary, "container", "inspect", "--", name], timeout=30.0)
        if not done.ok:
            return None
        try:
            data: list[dict[str, Any]] = json.loads(done.stdout)
        except json.JSONDecodeError:
            return None
        if not data:
            return None
        item = data[0]
        state = item.get("State", {})
        config = item.get("Config", {})
        log = (item.get("HostConfig") or {}).get("LogConfig") or {}
        return ContainerInfo(
            id=str(item.get("Id", "")),
            name=str(item.get("Name", name)),
            running=bool(state.get("Running")),
            exit_code=_int(state.get("ExitCode")),
            pid=_int(state.get("Pid")),
            image_digest=str(item.get("ImageDigest", "")),
            started_at=str(state.get("StartedAt", "")),
            labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
            log_driver=str(log.get("Type") or ""),
            log_path=str(log.get("Path") or ""),
            conmon_pid=_int(state.get("ConmonPid")),
            created_at=str(item.get("Created") or ""),
        )

    def image_present(self, ref: str) -> bool | None:
        """``podman image exists``: True, False, or None when podman could not say."""
        done = run([self.binary, "image", "exists", "--", ref], timeout=30.0)
        return True if done.ok else False if done.rc == 1 else None

    def events(self, name: str, *, since_s: float) -> list[ContainerEvent]:
        """The deaths and health changes of containers named ``name`` in the last ``since_s`` seconds, oldest
        first. They outlive the container (quadlet's ``--rm``) and systemd's memory of the exit, which it
        drops when it starts the next one."""
        done = run([self.binary, "events", "--stream=false", "--since", f"{max(1, int(since_s))}s",
                    "--filter", f"container={name}", "--filter", "event=died", "--filter", "event=health_status",
                    "--format", "json"], timeout=15.0)
        return parse_events(done.stdout) if done.ok else []

    def logs(self, name: str, *, tail: int | None = None, since: str | None = None) -> list[str]:
        argv = [self.binary, "logs"]
        if tail is not None:
            argv += ["--tail", str(tail)]
        if since is not None:
            argv += ["--since", since]
        done = run([*argv, "--", name], timeout=60.0)
        if not done.ok:
            return []
        # podman logs writes the container's stdout to stdout and its stderr to stderr; keep both
        return (done.stdout + done.stderr).splitlines()

    def follow(self, name: str, *, tail: int | None = None, since: str | None = None,
               known: ContainerInfo | None = None) -> LineStream:
        """The container's output as it comes, until it exits. A k8s-file log is read from the file
        itself (``adapters.logfile``: ``--rm`` cannot take the last lines away); other drivers, a
        ``since``, or a log rigctl cannot open go through ``podman logs -f``. ``known``: the container's
        inspection the caller already holds (each inspection is a podman process, and a short-lived
        container may be gone after a second one)."""
        info = None if since is not None else known if known is not None and known.id == name else self.container(name)
        if info is not None and info.log_driver == "k8s-file" and info.log_path and info.conmon_pid > 0:
            pid = info.conmon_pid
            if conmon_alive(pid) or not info.running:
                fd = open_regular(info.log_path)
                if fd is not None:
                    # rigctl's units give every container of the unit one log (render: it outlives --rm):
                    # from the start, only this container's lines; a tail may reach back before it
                    return LogFileLines(fd, info.log_path, lambda: conmon_alive(pid), tail=tail,
                                        not_before=parse_stamp(info.created_at) if tail is None else None)
        if since is None and tail is None and info is not None and info.log_driver == "k8s-file" and info.created_at:
            since = info.created_at  # a log the unit's containers share: from this one's creation on
        argv = [self.binary, "logs", "-f"]
        if tail is not None:
            argv += ["--tail", str(tail)]
        if since is not None:
            argv += ["--since", since]
        return ProcLines([*argv, "--", name])
