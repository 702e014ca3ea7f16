"""Probes that can start before the rest of rigctl is loaded: the podman CLI calls.

`podman images` and `podman version` take tens of milliseconds each, most of it in podman itself. A
command that is about to gather this host's facts starts them first (``start_podman_cli``), then loads
pydantic, the recipe and the facts models on this core while podman runs on another; ``probe_podman``
collects the answers. Nothing here imports pydantic or the facts models: that is the point of it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from rigctl.util.proc import Started

IMAGES_TIMEOUT_S = 30.0
VERSION_TIMEOUT_S = 15.0


def podman_socket_candidates() -> list[str]:
    found: list[str] = []
    host = os.environ.get("CONTAINER_HOST", "")
    if host.startswith("unix://"):
        found.append(host[len("unix://") :])
    if os.geteuid() == 0:
        found.append("/run/podman/podman.sock")
    runtime = os.environ.get("XDG_RUNTIME_DIR") or f"/run/user/{os.geteuid()}"
    found.append(f"{runtime}/podman/podman.sock")
    return found


def images_argv(podman_bin: str) -> list[str]:
    return [podman_bin, "images", "--format", "json"]


def version_argv(podman_bin: str) -> list[str]:
    return [podman_bin, "version", "--format", "json"]


@dataclass(frozen=True)
class PodmanCli:
    """`podman images` and `podman version`, started for ``probe_podman`` to collect."""

    podman_bin: str
    images: Started
    version: Started

    def cancel(self) -> None:
        """Kill and reap whatever still runs: the answers are not wanted (an API socket answered, or the
        command failed before gathering). Harmless after the answers were collected."""
        self.images.cancel()
        self.version.cancel()


def start_podman_cli(sockets: Sequence[str] | None = None, podman_bin: str = "podman") -> PodmanCli | None:
    """Start the CLI calls ``probe_podman`` would make, or None where it would ask an API socket first
    (one exists: the API's answer is preferred, and the CLI is asked only if it fails)."""
    candidates = podman_socket_candidates() if sockets is None else sockets
    if any(os.path.exists(s) for s in candidates):
        return None
    return PodmanCli(podman_bin, Started(images_argv(podman_bin), timeout=IMAGES_TIMEOUT_S),
                     Started(version_argv(podman_bin), timeout=VERSION_TIMEOUT_S))
