"""Probes that can start before the rest of rigctl is loaded: the podman and quadlet calls, NVML's start.

`podman images`, `podman version` and `quadlet -version` take tens of milliseconds each, and the driver
spends about as long in ``nvmlInit()`` (32 ms on the H200 machine), in C with the GIL released. A command
that is about to gather this host's facts starts them first (``probes_started``), then loads pydantic,
the recipe and the facts models while they run; the gather collects the answers.
Nothing here imports pydantic or the facts models: that is the point of it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rigctl.host import nvml_lib
from rigctl.host.nvml_lib import NvmlLib
from rigctl.host.quadlet import QuadletAsked, ask_version
from rigctl.invocation import current
from rigctl.places import Scope, default_scope
from rigctl.util.proc import Started

IMAGES_TIMEOUT_S = 30.0
VERSION_TIMEOUT_S = 15.0


def podman_socket_candidates() -> list[str]:
    found: list[str] = []
    host = os.environ.get("CONTAINER_HOST", "")
    if host.startswith("unix://"):
        found.append(host[len("unix://") :])
    me = current()
    if me.is_root:
        found.append("/run/podman/podman.sock")
    found.append(f"{me.runtime_dir}/podman/podman.sock")
    return found


def images_argv(podman_bin: str) -> list[str]:
    return [podman_bin, "images", "--format", "json"]


def version_argv(podman_bin: str) -> list[str]:
    return [podman_bin, "version", "--format", "json"]


@dataclass(frozen=True)
class EarlyPodman:
    """`podman images` and `podman version`, started for ``probe_podman`` to collect."""

    podman_bin: str
    images: Started
    version: Started

    def cancel(self) -> None:
        """Kill and reap whatever still runs: the answers are not wanted (an API socket answered, or the
        command failed before gathering). Harmless after the answers were collected."""
        self.images.cancel()
        self.version.cancel()


def start_podman_cli(sockets: Sequence[str] | None = None, podman_bin: str = "podman") -> EarlyPodman | None:
    """Start the CLI calls ``probe_podman`` would make, or None where it would ask an API socket first
    (one exists: the API's answer is preferred, and the CLI is asked only if it fails)."""
    candidates = podman_socket_candidates() if sockets is None else sockets
    if any(os.path.exists(s) for s in candidates):
        return None
    return EarlyPodman(podman_bin, Started(images_argv(podman_bin), timeout=IMAGES_TIMEOUT_S),
                       Started(version_argv(podman_bin), timeout=VERSION_TIMEOUT_S))


class NvmlStart(threading.Thread):
    """``nvmlInit()`` on a thread of its own, begun before the models load. NVML counts its
    initialisations, so the GPU probe's own init and shutdown pair is then cheap and leaves NVML up;
    ``release`` ends this one. Where NVML cannot start, ``lib`` is None and the probe asks again, and
    reports why, as it would have without this. ``release`` never waits for a driver that hangs in
    ``nvmlInit()``: the thread lets NVML go itself if its start ends after the release, and being a
    daemon thread it does not hold the exit either."""

    def __init__(self) -> None:
        super().__init__(name="rigctl-nvml-start", daemon=True)
        self._lock = threading.Lock()
        self._lib: NvmlLib | None = None
        self._released = False
        self.start()

    def run(self) -> None:
        if not nvml_lib.nvml_library_loads():
            return
        lib = nvml_lib.load_pynvml()
        if isinstance(lib, str):
            return
        try:
            lib.nvmlInit()
        except Exception:  # any failure is the probe's to report, when it asks again
            return
        with self._lock:
            if not self._released:
                self._lib = lib
                return
        with contextlib.suppress(lib.NVMLError):  # released while it started: nobody will use it
            lib.nvmlShutdown()

    def lib(self) -> NvmlLib | None:
        """The started library (waits for the start, as the GPU probe would wait for the driver), or None
        where it did not start or was released."""
        self.join()
        with self._lock:
            return self._lib

    def release(self) -> None:
        with self._lock:
            self._released = True
            lib, self._lib = self._lib, None
        if lib is not None:
            with contextlib.suppress(lib.NVMLError):
                lib.nvmlShutdown()


@dataclass(frozen=True)
class EarlyProbes:
    """What ``probes_started`` began: the podman calls (None where an API socket will be asked instead) and
    NVML's start. ``cancel`` once the facts are gathered, or when they will not be."""

    podman: EarlyPodman | None
    nvml: NvmlStart
    quadlet: QuadletAsked | None = None

    def cancel(self) -> None:
        """Each part let go even when another's cancel fails (a second Ctrl-C)."""
        with contextlib.ExitStack() as parts:  # every callback runs, last registered first
            parts.callback(self.nvml.release)
            if self.quadlet is not None:
                parts.callback(self.quadlet.cancel)
            if self.podman is not None:
                parts.callback(self.podman.cancel)


@contextlib.contextmanager
def probes_started(wanted: bool = True, scope: Scope | None = None) -> Iterator[EarlyProbes | None]:
    """The podman calls, NVML's start and the version of ``scope``'s quadlet (default: ``default_scope``),
    begun now (None where not ``wanted``: a replayed inventory), and cancelled on the way out whatever
    happened in between (a recipe that failed to load, Ctrl-C)."""
    if not wanted:
        yield None
        return
    nvml = NvmlStart()
    podman: EarlyPodman | None = None
    quadlet: QuadletAsked | None = None
    try:
        podman = start_podman_cli()
        quadlet = ask_version(scope or default_scope())
        yield EarlyProbes(podman, nvml, quadlet)
    finally:
        EarlyProbes(podman, nvml, quadlet).cancel()  # what was started, also if starting the rest failed
