"""`rigctl up`: preflight -> GPUs -> render -> atomic install -> daemon-reload -> start -> warmup -> checks.

The stages outside deploy (preflight, render, verify) come in as plain callables in ``Stages`` so that
this module owns only the sequencing, the waiting and the safety: one lock per service, all-or-nothing
installs, and an honest account of what state Ctrl-C left behind.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigctl.deploy import state as records
from rigctl.deploy.install import install_files, installed_texts
from rigctl.deploy.places import locked
from rigctl.deploy.ports import Clock, Podman, Probe, Scope, Systemd, UnitState
from rigctl.deploy.warmup import (
    OutputFollower,
    Progress,
    WaitResult,
    WaitStatus,
    WaitTarget,
    death_detail,
    wait_ready,
)
from rigctl.errors import DeployError
from rigctl.exitcodes import ExitCode
from rigctl.recipe.model import Recipe
from rigctl.util.proc import run
from rigctl.verify.report import endpoint_for
from rigctl.verify.signatures import SignatureMatch, match_signatures


class UpInterrupted(DeployError):
    """Ctrl-C during `up`; the message says exactly what is installed and running."""

    exit_code = ExitCode.INTERRUPTED
    code = "interrupted"


@dataclass
class PreflightOutcome:
    ok: bool
    findings: list[dict[str, Any]]
    gpu_ids: list[str] | None
    podman_version: str | None = None


@dataclass
class ChecksOutcome:
    ok: bool
    results: list[dict[str, Any]]
    output_lines: list[str] = field(default_factory=list)


@dataclass
class Stages:
    preflight: Callable[[Recipe, Sequence[str], str | None], PreflightOutcome]
    render: Callable[[Recipe, str, list[str] | None], dict[str, str]]  # -> file name -> text
    checks: Callable[[Recipe, str], ChecksOutcome] | None


@dataclass
class Ports:
    systemd: Systemd
    podman: Podman
    probe: Probe
    clock: Clock


@dataclass
class Places:
    unit_dir: Path
    state_dir: Path
    lock_dir: Path | None = None


@dataclass
class UpOptions:
    force: tuple[str, ...] = ()
    gpus: str | None = None
    verify: bool = True
    keep_failed: bool = False  # leave a unit that died in warmup to systemd's restarts


@dataclass
class UpResult:
    recipe: str
    scope: Scope
    unit: str
    container: str
    endpoint: str
    served_name: str
    image: str
    ok: bool
    exit_code: ExitCode
    action: str = ""  # installed | replaced | unchanged | restarted | started | refused
    message: str = ""
    unit_dir: str = ""
    unit_files: list[str] = field(default_factory=list)
    gpu_ids: list[str] = field(default_factory=list)
    preflight: list[dict[str, Any]] = field(default_factory=list)
    wait: WaitResult | None = None
    signatures: list[SignatureMatch] = field(default_factory=list)
    checks: ChecksOutcome | None = None
    max_model_len_warning: str | None = None
    restarts: int = 0
    stopped_after_failure: bool = False

    def to_dict(self) -> dict[str, Any]:
        wait = None
        if self.wait is not None:
            wait = {
                "status": str(self.wait.status), "elapsed_s": round(self.wait.elapsed_s, 3),
                "phase": self.wait.phase, "exit_status": self.wait.exit_status, "detail": self.wait.detail,
                "last_lines": self.wait.tail,
            }
        return {
            "recipe": self.recipe, "scope": str(self.scope), "unit": self.unit, "container": self.container,
            "endpoint": self.endpoint, "served_name": self.served_name, "image": self.image,
            "action": self.action, "message": self.message, "unit_dir": self.unit_dir,
            "unit_files": self.unit_files, "gpu_ids": self.gpu_ids, "preflight": self.preflight, "wait": wait,
            "signatures": [s.to_dict() for s in self.signatures],
            "checks": None if self.checks is None else {"ok": self.checks.ok, "results": self.checks.results},
            "warnings": [w for w in [self.max_model_len_warning] if w],
            "restarts": self.restarts, "stopped_after_failure": self.stopped_after_failure,
        }


def unit_name_for(files: dict[str, str]) -> str:
    containers = [name for name in files if name.endswith(".container")]
    if len(containers) != 1:
        raise DeployError(f"the renderer produced {len(containers)} .container files ({sorted(files)}); expected 1")
    return containers[0].removesuffix(".container") + ".service"


def endpoint_of(recipe: Recipe) -> str:
    return endpoint_for(recipe).base_url


def quadlet_diagnosis(unit_dir: Path, scope: Scope) -> str:
    """Ask the quadlet binary, when we can find one, why it generated nothing."""
    candidates = [os.environ.get("RIGCTL_QUADLET", ""), "/usr/libexec/podman/quadlet",
                  "/usr/local/libexec/rigctl/quadlet", shutil.which("quadlet") or ""]
    binary = next((c for c in candidates if c and os.access(c, os.X_OK)), None)
    if binary is None:
        return "no quadlet generator found (podman >= 4.4 ships it as /usr/libexec/podman/quadlet)"
    argv = [binary, "-dryrun", *(["-user"] if scope is Scope.USER else [])]
    done = run(argv, env={**os.environ, "QUADLET_UNIT_DIRS": str(unit_dir)}, timeout=30.0)
    lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
    return "\n".join(lines[-8:]) or f"`{' '.join(argv)}` gave no diagnosis"


def up(
    recipe: Recipe,
    *,
    recipe_source: str,
    scope: Scope,
    stages: Stages,
    ports: Ports,
    places: Places,
    options: UpOptions,
    on_progress: Callable[[Progress], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
) -> UpResult:
    def stage(text: str) -> None:
        if on_stage is not None:
            on_stage(text)

    result = UpResult(
        recipe=recipe.name, scope=scope, unit="", container=recipe.container_name, endpoint=endpoint_of(recipe),
        served_name=recipe.served_name, image=recipe.image, ok=False, exit_code=ExitCode.DEPLOY_FAILED,
        unit_dir=str(places.unit_dir),
    )
    with locked(recipe.name, f"up {recipe.name}", places.lock_dir):
        try:
            files = _prepare(recipe, result, stages=stages, ports=ports, places=places, options=options, stage=stage)
        except KeyboardInterrupt:
            raise UpInterrupted("interrupted during preflight/render: nothing was installed or changed") from None
        if files is None:
            return result
        result = _install_and_run(recipe=recipe, recipe_source=recipe_source, files=files, result=result, ports=ports,
                                  places=places, options=options, stage=stage, on_progress=on_progress)
        if result.ok:
            stage("verify: smoke and repetition")
        return run_checks_stage(recipe, result, stages, options)


def _prepare(
    recipe: Recipe, result: UpResult, *, stages: Stages, ports: Ports, places: Places, options: UpOptions,
    stage: Callable[[str], None],
) -> dict[str, str] | None:
    """Preflight and render; None when preflight refused (``result`` then says why)."""
    stage("preflight")
    pre = stages.preflight(recipe, options.force, options.gpus)
    result.preflight = pre.findings
    result.gpu_ids = list(pre.gpu_ids or [])
    if not pre.ok:
        result.action = "refused"
        result.exit_code = ExitCode.CHECKS_FAILED
        result.message = "preflight failed: nothing was installed or started"
        return None
    podman_version = pre.podman_version or ports.podman.version()
    stage(f"render (podman {podman_version})")
    files = stages.render(recipe, podman_version, pre.gpu_ids)
    result.unit = unit_name_for(files)
    result.unit_files = [str(places.unit_dir / name) for name in files]
    return files


def _install_and_run(
    *, recipe: Recipe, recipe_source: str, files: dict[str, str], result: UpResult, ports: Ports, places: Places,
    options: UpOptions, stage: Callable[[str], None], on_progress: Callable[[Progress], None] | None,
) -> UpResult:
    systemd, clock = ports.systemd, ports.clock
    unit = result.unit
    before = systemd.show(unit)
    old_container = ports.podman.container(recipe.container_name) if before.active != "inactive" else None
    started = False
    try:
        stage("install")
        installed = install_files(places.unit_dir, files)
        record = records.DeploymentRecord(
            recipe=recipe.name, scope=result.scope, unit=unit, container=recipe.container_name,
            unit_dir=str(places.unit_dir), unit_files=sorted(files), endpoint=result.endpoint,
            served_name=recipe.served_name, image=recipe.image, gpu_ids=result.gpu_ids,
            health_path=recipe.engine.health_path,
            recipe_source=recipe_source, installed_at=clock.time(),
        )
        records.save(places.state_dir, record)
        if installed.changed or before.load != "loaded":
            stage("daemon-reload")
            systemd.daemon_reload()
            loaded = systemd.show(unit)
            if loaded.load != "loaded":
                raise DeployError(
                    f"systemd has no {unit} after daemon-reload: the quadlet generator rejected "
                    f"{places.unit_dir / unit.removesuffix('.service')}.container:\n"
                    + quadlet_diagnosis(places.unit_dir, result.scope),
                    fix="fix the recipe (or report a renderer bug); `rigctl render` shows the unit",
                )
        healthy = before.running and ports.probe.check(
            result.endpoint, recipe.engine.health_path, recipe.served_name).ready_for(recipe.served_name)
        if not installed.changed and healthy:
            result.action = "unchanged"
            result.restarts = before.restarts
            wait: WaitResult | None = None
        elif not installed.changed and before.active in ("active", "activating") and before.sub != "auto-restart":
            # Same unit, still warming up (an earlier `up` was interrupted, or systemd restarted it):
            # watch it rather than throw the warmup away.
            result.action = "attached"
            stage(f"attach to {unit} (warming up)")
            started = True
            wait = _watch(recipe=recipe, result=result, ports=ports, start_mono=clock.monotonic(),
                          baseline=before.restarts, skip_id=None, on_progress=on_progress)
        else:
            if before.active not in ("inactive", "failed"):
                stage(f"stop {unit} (unit changed)" if installed.changed else f"stop {unit} (not healthy)")
                systemd.stop(unit, wait=True, timeout=recipe.service.stop_timeout_s + 60)
                result.action = "replaced" if installed.changed else "restarted"
            else:
                result.action = "installed" if installed.changed else "started"
            systemd.reset_failed(unit)
            baseline = systemd.show(unit).restarts
            start_mono = clock.monotonic()
            stage(f"start {unit}")
            systemd.start(unit)
            started = True
            wait = _watch(recipe=recipe, result=result, ports=ports, start_mono=start_mono, baseline=baseline,
                          skip_id=old_container.id if old_container else None, on_progress=on_progress)
    except KeyboardInterrupt:
        raise UpInterrupted(_interrupted_state(files, places.unit_dir, unit, started)) from None

    result.wait = wait
    if wait is not None and wait.status is not WaitStatus.READY:
        return _failed_warmup(recipe, result, wait, ports=ports, places=places, options=options)
    if wait is not None and wait.readiness is not None and wait.readiness.max_model_len not in (None,
                                                                                             recipe.context_length):
        result.max_model_len_warning = (
            f"/v1/models reports max_model_len {wait.readiness.max_model_len}, the recipe says "
            f"{recipe.context_length}: the engine may have clipped the context")
    if wait is not None and wait.unit is not None:
        result.restarts = wait.unit.restarts
    return _after_ready(recipe, result)


def _watch(
    *, recipe: Recipe, result: UpResult, ports: Ports, start_mono: float, baseline: int, skip_id: str | None,
    on_progress: Callable[[Progress], None] | None,
) -> WaitResult:
    follower = OutputFollower(ports.podman, recipe.container_name, ports.clock, skip_id=skip_id)
    follower.start()
    try:
        target = WaitTarget(
            unit=result.unit, container=recipe.container_name, base_url=result.endpoint,
            health_path=recipe.engine.health_path, served_name=recipe.served_name,
            warmup_budget_s=recipe.service.warmup_budget_s, stall_budget_s=recipe.service.stall_budget_s,
            baseline_restarts=baseline, start_mono=start_mono,
        )
        return wait_ready(target, systemd=ports.systemd, probe=ports.probe, follower=follower, clock=ports.clock,
                          on_progress=on_progress)
    finally:
        follower.stop()


def _failed_warmup(
    recipe: Recipe, result: UpResult, wait: WaitResult, *, ports: Ports, places: Places, options: UpOptions,
) -> UpResult:
    tail = wait.tail or ports.podman.logs(recipe.container_name, tail=40)
    wait.tail = tail
    if wait.status is WaitStatus.DIED and wait.exit_status is None:
        # Noticed before systemd had the status: ask podman (the container awaits cleanup) or systemd again.
        info = ports.podman.container(recipe.container_name)
        later = ports.systemd.show(result.unit)
        code = info.exit_code if info is not None and not info.running else later.exit_status
        if code is not None:
            wait.exit_status = code
            wait.detail = death_detail(code)
    result.signatures = match_signatures(recipe.known_issues.signatures, tail, first_only=True)
    result.exit_code = ExitCode.DEPLOY_FAILED
    result.ok = False
    if wait.unit is not None:
        result.restarts = wait.unit.restarts
    if wait.status is not WaitStatus.STOPPED and not options.keep_failed:
        # A deterministic warmup crash under Restart=always would loop on the GPUs forever.
        ports.systemd.stop(result.unit, wait=False, timeout=30)
        result.stopped_after_failure = True
    result.message = f"{wait.status}: {wait.detail}"
    record = records.load_record(places.state_dir, recipe.name)
    if record is not None:
        record.last_failure = {
            "at": ports.clock.time(), "status": str(wait.status), "detail": wait.detail,
            "exit_status": wait.exit_status, "phase": wait.phase, "last_lines": tail,
            "signatures": [s.id for s in result.signatures],
        }
        records.save(places.state_dir, record)
    return result


def _after_ready(recipe: Recipe, result: UpResult) -> UpResult:
    result.ok = True
    result.exit_code = ExitCode.OK
    result.message = f"{recipe.served_name} ready at {result.endpoint}"
    return result


def run_checks_stage(recipe: Recipe, result: UpResult, stages: Stages, options: UpOptions) -> UpResult:
    """Smoke and repetition against the ready endpoint; a failure leaves the service running (it is
    up, but wrong) and says so with exit 1."""
    if not options.verify or stages.checks is None or not result.ok:
        return result
    checks = stages.checks(recipe, result.endpoint)
    result.checks = checks
    if not checks.ok:
        result.ok = False
        result.exit_code = ExitCode.CHECKS_FAILED
        result.signatures = match_signatures(recipe.known_issues.signatures, checks.output_lines, first_only=True)
        result.message = (f"{recipe.served_name} is serving at {result.endpoint} but failed verification; "
                          "the service was left running")
    return result


def _interrupted_state(files: dict[str, str], unit_dir: Path, unit: str, started: bool) -> str:
    on_disk = installed_texts(unit_dir, list(files))
    complete = all(on_disk[name] == text for name, text in files.items())
    where = ", ".join(str(unit_dir / name) for name in files)
    if not complete:
        return f"interrupted before the unit was installed: nothing changed ({where} as before)"
    if started:
        return (f"interrupted after {unit} was started: the unit is fully installed ({where}) and systemd "
                f"keeps warming it up; `rigctl status` to watch, `rigctl down` to stop it")
    return (f"interrupted after the unit was fully installed ({where}) but before it was started; "
            f"`rigctl up` again to start it, `rigctl down --remove` to remove it")


def unit_state_summary(state: UnitState) -> dict[str, Any]:
    return {"active": state.active, "sub": state.sub, "restarts": state.restarts, "restart": state.restart_policy,
            "exit_status": state.exit_status}
