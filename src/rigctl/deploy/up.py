"""`rigctl up`: execute a plan. Atomic install -> daemon-reload -> start -> warmup -> smoke and repetition.

The plan (``plan.plan``: preflight, the GPUs, the rendered unit) is made before, by ``plan_here``; ``up``
holds the deployment's lock (``state.deployment_lock``), ``plan_and_up`` holds it around both. This module
owns the sequencing, the waiting and the safety: all-or-nothing installs, a unit that dies in warmup is
stopped rather than left to restart-loop on the GPUs, and an honest account of what state Ctrl-C left
behind. systemd, podman, the HTTP probe and the clock come in as ``Adapters``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rigctl.adapters import Adapters
from rigctl.adapters.podman import PodmanCli
from rigctl.deploy import engine_cache, history
from rigctl.deploy import state as records
from rigctl.deploy.install import install_files, installed_texts, remove_files
from rigctl.deploy.memory import after_boot
from rigctl.deploy.memory import view as memory_view
from rigctl.deploy.state import deployment_lock
from rigctl.deploy.warmup import (
    OutputFollower,
    WaitResult,
    WaitStatus,
    Warming,
    WarmupProgress,
    death_detail,
    wait_ready,
)
from rigctl.errors import DeployError, InvalidInputError
from rigctl.exitcodes import ExitCode
from rigctl.host.early import EarlyProbes
from rigctl.host.facts import MemoryReceipt
from rigctl.host.gather import facts_for_recipe
from rigctl.host.probes import probe_ports
from rigctl.host.receipts import record_receipt
from rigctl.invocation import named_dir
from rigctl.places import USER_UNIT_SUBDIR, Dirs, Scope, quadlet_file, quadlet_service
from rigctl.plan.plan import Plan, make_plan, notes_dict
from rigctl.podman_versions import fmt
from rigctl.preflight.finding import Finding
from rigctl.recipe.model import Recipe
from rigctl.render.units import Note, engine_cache_key
from rigctl.util.jsonable import jsonable
from rigctl.util.proc import run
from rigctl.verify.report import CheckResult, Expectations, VerifyReport, endpoint_for
from rigctl.verify.runner import run_checks
from rigctl.verify.signatures import SignatureMatch, match_signatures

VERIFY_CHECKS = ("health", "models", "smoke", "repetition")  # what `up` proves once the engine is ready


class UpInterrupted(DeployError):
    """Ctrl-C during `up`; the message says exactly what is installed and running."""

    exit_code = ExitCode.INTERRUPTED
    code = "interrupted"


@dataclass
class ChecksOutcome:
    ok: bool
    results: list[CheckResult]


@dataclass
class UpOptions:
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
    action: str = ""  # installed | replaced | unchanged | restarted | started | attached | refused
    message: str = ""
    unit_dir: str = ""
    unit_files: list[str] = field(default_factory=list)
    gpu_ids: list[str] = field(default_factory=list)
    preflight: list[Finding] = field(default_factory=list)
    render_notes: list[Note] = field(default_factory=list)
    wait: WaitResult | None = None
    signatures: list[SignatureMatch] = field(default_factory=list)
    checks: ChecksOutcome | None = None
    max_model_len_warning: str | None = None
    restarts: int = 0
    stopped_after_failure: bool = False
    other_scope: str | None = None  # the plan's: why the other manager could run it here (the CLI's hint)
    memory: dict[str, Any] | None = None  # the plan against the boot's receipt (deploy.memory.after_boot)

    @property
    def memory_warning(self) -> str | None:
        said = (self.memory or {}).get("disagrees")
        return f"the engine's start-up figures are outside the memory plan's margin: {said}" if said else None

    @classmethod
    def begin(cls, recipe: Recipe, scope: Scope, dirs: Dirs) -> UpResult:
        """Nothing done yet: a failure until proven otherwise."""
        return cls(recipe=recipe.name, scope=scope, unit="", container=recipe.container_name,
                   endpoint=recipe.base_url, served_name=recipe.served_name, image=recipe.image, ok=False,
                   exit_code=ExitCode.DEPLOY_FAILED, unit_dir=str(dirs.units))

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: the wait as scripts read it, warnings as a list
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
            "unit_files": self.unit_files, "gpu_ids": self.gpu_ids,
            "preflight": jsonable(self.preflight),
            "render_notes": notes_dict(self.render_notes), "wait": wait,
            "signatures": [asdict(s) for s in self.signatures],
            "checks": None if self.checks is None else {
                "ok": self.checks.ok, "results": jsonable(self.checks.results)},
            "warnings": [w for w in [self.max_model_len_warning, self.memory_warning] if w],
            "memory": None if self.memory is None else memory_view(self.memory),
            "restarts": self.restarts, "stopped_after_failure": self.stopped_after_failure,
        }


def plan_here(recipe: Recipe, scope: Scope, *, force: Sequence[str] = (), gpus: Sequence[str] | None = None,
              inventory: str | None = None, early: EarlyProbes | None = None) -> Plan:
    """This host's facts for ``recipe``, gathered once (or a captured ``inventory``'s), and the plan made
    on them; ``early``: probes the caller started (``host.early.probes_started``). Ctrl-C here has changed
    nothing, and says so."""
    try:
        facts = facts_for_recipe(recipe, inventory, scope=scope, early=early)
        return make_plan(recipe, facts, scope=scope, force=force, gpus=gpus)
    except KeyboardInterrupt:
        raise UpInterrupted("interrupted during preflight/render: nothing was installed or changed") from None


def plan_and_up(
    recipe: Recipe,
    scope: Scope,
    *,
    recipe_source: str,
    adapters: Adapters,
    dirs: Dirs,
    options: UpOptions,
    force: Sequence[str] = (),
    gpus: Sequence[str] | None = None,
    early: EarlyProbes | None = None,
    around: Callable[[Plan], contextlib.AbstractContextManager[object]] | None = None,
    on_progress: Callable[[WarmupProgress], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    lock_dir: Path | None = None,
) -> UpResult:
    """`rigctl up`: this host's plan (``plan_here``) made and carried out (``up``) under one hold of the
    deployment's lock, so that what is installed is what was judged; ``around(plan)`` (the CLI's pause of the
    deployment's canary) is held around ``up`` when the plan passed."""
    with deployment_lock(recipe.name, f"up {recipe.name}", lock_dir):
        if on_stage is not None:
            on_stage("preflight")
        plan = plan_here(recipe, scope, force=force, gpus=gpus, early=early)
        with around(plan) if around is not None and plan.ok else contextlib.nullcontext():
            return _up(plan, recipe_source=recipe_source, adapters=adapters, dirs=dirs, options=options,
                       on_progress=on_progress, on_stage=on_stage)  # ``up`` without a second take of the held lock


