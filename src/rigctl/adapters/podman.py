"""podman, through its CLI (``rigctl.util.proc.run``): containers by name, their output, and following
it. Every container name is passed after ``--``: names come from recipes and deployment records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from rigctl.adapters.lines import LineStream, ProcLines
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
        return ContainerInfo(
            id=str(item.get("Id", "")),
            name=str(item.get("Name", name)),
            running=bool(state.get("Running")),
            exit_code=int(state.get("ExitCode") or 0),
            pid=int(state.get("Pid") or 0),
            image_digest=str(item.get("ImageDigest", "")),
            started_at=str(state.get("StartedAt", "")),
            labels={str(k): str(v) for k, v in (config.get("Labels") or {}).items()},
            log_driver=str(((item.get("HostConfig") or {}).get("LogConfig") or {}).get("Type") or ""),
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
        argv = [self.binary, "logs", "-f"]
        if tail is not None:
            argv += ["--tail", str(tail)]
        if since is not None:
            argv += ["--since", since]
        return ProcLines([*argv, "--", name])
