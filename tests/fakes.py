"""Fakes of rigctl's adapters (``rigctl.adapters``), for tests that drive deploy's decisions in no time.

Each keeps its Protocol's contract the way the real system keeps it: ``FakeSystemd`` knows only the units
whose ``.container`` file is in the quadlet directory at its last daemon-reload (as quadlet generates
them), and answers ``show`` with the properties ``systemctl show`` prints for that state (``ActiveState``,
``SubState``, ``Result``, ``ExecMainCode``/``ExecMainStatus``, ``NRestarts``...), parsed by the real
``UnitState.from_props``. A started unit follows a script on the fake clock: running, then perhaps dead
with an exit status, then (``Restart=always``) restarted after ``restart_sec``. The probe answers only
while the unit runs. Nothing here sleeps: ``FakeClock.sleep`` moves time on.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rigctl.adapters import Adapters
from rigctl.adapters.podman import ContainerEvent, ContainerInfo
from rigctl.adapters.probe import Readiness
from rigctl.adapters.systemd import UnitState
from rigctl.host.facts import Gpu, GpuProcess
from rigctl.places import Scope
from rigctl.plan.plan import Plan
from rigctl.podman_versions import DEFAULT_PODMAN, Version
from rigctl.preflight.finding import Finding
from rigctl.preflight.layout import Choice
from rigctl.preflight.registry import PreflightReport
from rigctl.recipe.load import load
from rigctl.recipe.model import Recipe
from rigctl.render.units import render_units

# What `systemctl show` prints, by state (only the properties deploy reads).
NOT_FOUND = {"LoadState": "not-found", "ActiveState": "inactive", "SubState": "dead", "Result": "success"}
STOPPED = {"LoadState": "loaded", "ActiveState": "inactive", "SubState": "dead", "Result": "success",
           "ExecMainCode": "0", "ExecMainStatus": "0", "MainPID": "0"}
RUNNING = {"LoadState": "loaded", "ActiveState": "active", "SubState": "running", "Result": "success",
           "ExecMainCode": "0", "ExecMainStatus": "0", "MainPID": "4242"}


def exited(status: int) -> dict[str, str]:
    """The main process exited with ``status`` under ``Restart=always``: systemd waits to restart it.
    (ExecMainCode 1 is CLD_EXITED; a clean exit leaves Result=success, anything else exit-code.)"""
    return {"LoadState": "loaded", "ActiveState": "activating", "SubState": "auto-restart",
            "Result": "success" if status == 0 else "exit-code", "ExecMainCode": "1",
            "ExecMainStatus": str(status), "MainPID": "0"}


class FakeClock:
    """Time that moves only when slept through. ``interrupt_after``: the sleep that passes this moment
    raises KeyboardInterrupt, as Ctrl-C would arrive while `up` waits."""

    def __init__(self, now: float = 1000.0, interrupt_after: float | None = None) -> None:
        self.now = now
        self.interrupt_after = interrupt_after

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_700_000_000 + self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self.interrupt_after is not None and self.now >= self.interrupt_after:
            self.interrupt_after = None
            raise KeyboardInterrupt


@dataclass
class Script:
    """What a unit does once started, on the clock: ``states`` are (seconds after the start, properties),
    in order; ``restart_sec`` brings an exited unit back as systemd's Restart=always does."""

    states: list[tuple[float, dict[str, str]]] = field(default_factory=lambda: [(0.0, RUNNING)])
    restart_sec: float = 1.0