def up(
    plan: Plan,
    *,
    recipe_source: str,
    adapters: Adapters,
    dirs: Dirs,
    options: UpOptions,
    on_progress: Callable[[WarmupProgress], None] | None = None,
    on_stage: Callable[[str], None] | None = None,
    lock_dir: Path | None = None,
) -> UpResult:
    """Carry ``plan`` out, holding the deployment's lock (``state.deployment_lock``; LockHeldError when
    another command holds it): refused (exit 1) when its preflight failed, nothing touched; a unit that cannot
    be installed as planned is an error (exit 3); otherwise the unit's outcome (``install_and_start``)."""
    with deployment_lock(plan.recipe.name, f"up {plan.recipe.name}", lock_dir):
        return _up(plan, recipe_source=recipe_source, adapters=adapters, dirs=dirs, options=options,
                   on_progress=on_progress, on_stage=on_stage)


def _up(
    plan: Plan, *, recipe_source: str, adapters: Adapters, dirs: Dirs, options: UpOptions,
    on_progress: Callable[[WarmupProgress], None] | None, on_stage: Callable[[str], None] | None,
) -> UpResult:
    recipe = plan.recipe
    result = UpResult.begin(recipe, plan.scope, dirs)
    result.preflight = list(plan.report.findings)
    result.other_scope = plan.report.other_scope
    result.gpu_ids = list(plan.gpu_ids)
    if not plan.report.ok:
        result.action = "refused"
        result.exit_code = ExitCode.CHECKS_FAILED
        result.message = "preflight failed: nothing was installed or started"
        return result
    problem = plan.install_problem()
    if problem is not None:
        raise problem
    assert plan.rendered is not None  # install_problem says why when it is not
    if plan.scope is Scope.USER:
        elsewhere = generator_reads(adapters.systemd.manager_environment())
        if elsewhere is not None and os.path.normpath(elsewhere) != os.path.normpath(dirs.units):
            raise DeployError(
                f"the user manager's quadlet generator reads {elsewhere}, but this shell's environment "
                f"installs into {dirs.units}: the unit would never be generated; nothing was installed",
                fix=f"run it with the manager's XDG_CONFIG_HOME/HOME (`systemctl --user show-environment`), or "
                    f"tell the manager yours: `systemctl --user set-environment "
                    f"XDG_CONFIG_HOME={dirs.units.parent.parent}` and run up again")
    result.render_notes = list(plan.rendered.notes)
    if on_stage is not None:
        on_stage(f"render (podman {fmt(plan.podman_version)})")
    files = {f.name: f.text for f in plan.rendered.files}
    planned_on = None if plan.facts is None else records.planned_host(plan.facts, recipe.image_digest)
    return install_and_start(recipe, files, result, recipe_source=recipe_source, quadlet=plan.quadlet_path,
                             adapters=adapters, dirs=dirs, options=options, on_progress=on_progress,
                             on_stage=on_stage, planned_on=planned_on)


