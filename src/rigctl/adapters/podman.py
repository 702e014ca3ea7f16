"""podman, through its CLI (``rigctl.util.proc.run``): containers by name, their output, and following
it. Every container name is passed after ``--``: names come from recipes and deployment records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from rigctl.adapters.lines import LineStream, ProcLines
from rigctl.adapters.logfile import LogFileLines, conmon_alive, open_log
from rigctl.util.proc import run


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


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


class Podman(Protocol):
    def container(self, name: str) -> ContainerInfo | None: ...
    def logs(self, name: str, *, tail: int | None = None, since: str | None = None) -> list[str]: ...
    def follow(self, name: str, *, tail: int | None = None, since: str | None = None) -> LineStream: ...
    def image_present(self, ref: str) -> bool | None: ...


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
        )

    def image_present(self, ref: str) -> bool | None:
        """``podman image exists``: True, False, or None when podman could not say."""
        done = run([self.binary, "image", "exists", "--", ref], timeout=30.0)
        return True if done.ok else False if done.rc == 1 else None

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

    def follow(self, name: str, *, tail: int | None = None, since: str | None = None) -> LineStream:
        """The container's output as it comes, until it exits. A k8s-file log is read from the file
        itself (``adapters.logfile``: ``--rm`` cannot take the last lines away); other drivers, a
        ``since``, or a log rigctl cannot open go through ``podman logs -f``."""
        info = self.container(name) if since is None else None
        if info is not None and info.log_driver == "k8s-file" and info.log_path and info.conmon_pid > 0:
            pid = info.conmon_pid
            if conmon_alive(pid) or not info.running:
                fd = open_log(info.log_path)
                if fd is not None:
                    return LogFileLines(fd, info.log_path, lambda: conmon_alive(pid), tail=tail)
        argv = [self.binary, "logs", "-f"]
        if tail is not None:
            argv += ["--tail", str(tail)]
        if since is not None:
            argv += ["--since", since]
        return ProcLines([*argv, "--", name])