class FakeSystemd:
    """systemd for the units in ``unit_dir``. ``calls`` records every call but ``show``; ``interrupt_on``
    names one call (``daemon-reload``, ``start``...) that raises KeyboardInterrupt instead."""

    def __init__(self, unit_dir: Path, clock: FakeClock, *, scope: Scope = Scope.USER,
                 script: Script | None = None, interrupt_on: str | None = None) -> None:
        self.scope = scope
        self.unit_dir = unit_dir
        self.clock = clock
        self.script = script or Script()
        self.interrupt_on = interrupt_on
        self.calls: list[str] = []
        self.loaded: set[str] = set()
        self.started_at: dict[str, float] = {}  # unit -> when it was last started
        self.resting: dict[str, dict[str, str]] = {}  # unit -> its state while not started

    def _call(self, what: str) -> None:
        self.calls.append(what)
        if self.interrupt_on is not None and what.startswith(self.interrupt_on):
            self.interrupt_on = None
            raise KeyboardInterrupt

    def daemon_reload(self) -> None:
        self._call("daemon-reload")
        self.loaded = {p.stem + ".service" for p in self.unit_dir.glob("*.container")}

    def start(self, unit: str) -> None:
        self._call(f"start {unit}")
        self.started_at[unit] = self.clock.monotonic()

    def stop(self, unit: str, *, wait: bool, timeout: float) -> None:
        self._call(f"stop {unit}")
        self.started_at.pop(unit, None)
        self.resting[unit] = STOPPED

    def reset_failed(self, unit: str) -> None:
        self._call(f"reset-failed {unit}")

    def restart(self, unit: str) -> None:
        self._call(f"restart {unit}")
        self.started_at[unit] = self.clock.monotonic()

    live: dict[str, dict[str, str]] | None = None  # unit -> what `systemctl show -p ...` says beyond show()

    def properties(self, unit: str, names: Sequence[str]) -> dict[str, str]:
        state = {**self._props(unit), **(self.live or {}).get(unit, {})}
        return {name: state[name] for name in names if name in state}

    manager_env: dict[str, str] | None = None  # what `systemctl show-environment` says; None: not asked

    def manager_environment(self) -> dict[str, str] | None:
        return self.manager_env

    def _props(self, unit: str) -> dict[str, str]:
        if unit not in self.loaded:
            return NOT_FOUND
        if unit not in self.started_at:
            return self.resting.get(unit, STOPPED)
        return self._scripted(self.clock.monotonic() - self.started_at[unit])

    def show(self, unit: str) -> UnitState:
        return UnitState.from_props({**self._props(unit), **(self.live or {}).get(unit, {})})

    def _scripted(self, since_start: float) -> dict[str, str]:
        """The script's state at ``since_start``; each exit is followed by a restart that replays it."""
        restarts, t = 0, since_start
        while True:
            current = self.script.states[0][1]
            exit_at = None
            for at, props in self.script.states:
                if at > t:
                    break
                current = props
                if props.get("SubState", "").startswith("auto-restart"):  # -queued: systemd 254+
                    exit_at = at
            if exit_at is None or t < exit_at + self.script.restart_sec:
                return {**current, "NRestarts": str(restarts), "Restart": "always"}
            restarts, t = restarts + 1, t - exit_at - self.script.restart_sec


class FakeLines:
    """A finished stream of lines (what ``podman logs -f`` gives for a container that has exited)."""

    def __init__(self, lines: Sequence[str]) -> None:
        self._lines = list(lines)

    def __iter__(self) -> Iterator[str]:
        return iter(self._lines)

    def next_lines(self, timeout: float) -> list[str] | None:
        out, self._lines = self._lines, []
        return out or None

    def close(self) -> None:
        self._lines = []


class FakePodman:
    """Containers by name (none unless given: the output follower then waits, as for a unit that has not
    created its container yet) and each container's kept output for ``logs``."""

    def __init__(self, containers: dict[str, ContainerInfo] | None = None,
                 output: dict[str, list[str]] | None = None) -> None:
        self.containers = containers or {}
        self.output = output or {}

    images: set[str] | None = None  # the images present; None: every image is

    def container(self, name: str) -> ContainerInfo | None:
        return self.containers.get(name)

    def image_present(self, ref: str) -> bool | None:
        return True if self.images is None else ref in self.images

    past: list[ContainerEvent] | None = None  # podman's events (deaths, health changes), oldest first

    def events(self, name: str, *, since_s: float) -> list[ContainerEvent]:
        return list(self.past or [])

    def logs(self, name: str, *, tail: int | None = None, since: str | None = None) -> list[str]:
        lines = self.output.get(name, [])
        return lines[-tail:] if tail else list(lines)

    def follow(self, name: str, *, tail: int | None = None, since: str | None = None,
               known: ContainerInfo | None = None) -> FakeLines:
        return FakeLines(self.logs(name, tail=tail))


class FakeProbe:
    """The engine behind ``unit``: it answers /health and /v1/models only while systemd has the unit
    running, and is ready (serving ``served_name``) ``ready_after`` seconds after it started; never when
    None."""

    def __init__(self, systemd: FakeSystemd, unit: str, served_name: str, *, ready_after: float | None = 1.0,
                 max_model_len: int | None = None) -> None:
        self.systemd, self.unit, self.served_name = systemd, unit, served_name
        self.ready_after = ready_after
        self.max_model_len = max_model_len
        self.asked = 0

    def check(self, base_url: str, health_path: str, served_name: str) -> Readiness:
        self.asked += 1
        state = self.systemd.show(self.unit)
        if not state.running:
            return Readiness(None, [], None, f"{health_path}: ConnectError: connection refused")
        running_for = self.systemd.clock.monotonic() - self.systemd.started_at.get(self.unit, -1e9)
        if self.ready_after is None or running_for < self.ready_after:
            return Readiness(503, [], None, f"{health_path} answered 503")
        return Readiness(200, [self.served_name], self.max_model_len, "ready")

    def close(self) -> None:
        pass