def install_and_start(
    recipe: Recipe, files: dict[str, str], result: UpResult, *, recipe_source: str, quadlet: str | None,
    adapters: Adapters, dirs: Dirs, options: UpOptions, on_progress: Callable[[WarmupProgress], None] | None = None,
    on_stage: Callable[[str], None] | None = None, planned_on: records.PlannedHost | None = None,
) -> UpResult:
    """Install ``files`` (name -> text) and bring their unit to ready and verified. Identical files are
    left alone, and a healthy unit then is too (``unchanged``); `swap` restores a unit through here.
    ``planned_on``: the host facts the plan was made on, kept in the record (None: none kept)."""
    def stage(text: str) -> None:
        if on_stage is not None:
            on_stage(text)

    result.unit = unit_name_for(files)
    result.unit_files = [str(dirs.units / name) for name in files]
    checks = EarlyChecks(recipe) if options.verify else None
    result = _install_and_run(recipe=recipe, recipe_source=recipe_source, files=files, result=result,
                              quadlet=quadlet, adapters=adapters, dirs=dirs, options=options, stage=stage,
                              on_progress=on_progress, checks=checks, planned_on=planned_on)
    if result.ok and checks is not None:
        stage("verify: smoke and repetition")
        _verify(recipe, result, checks.report())
    return result


class EarlyChecks:
    """`up`'s verification, begun in a thread as soon as the engine answers ready: with Notify=healthy, systemd
    says active 0.3 s later at best (podman's check, then its READY), and the checks took 0.2 s on the test
    engine; on podman < 5 the unit is active by then and the checks run as before, only in a thread. Their
    report counts only if the wait ends ready."""

    def __init__(self, recipe: Recipe) -> None:
        self._recipe = recipe
        self._thread: threading.Thread | None = None
        self._report: VerifyReport | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="up-verify", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        try:
            self._report = run_checks(endpoint_for(self._recipe), Expectations.from_recipe(self._recipe),
                                      VERIFY_CHECKS)
        except BaseException as exc:  # handed to the caller of report()
            self._error = exc

    def report(self) -> VerifyReport:
        self.start()
        assert self._thread is not None
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._report is not None
        return self._report


def generator_reads(env: Mapping[str, str] | None) -> str | None:
    """The user directory quadlet's user generator reads, under the manager's own environment:
    $XDG_CONFIG_HOME/containers/systemd, else $HOME/.config/containers/systemd; None when it cannot be told."""
    config = named_dir(env, "XDG_CONFIG_HOME") if env is not None else None
    return str(config / USER_UNIT_SUBDIR) if config is not None else None


def unit_name_for(files: dict[str, str]) -> str:
    containers = [name for name in files if name.endswith(".container")]
    if len(containers) != 1:
        raise DeployError(f"the renderer produced {len(containers)} .container files ({sorted(files)}); expected 1")
    return quadlet_service(containers[0])


def quadlet_diagnosis(quadlet: str | None, unit_dir: Path, scope: Scope) -> tuple[bool, str]:
    """Ask the quadlet binary systemd runs (the one the host facts found) why it generated nothing:
    (whether it rejects the files in ``unit_dir``, what it said)."""
    if quadlet is None:
        return True, "no quadlet generator found (podman >= 4.4 ships it as /usr/libexec/podman/quadlet)"
    argv = [quadlet, "-dryrun", *(["-user"] if scope is Scope.USER else [])]
    done = run(argv, env={**os.environ, "QUADLET_UNIT_DIRS": str(unit_dir)}, timeout=30.0)
    lines = [ln for ln in (done.stderr or "").splitlines() if ln.strip()]
    if done.ok and not any("unsupported" in ln or "error" in ln.lower() for ln in lines):
        return False, (f"`QUADLET_UNIT_DIRS={unit_dir} {' '.join(argv)}` accepts the unit: the manager's generator "
                       f"does not read {unit_dir}")
    return True, "\n".join(lines[-8:]) or f"`{' '.join(argv)}` gave no diagnosis"


def _install_and_run(
    *, recipe: Recipe, recipe_source: str, files: dict[str, str], result: UpResult, quadlet: str | None,
    adapters: Adapters, dirs: Dirs, options: UpOptions, stage: Callable[[str], None],
    on_progress: Callable[[WarmupProgress], None] | None, checks: EarlyChecks | None = None,
    planned_on: records.PlannedHost | None = None,
) -> UpResult:
    systemd, clock = adapters.systemd, adapters.clock
    unit = result.unit
    before = systemd.show(unit)
    old_container = adapters.podman.container(recipe.container_name) if before.active != "inactive" else None
    started = False
    new_files = [name for name in files if not os.path.lexists(dirs.units / name)]
    new_record = not os.path.lexists(records.record_path(dirs.state, recipe.name))
    try:
        stage("install")
        installed = install_files(dirs.units, files)
        record = records.DeploymentRecord(
            recipe=recipe.name, scope=result.scope, unit=unit, container=recipe.container_name,
            unit_dir=str(dirs.units), unit_files=sorted(files), endpoint=result.endpoint,
            served_name=recipe.served_name, image=recipe.image, gpu_ids=result.gpu_ids,
            health_path=recipe.engine.health_path, warmup_budget_s=recipe.service.warmup_budget_s,
            recipe_source=os.path.abspath(recipe_source), installed_at=clock.time(),
            # the recipe as deployed: the canary, `verify NAME` and `swap` re-check it from here, wherever the
            # command runs and whatever became of the file since
            recipe_sha256=records.file_sha256(recipe_source), recipe_deployed=recipe.model_dump(mode="json"),
            engine_cache=engine_cache_key(recipe) or "",
            planned_on=planned_on,
        )
        records.save(dirs.state, record)
        if installed.changed or before.load != "loaded":
            stage("daemon-reload")
            systemd.daemon_reload()
            loaded = systemd.show(unit)
            if loaded.load != "loaded":
                rejected, said = quadlet_diagnosis(quadlet, dirs.units, result.scope)
                if before.load != "loaded":  # nothing of ours ran: take back what this up put there
                    removed = remove_files(dirs.units, new_files)
                    if new_record:
                        records.delete(dirs.state, recipe.name)
                    if removed:
                        said += f"\n(removed what this up installed: {', '.join(str(p) for p in removed)})"
                container = dirs.units / quadlet_file(unit)
                if rejected:
                    raise DeployError(f"systemd has no {unit} after daemon-reload: the quadlet generator rejected "
                                      f"{container}:\n{said}",
                                      fix="fix the recipe (or report a renderer bug); `rigctl render` shows the unit")
                raise DeployError(f"systemd has no {unit} after daemon-reload, though quadlet accepts {container}:\n"
                                  f"{said}", fix=f"check where the {result.scope} manager's generator looks: "
                                                 f"`systemctl{' --user' if result.scope is Scope.USER else ''} "
                                                 "show-environment` (XDG_CONFIG_HOME, HOME)")
        healthy = before.running and adapters.probe.check(
            result.endpoint, recipe.engine.health_path, recipe.served_name).ready_for(recipe.served_name)
        if not installed.changed and healthy:
            result.action = "unchanged"
            result.restarts = before.restarts
            wait: WaitResult | None = None
        elif not installed.changed and before.active in ("active", "activating") and not before.restart_pending:
            # Same unit, still warming up (an earlier `up` was interrupted, or systemd restarted it):
            # watch it rather than throw the warmup away.
            result.action = "attached"
            stage(f"attach to {unit} (warming up)")
            started = True
            wait = _watch(recipe=recipe, result=result, adapters=adapters, start_mono=clock.monotonic(),
                          baseline=before.restarts, skip_id=None, on_progress=on_progress,
                          learn=(dirs.state, _recipe_digest(files)), checks=checks)
        else:
            if before.active not in ("inactive", "failed"):
                stage(f"stop {unit} (unit changed)" if installed.changed else f"stop {unit} (not healthy)")
                systemd.stop(unit, wait=True, timeout=recipe.service.stop_wait_s)
                result.action = "replaced" if installed.changed else "restarted"
            else:
                result.action = "installed" if installed.changed else "started"
            systemd.reset_failed(unit)
            baseline = systemd.show(unit).restarts
            cache_path = _cache_path(recipe, result.scope, systemd)
            cache = engine_cache.warmth(cache_path)
            start_mono = clock.monotonic()
            stage(f"start {unit}")
            systemd.start(unit)
            started = True
            wait = _watch(recipe=recipe, result=result, adapters=adapters, start_mono=start_mono, baseline=baseline,
                          skip_id=old_container.id if old_container else None, on_progress=on_progress,
                          learn=(dirs.state, _recipe_digest(files)), checks=checks, cache=cache,
                          cache_dir=cache_path)
    except KeyboardInterrupt:
        raise UpInterrupted(_interrupted_state(files, dirs.units, unit, started)) from None

    result.wait = wait
    if wait is not None and wait.status is not WaitStatus.READY:
        return _failed_warmup(recipe, result, wait, record, adapters=adapters, dirs=dirs, options=options)
    changed = False
    if wait is not None and wait.engine_log and record.engine_log != wait.engine_log:
        # where the engine's output goes: `logs` reads it once no container is left (the record this up
        # wrote, under the deployment's lock: nobody else has written it since)
        record.engine_log = wait.engine_log
        changed = True
    if wait is not None:
        result.memory = _memory_receipt(recipe, result, wait, clock.time())
        if result.memory is not None:
            record.memory = result.memory
            changed = True
    if changed:
        records.save(dirs.state, record)
    if wait is not None and wait.readiness is not None and wait.readiness.max_model_len not in (None,
                                                                                             recipe.context_length):
        result.max_model_len_warning = (
            f"/v1/models reports max_model_len {wait.readiness.max_model_len}, the recipe says "
            f"{recipe.context_length}: the engine may have clipped the context")
    if wait is not None and wait.unit is not None:
        result.restarts = wait.unit.restarts
    result.ok = True
    result.exit_code = ExitCode.OK
    result.message = f"{recipe.served_name} ready at {result.endpoint}"
    return result