class FakeGpu:
    """NVML stand-in: the GPUs stay busy for ``busy_polls`` looks, then are free (None: no NVML)."""

    def __init__(self, busy_polls: int | None = 0, cuda: str | None = None) -> None:
        self.busy_polls = busy_polls
        self.looks = 0
        self.cuda = cuda  # the driver's CUDA as NVML would say it (None: no NVML)

    def used_by(self, pids: set[int]) -> int | None:
        return None

    def cuda_version(self) -> str | None:
        return self.cuda

    def busy(self, gpu_ids: Sequence[str]) -> bool | None:
        self.looks += 1
        if self.busy_polls is None:
            return None
        return self.looks <= self.busy_polls

    def devices(self, gpu_ids: Sequence[str]) -> list[Gpu] | None:
        """Each GPU asked for, with one process (pid 1) on it while busy."""
        busy = self.busy(gpu_ids)
        if busy is None:
            return None
        procs = [GpuProcess(pid=1)] if busy else []
        return [Gpu(index=i, uuid="", name="fake", processes=procs) for i, _ in enumerate(gpu_ids)]


def fake_adapters(systemd: FakeSystemd, *, podman: FakePodman | None = None, probe: FakeProbe | None = None,
                  gpu: FakeGpu | None = None, unit: str = "x", served_name: str = "m") -> Adapters:
    """The fakes as one ``Adapters`` value, as `up` and `swap` take it. mypy checks this file (``.ci/test.sh``):
    each fake must satisfy its adapter's Protocol here, so a Protocol that changes breaks the fakes at once."""
    clock = systemd.clock
    return Adapters(systemd=systemd, podman=podman or FakePodman(), probe=probe or FakeProbe(systemd, unit, served_name),
                    clock=clock, gpu=gpu or FakeGpu())


def plan_of(recipe: Recipe, *, scope: Scope = Scope.USER, findings: Sequence[Finding] = (),
            gpu_ids: Sequence[str] = (), podman: Version = DEFAULT_PODMAN, quadlet: Version | None = None) -> Plan:
    """The plan ``make_plan`` makes when preflight says ``findings``: its unit really rendered for
    ``podman`` (and ``quadlet``), pinned to ``gpu_ids``."""
    report = PreflightReport(findings=list(findings), choice=Choice(wanted=recipe.gpus.count))
    rendered = render_units(recipe, podman_version=podman, quadlet_version=quadlet, gpu_ids=list(gpu_ids),
                            scope=scope)
    return Plan(recipe, scope, report, podman, quadlet, gpu_ids=list(gpu_ids), rendered=rendered)


def small_recipe(directory: Path, name: str, *, port: int, **sections: dict[str, Any]) -> Recipe:
    """``small_recipe_file``, loaded like any recipe file."""
    return load(str(small_recipe_file(directory, name, port=port, **sections))).recipe


def small_recipe_file(directory: Path, name: str, *, port: int, **sections: dict[str, Any]) -> Path:
    """A recipe for the test engine (no GPU, its checkpoint an empty directory under ``directory``), with
    ``sections`` merged into its top-level sections (``container={"env": {...}}``)."""
    ckpt = directory / "ckpt"
    ckpt.mkdir(exist_ok=True)
    data: dict[str, Any] = {
        "name": name, "description": "a test recipe", "family": "test", "served_name": "test-model",
        "image": "localhost/x@sha256:" + "a" * 64,
        "checkpoint": {"format": "safetensors", "source": "test/fake", "path": str(ckpt), "shards": 1,
                       "total_bytes": 1000, "license": {"id": "apache-2.0"}},
        "engine": {"kind": "vllm", "port": 8000}, "context_length": 4096, "gpus": {"count": 0},
        "container": {"publish": {"port": port}, "volumes": [{"host": str(ckpt), "container": "/models/t"}]},
    }
    for key, value in sections.items():
        data[key] = {**data.get(key, {}), **value}
    path = directory / f"{name}-{len(list(directory.glob(f'{name}-*.yaml')))}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path