def _memory_receipt(recipe: Recipe, result: UpResult, wait: WaitResult, now: float) -> dict[str, Any] | None:
    """The plan against what the engine said at start-up, for the record; the receipt is also kept for the
    host's next plan of the same settings, image and GPU (a store that cannot be written never fails `up`)."""
    memory = after_boot(result.preflight, wait.receipt, at=now)
    planned = (memory or {}).get("planned")
    got = wait.receipt
    if memory is None or planned is None or got is None or got.empty or got.kv_available_bytes is None \
            or not planned.get("gpu_product"):
        return memory
    with contextlib.suppress(OSError, InvalidInputError, ValueError):
        record_receipt(MemoryReceipt(
            recipe=recipe.name, key=planned["receipt_key"], image=recipe.image, gpu_product=planned["gpu_product"],
            at=dt.datetime.fromtimestamp(now, dt.UTC).isoformat(timespec="seconds"), engine=got.engine or "",
            engine_version=got.engine_version, kv_available_bytes=got.kv_available_bytes,
            weights_bytes=got.weights_bytes, kv_tokens=got.kv_tokens, max_concurrency=got.max_concurrency,
            graphs_bytes=got.graphs_bytes, planned_kv_budget_low=planned.get("kv_budget_low_bytes"),
            planned_kv_budget_high=planned.get("kv_budget_high_bytes"),
            planned_weights_bytes=planned.get("weights_high_bytes")))
    return memory


def _recipe_digest(files: Mapping[str, str]) -> str:
    """What "the same recipe" means for the boot history: the unit files it renders to."""
    digest = hashlib.sha256()
    for name in sorted(files):
        digest.update(f"{name}\0{files[name]}\0".encode())
    return "sha256:" + digest.hexdigest()


def _watch(
    *, recipe: Recipe, result: UpResult, adapters: Adapters, start_mono: float, baseline: int, skip_id: str | None,
    on_progress: Callable[[WarmupProgress], None] | None, learn: tuple[Path, str] | None = None,
    checks: EarlyChecks | None = None, cache: str | None = None, cache_dir: Path | None = None,
) -> WaitResult:
    """Wait through warmup. With ``learn`` (the state directory and the recipe's digest): a stall is judged
    against the earlier ready boots of this recipe and image, and this boot is added to them."""
    budget = None
    if learn is not None:
        budget = history.budgets(history.boots(learn[0], recipe.name), learn[1], recipe.image)
    follower = OutputFollower(adapters.podman, recipe.container_name, adapters.clock, skip_id=skip_id,
                              health_path=recipe.engine.health_path)
    follower.start()
    try:
        warming = Warming(
            unit=result.unit, container=recipe.container_name, base_url=result.endpoint,
            health_path=recipe.engine.health_path, served_name=recipe.served_name,
            warmup_budget_s=recipe.service.warmup_budget_s, stall_budget_s=recipe.service.stall_budget_s,
            baseline_restarts=baseline, start_mono=start_mono, budget=budget, cache_dir=cache_dir,
        )
        wait = wait_ready(warming, systemd=adapters.systemd, probe=adapters.probe, follower=follower,
                          clock=adapters.clock, on_progress=on_progress,
                          check_now=_health_check_now(adapters, recipe.container_name),
                          on_answer=checks.start if checks is not None else None)
    finally:
        follower.stop()
    wait.engine_log = follower.log_path
    wait.receipt = follower.receipt()
    if learn is not None and wait.status is not WaitStatus.STOPPED:
        _record_boot(recipe, wait=wait, follower=follower, adapters=adapters, learn=learn, start_mono=start_mono,
                     cache=cache)
    return wait


def _cache_path(recipe: Recipe, scope: Scope, systemd: Any) -> Path | None:
    """The engine cache the unit mounts (%C of the manager that runs it): whether a start finds it warm
    goes into the boot history, and its growth counts as warmup progress."""
    env = systemd.manager_environment() if scope is Scope.USER and recipe.container.engine_cache else None
    return engine_cache.cache_dir(recipe, scope, env)


def _health_check_now(adapters: Adapters, container: str) -> Callable[[], object] | None:
    """`podman healthcheck run CONTAINER`: the check podman's timer would run next, run now (see
    ``warmup.CHECK_AGAIN_S``). Only with the real podman; its outcome reaches systemd through podman."""
    podman = adapters.podman
    if not isinstance(podman, PodmanCli):
        return None
    return lambda: run([podman.binary, "healthcheck", "run", "--", container], timeout=10.0)


def _record_boot(
    recipe: Recipe, *, wait: WaitResult, follower: OutputFollower, adapters: Adapters, learn: tuple[Path, str],
    start_mono: float, cache: str | None = None,
) -> None:
    """Add this boot to the deployment's history; a history that cannot be written never fails the `up`."""
    end = wait.noticed_mono or adapters.clock.monotonic()
    info = None
    if wait.status is WaitStatus.READY:
        # the container the wait followed was inspected when it attached: its image digest is known already
        info = follower.info if follower.info is not None and follower.info.image_digest else \
            adapters.podman.container(recipe.container_name)
    boot = history.Boot(
        at=adapters.clock.time(), recipe_digest=learn[1], image=recipe.image, status=str(wait.status),
        total_s=max(0.0, end - start_mono), phases=tuple(follower.phase_durations(start_mono, end)),
        image_digest=info.image_digest if info is not None else None, cache=cache,
    )
    try:
        history.record_boot(learn[0], recipe.name, boot)
    except (OSError, InvalidInputError):
        return


def _failed_warmup(
    recipe: Recipe, result: UpResult, wait: WaitResult, record: records.DeploymentRecord, *, adapters: Adapters,
    dirs: Dirs, options: UpOptions,
) -> UpResult:
    tail = wait.tail or adapters.podman.logs(recipe.container_name, tail=40)
    wait.tail = tail
    if wait.status is WaitStatus.DIED and wait.exit_status is None:
        # Noticed before systemd had the status: ask podman (the container awaits cleanup) or systemd again.
        info = adapters.podman.container(recipe.container_name)
        later = adapters.systemd.show(result.unit)
        code = info.exit_code if info is not None and not info.running else later.exit_status
        if code is not None:
            wait.exit_status = code
            wait.detail = death_detail(code)
    if wait.status is WaitStatus.DIED and wait.exit_status in PODMAN_EXITS and not tail:
        wait.detail = podman_failure(recipe, wait.exit_status, adapters, result.scope, result.unit)
    result.signatures = match_signatures(recipe.known_issues.signatures, tail, first_only=True)
    result.exit_code = ExitCode.DEPLOY_FAILED
    result.ok = False
    if wait.unit is not None:
        result.restarts = wait.unit.restarts
    if wait.status is not WaitStatus.STOPPED and not options.keep_failed:
        # A deterministic warmup crash under Restart=always would loop on the GPUs forever. Stopped to the
        # end, then its failed state reset: a stop that lands on a restarted container still starting fails
        # the unit itself (podman run exits 143 or 137), and `status` would then say "failed" or "down"
        # for the same crash depending on that timing; the crash is in the record either way.
        adapters.systemd.stop(result.unit, wait=True, timeout=recipe.service.stop_wait_s)
        adapters.systemd.reset_failed(result.unit)
        result.stopped_after_failure = True
    result.message = f"{wait.status}: {wait.detail}"
    record.engine_log = wait.engine_log or record.engine_log  # one write with the failure, not two
    record.last_failure = {
        "at": adapters.clock.time(), "status": str(wait.status), "detail": wait.detail,
        "exit_status": wait.exit_status, "phase": wait.phase, "last_lines": tail,
        "signatures": [s.id for s in result.signatures],
    }
    records.save(dirs.state, record)
    return result


# podman run's own exit codes (podman-run(1)): the container, and so the engine, never ran
PODMAN_EXITS = {125: "podman itself failed", 126: "the container's command could not be run",
                127: "the container's command was not found"}


def podman_failure(recipe: Recipe, code: int, adapters: Adapters, scope: Scope, unit: str) -> str:
    """What an exit of podman's own (125, 126, 127) with no container output means: named as podman's, with
    the likely cause looked up (the image missing, the port taken) and where podman's words are."""
    said = f"podman exited {code} ({PODMAN_EXITS[code]}): the engine never ran"
    present = adapters.podman.image_present(recipe.image)
    if present is False:
        return f"{said}; image {recipe.image} is not present: `podman pull {recipe.image}`"
    pub = recipe.publish
    holder = probe_ports(owners_of=[pub.port]).holder(pub.port, pub.address)
    if holder is not None:
        who = f"PID {holder.pid} {holder.process or ''}".strip() if holder.pid else "a process not visible here"
        return (f"{said}; {pub.address}:{pub.port} is taken by {who} (listening on {holder.address}:"
                f"{holder.port}): stop it, or publish elsewhere (--set container.publish.port=N)")
    user = " --user" if scope is Scope.USER else ""
    return f"{said}; podman's error is in `journalctl{user} -u {unit} -n 20`"


def _verify(recipe: Recipe, result: UpResult, report: VerifyReport) -> None:
    """Smoke and repetition against the ready endpoint (``report``); a failure leaves the service running (it
    is up, but wrong) and says so with exit 1."""
    result.checks = ChecksOutcome(ok=report.ok, results=list(report.checks))
    if not report.ok:
        result.ok = False
        result.exit_code = ExitCode.CHECKS_FAILED
        result.signatures = match_signatures(recipe.known_issues.signatures, [c.message for c in report.checks],
                                             first_only=True)
        result.message = (f"{recipe.served_name} is serving at {result.endpoint} but failed verification; "
                          "the service was left running")


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
