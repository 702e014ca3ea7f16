"""Render a recipe into quadlet units: pure, no host access, deterministic (golden-tested).

``render_units`` decides what goes into the unit (which keys the target quadlet and podman accept,
and the equivalents for older ones); the template in ``templates/container.j2`` lays it out and
escapes every value through ``rigctl.render.escape``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rigctl.errors import UsageError
from rigctl.places import ENGINE_CACHE_MOUNT, ENGINE_CACHE_SUBDIR, ENGINE_LOG_SUBDIR, Scope, quadlet_service
from rigctl.podman_args import nvidia_device
from rigctl.podman_versions import (
    CIDFILE_CLEANED,
    NOTIFY_HEALTHY,
    PODMAN_FLOOR,
    QUADLET_FIRST,
    Version,
    fmt,
    has_key,
)
from rigctl.render import escape, liveness
from rigctl.render.escape import RenderError
from rigctl.util import safefs
from rigctl.util.publish import spell_publish

__all__ = [
    "EngineProcess", "Note", "RenderedFile", "RenderedUnits", "engine_process", "gpu_devices", "health_check_cmd",
    "http_probe_code", "render_units", "write_files",
]

if TYPE_CHECKING:
    from jinja2.sandbox import SandboxedEnvironment

    from rigctl.recipe.model import Recipe


# Health check timing, as the seed image's own Dockerfile health check has it (facts.md); the start
# period is the recipe's warmup budget instead of a fixed 30 minutes.
HEALTH_INTERVAL = "30s"
HEALTH_TIMEOUT = "5s"
HEALTH_RETRIES = 5
# With Notify=healthy the unit turns active only when a health check passes, and podman's regular checks run
# HEALTH_INTERVAL apart: a warm engine would wait up to 30 s for systemd to say so (seen with podman 5.4.2,
# docs/testbed.md). A startup check every HEALTH_STARTUP_INTERVAL during warmup, handing over to the regular
# check on its first pass, makes the unit active within seconds of warmup's end. It has no retry limit
# (HealthStartupRetries unset: a failing startup check never restarts the container); the warmup budget,
# TimeoutStartSec, bounds the warmup. The startup check gates the regular one, so no HealthStartPeriod is
# rendered with it: podman counts that period from the container's start, so set to the warmup budget it
# kept an engine that hung after a short warmup from being killed for the rest of the budget (90 s of a
# 90 s budget on the podman 5 testbed; 30 min by default).
# 2s: `up` does not wait for the timer: it runs the check itself once the engine answers (deploy.warmup),
# healthy 0.18 s after the first 200 (podman 5.4.2 testbed); the interval serves restarts nobody watches. Each
# check is a podman process (0.1-0.2 s of wall time, about 60 ms of CPU), so 500ms costs a warming engine's
# box four times the checks for no gain to `up`; CI runs at 500ms had real-chain failures, not traced, that
# pass run alone, and 2s is the interval of the last CI that passed.
HEALTH_STARTUP_INTERVAL = "2s"
# podman gets this long beyond the engine's own stop timeout before systemd kills the service.

_HEALTH_PATH = re.compile(r"/[A-Za-z0-9._~/?&=%+-]*")  # nothing the check's shell would read
_GPU_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]*")


@dataclass(frozen=True)
class RenderedFile:
    name: str
    text: str


@dataclass(frozen=True)
class Note:
    """Something the operator should know about the rendered unit. ``adapted``: changed to suit the
    target podman; ``assumed``: a default filled in; ``warning``: the unit may be wrong for the host (its
    GPUs are guessed); ``info``: anything else."""

    kind: Literal["adapted", "assumed", "warning", "info"]
    message: str


@dataclass(frozen=True)
class RenderedUnits:
    recipe: str
    podman_version: Version
    quadlet_version: Version
    scope: Scope
    files: list[RenderedFile]
    notes: list[Note] = field(default_factory=list)

    @property
    def container_file(self) -> RenderedFile:
        return next(f for f in self.files if f.name.endswith(".container"))

    @property
    def service_name(self) -> str:
        """The systemd unit quadlet generates from the .container file."""
        return quadlet_service(self.container_file.name)


def _environment() -> SandboxedEnvironment:
    # jinja2 loads only to render: `status` and `down` import this module for install_dir alone
    from jinja2 import FileSystemLoader, StrictUndefined  # noqa: PLC0415
    from jinja2.sandbox import SandboxedEnvironment  # noqa: PLC0415

    from rigctl.recipe.catalog import templates_dir  # noqa: PLC0415

    env = SandboxedEnvironment(
        loader=FileSystemLoader(str(templates_dir())),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # a unit file, not HTML: escaping is the filters' job
    )
    env.filters["word"] = escape.word
    env.filters["words"] = escape.words
    env.filters["raw"] = escape.raw
    env.filters["text"] = escape.text
    return env


@dataclass(frozen=True)
class EngineProcess:
    """What the container runs and with which environment. The one source for every target (the quadlet
    unit, the Kubernetes manifests), so the engine starts the same way whichever one deploys it."""

    entrypoint: list[str] | None  # replaces the image's entrypoint; None keeps it
    args: list[str]
    env: list[tuple[str, str]]  # container.env, engine.env and what rigctl derives, checked for clashes
    notes: list[str]


def engine_process(recipe: Recipe) -> EngineProcess:
    from rigctl.render.engines import engine_line  # noqa: PLC0415 - see _environment

    line = engine_line(recipe)
    return EngineProcess(line.entrypoint, line.argv, _merge_env(recipe, line.env), line.notes)


def _merge_env(recipe: Recipe, derived: Mapping[str, str]) -> list[tuple[str, str]]:
    merged: dict[str, str] = {}
    origin: dict[str, str] = {}
    sources = (("container.env", recipe.container.env), ("engine.env", recipe.engine.env),
               ("attention_backend", derived))
    for where, values in sources:
        for name, value in values.items():
            if name in merged and merged[name] != value:
                raise RenderError(
                    f"environment {name} is {merged[name]!r} in {origin[name]} but {value!r} in {where}",
                    fix="give it one value",
                )
            merged.setdefault(name, value)
            origin.setdefault(name, where)
    for secret in recipe.container.secrets:
        if secret.env in merged:
            raise RenderError(
                f"environment {secret.env} is set both as a plain value ({origin[secret.env]}) and from "
                f"podman secret {secret.name}",
                fix=f"remove {secret.env} from {origin[secret.env]}",
            )
    return list(merged.items())


# Where each engine keeps what it compiles and tunes, under the cache mount: vLLM's own root (its torch.compile
# artifacts), torch inductor's and Triton's kernels, FlashInfer's JIT and autotune results, and XDG_CACHE_HOME
# for the rest (Hugging Face modules, cuBLAS/NCCL tuning files that follow it).
CACHE_ENV = {  # by engine.kind (the recipe model is not imported here: see _environment)
    "vllm": ("VLLM_CACHE_ROOT", "vllm"),
    "sglang": ("SGLANG_CACHE_DIR", "sglang"),
}
COMMON_CACHE_ENV = (("TORCHINDUCTOR_CACHE_DIR", "inductor"), ("TRITON_CACHE_DIR", "triton"),
                    ("FLASHINFER_WORKSPACE_BASE", "flashinfer"), ("XDG_CACHE_HOME", "xdg"))


def engine_cache_key(recipe: Recipe) -> str | None:
    """The engine cache's directory name: the image digest and the GPU it compiles for (the recipe's first
    accepted product, else its compute capability), so a new image or card starts from empty; None where
    the recipe keeps no cache (``container.engine_cache: false``, or an engine with nothing to keep)."""
    if not recipe.container.engine_cache or str(recipe.engine.kind) not in CACHE_ENV:
        return None
    gpus = recipe.gpus
    target = gpus.products[0] if gpus.products else (gpus.compute_capability[0] if gpus.compute_capability else
                                                     ("gpu" if gpus.count else "cpu"))
    slug = re.sub(r"[^a-z0-9]+", "-", target.lower())[:64].strip("-") or "gpu"
    return f"{recipe.image_digest.removeprefix('sha256:')[:16]}-{slug}"


def _cache_env(recipe: Recipe, env: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The cache variables the recipe does not set itself (a recipe's own choice wins)."""
    own = {name for name, _ in env}
    engine_var = CACHE_ENV[str(recipe.engine.kind)]
    wanted = [engine_var, *COMMON_CACHE_ENV]
    return [(name, f"{ENGINE_CACHE_MOUNT}/{sub}") for name, sub in wanted if name not in own]


def gpu_devices(recipe: Recipe, gpu_ids: Sequence[str] | None, notes: list[Note]) -> list[str]:
    """The CDI names of the GPUs the container gets (``nvidia.com/gpu=ID``), checked against the recipe."""
    count = recipe.gpus.count
    if gpu_ids is not None:
        ids = list(gpu_ids)
        source = "given GPU ids"
    elif recipe.gpus.select is not None:
        ids = list(recipe.gpus.select)
        source = "gpus.select"
    elif count > 0:
        ids = [str(i) for i in range(count)]
        notes.append(Note("assumed", (
            f"no GPU ids given: using indices {', '.join(ids)}; pass the UUIDs preflight found "
            "(--gpus GPU-...) so the unit keeps its GPUs when enumeration order changes"
        )))
        source = "indices"
    else:
        ids = []
        source = "none"
    if len(ids) != count:
        raise RenderError(
            f"the recipe needs {count} GPU(s) but {source} name {len(ids)}: {', '.join(ids) or '(none)'}",
            fix=f"give exactly {count} GPU ids (indices or UUIDs)",
        )
    if len(set(ids)) != len(ids):
        raise RenderError(f"{source} name a GPU twice: {', '.join(ids)}", fix="give each GPU once")
    for gpu in ids:
        if not _GPU_ID.fullmatch(gpu):
            raise RenderError(f"{gpu!r} is not a GPU index or UUID", fix="use e.g. 0 or GPU-5f1c...")
    return [nvidia_device(gpu) for gpu in ids]


def _volume(host: str, container: str, read_only: bool, relabel: bool) -> str:
    for path, what in ((host, "host"), (container, "container")):
        if ":" in path:
            raise RenderError(
                f"volume {what} path {path!r} contains ':', which podman's -v syntax cannot carry",
                fix="mount a path without ':' (e.g. a symlink-free parent directory)",
            )
        if "," in path:
            raise RenderError(
                f"volume {what} path {path!r} contains ',', which podman's -v options syntax cannot carry",
                fix="rename or move the directory",
            )
    options = ["ro" if read_only else "rw"]
    if relabel:
        options.append("z")
    return f"{host}:{container}:{','.join(options)}"


def _publish(recipe: Recipe) -> str:
    """The unit's PublishPort= (``util.publish``: an IPv6 address bracketed, as podman reads it)."""
    return spell_publish(recipe.publish.address, recipe.publish.port, recipe.engine.port)


def http_probe_code(port: int, path: str) -> str:
    """Python code that fails unless the engine answers GET ``path`` within 4 s. Every supported engine
    is a Python server, so python3 is in its image; curl often is not."""
    url = f"http://127.0.0.1:{port}{path}"
    return f'import urllib.request as u; u.urlopen("{url}", timeout=4)'


def health_check_cmd(port: int, path: str) -> str:
    """The container's health check: a /bin/sh command (podman runs a string check with ``/bin/sh -c``)
    that passes only when GET ``path`` answers 200 within 4 s. It picks its client in the container, each
    time, so nothing about the image has to be known beforehand: bash's /dev/tcp (no process beyond bash),
    else curl, else python3 (every supported engine has it, but its start costs most; the test engine's
    image has bash and no curl). The checks take the status line's code, not "any 2xx/3xx"."""
    if not _HEALTH_PATH.fullmatch(path):
        raise RenderError(f"engine.health_path {path!r}: the health check carries only a plain path "
                          "(letters, digits and /._~-?&=%+)", fix="give a plain path such as /health")
    url = f"http://127.0.0.1:{port}{path}"
    tcp = (f'exec 3<>/dev/tcp/127.0.0.1/{port} && printf "GET {path} HTTP/1.0\\r\\nHost: 127.0.0.1\\r\\n\\r\\n" >&3'
           ' && read -t 4 -r l <&3 && [[ $l =~ ^HTTP/[0-9.]+\\ 200[[:space:]] ]]')
    curl = f'[ "$(curl -s -m 4 -o /dev/null -w "%{{http_code}}" "{url}")" = 200 ]'
    python = f"python3 -c 'import sys, urllib.request as u; sys.exit(u.urlopen(\"{url}\", timeout=4).status != 200)'"
    return (f"if command -v bash >/dev/null; then exec bash -c '{tcp}'; "
            f"elif command -v curl >/dev/null; then {curl}; else exec {python}; fi")


@dataclass(frozen=True)
class HealthCheck:
    cmd: str
    plain: str  # /health alone: the startup check's (nothing runs during warmup, so no progress to judge)
    interval: str  # HealthInterval: HEALTH_INTERVAL, or shorter so a liveness window holds (render.liveness)
    note: Note | None
    window_s: int | None = None  # the liveness window, when the check judges progress


def _health_check(recipe: Recipe) -> HealthCheck:
    """The plain /health check, or, for an engine whose token counters show progress, the liveness check
    before it (``render.liveness``): HEALTH_RETRIES failures HealthInterval apart fit in the window."""
    plain = health_check_cmd(recipe.engine.port, recipe.engine.health_path)
    window = recipe.service.liveness_window_s
    metrics = liveness.PROGRESS_METRICS.get(str(recipe.engine.kind))
    if window == 0:
        return HealthCheck(plain, plain, HEALTH_INTERVAL, None)
    if metrics is None:
        return HealthCheck(plain, plain, HEALTH_INTERVAL, Note("info", (
            f"service.liveness_window_s: {recipe.engine.kind} has no token counter that grows while a request "
            "streams, so a hung engine is seen by /health and the canary only")))
    interval, stall = liveness.timing(window, HEALTH_RETRIES, int(HEALTH_INTERVAL.removesuffix("s")))
    prefix = liveness.liveness_prefix(recipe.engine.port, stall, metrics)
    return HealthCheck(f"{prefix}; {plain}", plain, f"{interval}s", None, window)


def render_units(
    recipe: Recipe,
    *,
    podman_version: Version,
    quadlet_version: Version | None = None,
    gpu_ids: Sequence[str] | None = None,
    labels_extra: Mapping[str, str] | None = None,
    scope: Scope = Scope.SYSTEM,
) -> RenderedUnits:
    """The quadlet units for ``recipe``.

    ``podman_version`` is the podman that will run the container; ``quadlet_version`` the generator that
    reads the unit (defaults to the same; podman < 4.4 ships none, so it must be given there).
    ``gpu_ids``: CDI device names (UUIDs preferred, indices otherwise); None falls back to
    ``recipe.gpus.select``, then to indices 0..N-1.
    """
    notes: list[Note] = []
    pv = podman_version
    if pv < PODMAN_FLOOR:
        raise RenderError(
            f"podman {fmt(pv)} is too old: rendered units need podman >= {fmt(PODMAN_FLOOR)} "
            "(for --health-on-failure)",
            fix="upgrade podman",
        )
    if quadlet_version is None:
        if pv < QUADLET_FIRST:
            raise RenderError(
                f"no quadlet generator for the {scope} manager: podman {fmt(pv)} has none of its own (quadlet arrived "
                f"in podman {fmt(QUADLET_FIRST)}) and no newer one was found or given",
                fix="upgrade podman to 4.4 or newer (5.0+ for Notify=healthy); or install a newer quadlet binary as "
                    "systemd's podman generator (this project's .ci/get-quadlet.sh takes 5.4.2 from Debian trixie): "
                    "`up` then finds it, and `rigctl render --quadlet-version 5.4` renders for it",
            )
        quadlet_version = pv
    qv = quadlet_version
    if qv < QUADLET_FIRST:
        raise RenderError(f"quadlet {fmt(qv)} does not exist: quadlet arrived in podman {fmt(QUADLET_FIRST)}",
                          fix="give the version of the podman release the quadlet binary comes from")
    if qv != pv:
        notes.append(Note("info", f"quadlet {fmt(qv)} generates the unit; podman {fmt(pv)} runs the container: "
                                  f"only `podman run` flags that {fmt(pv)} accepts are used"))

    process = engine_process(recipe)
    notes.extend(Note("info", n) for n in process.notes)
    devices = gpu_devices(recipe, gpu_ids, notes)
    container = recipe.container
    podman_args: list[list[str]] = [[f"--ipc={container.ipc}"]]

    entrypoint: str | None = None
    if process.entrypoint is not None:
        first = process.entrypoint[0]
        if first.startswith("["):
            raise RenderError(f"engine.command[0] {first!r} starts with '[', which podman reads as a JSON array",
                              fix="name the executable plainly")
        if has_key(qv, "Entrypoint"):
            entrypoint = first
        else:
            podman_args.append([f"--entrypoint={first}"])
            notes.append(Note("adapted", f"quadlet {fmt(qv)} has no Entrypoint= (5.0): using PodmanArgs=--entrypoint"))

    shm_size: str | None = None
    if container.shm_size is not None:
        if container.ipc == "host":  # the model refuses this already; never render the pair regardless
            raise RenderError("ipc host with shm_size: podman refuses the pair", fix="drop shm_size")
        if has_key(qv, "ShmSize"):
            shm_size = container.shm_size
        else:
            podman_args.append([f"--shm-size={container.shm_size}"])
            notes.append(Note("adapted", f"quadlet {fmt(qv)} has no ShmSize= (4.7): using PodmanArgs=--shm-size"))

    secrets = [f"{s.name},type=env,target={s.env}" for s in container.secrets]
    if secrets and not has_key(qv, "Secret"):
        podman_args.extend(["--secret", s] for s in secrets)
        secrets = []
        notes.append(Note("adapted", f"quadlet {fmt(qv)} has no Secret= (4.5): using PodmanArgs=--secret"))

    check = _health_check(recipe)
    if check.note is not None:
        notes.append(check.note)
    health: dict[str, Any] | None = {
        "cmd": check.cmd, "startup_cmd": check.plain, "interval": check.interval, "timeout": HEALTH_TIMEOUT,
        "start_period": f"{recipe.service.warmup_budget_s}s", "retries": HEALTH_RETRIES, "on_failure": "kill",
        "liveness_window": check.window_s,
    }
    if not has_key(qv, "HealthCmd"):
        assert health is not None
        podman_args.append([
            "--health-cmd", health["cmd"], f"--health-interval={check.interval}",
            f"--health-timeout={HEALTH_TIMEOUT}", f"--health-start-period={health['start_period']}",
            f"--health-retries={HEALTH_RETRIES}", "--health-on-failure=kill",
        ])
        health = None
        notes.append(Note("adapted", f"quadlet {fmt(qv)} has no Health* keys (4.5): using PodmanArgs=--health-*"))

    notify_healthy = qv >= NOTIFY_HEALTHY and pv >= NOTIFY_HEALTHY
    if notify_healthy and health is not None:
        health["startup_interval"] = HEALTH_STARTUP_INTERVAL
        health["start_period"] = None
    if not notify_healthy:
        notes.append(Note("adapted", (
            f"podman {fmt(min(pv, qv))} has no Notify=healthy (5.0; podman {fmt(pv)} rejects --sdnotify=healthy): "
            "systemd reports the service started when the container starts, before the engine is warm; "
            "readiness has to be polled (rigctl's warmup wait does)"
        )))

    stop_timeout: int | None = recipe.service.stop_timeout_s
    if not has_key(qv, "StopTimeout"):
        podman_args.append([f"--stop-timeout={recipe.service.stop_timeout_s}"])
        stop_timeout = None
        notes.append(Note("adapted", f"quadlet {fmt(qv)} has no StopTimeout= (5.0): using PodmanArgs=--stop-timeout"))

    podman_args.extend([arg] for arg in container.extra_podman_args)

    exec_start_pre: list[str] = []
    if pv < CIDFILE_CLEANED:
        exec_start_pre.append("-/bin/rm -f %t/%N.cid")
        notes.append(Note("adapted", (
            f"podman {fmt(pv)} leaves the --cidfile behind when the container is removed, and the next start "
            "fails on it: ExecStartPre removes a stale %t/%N.cid"
        )))

    labels = [("rigctl.managed", "true"), ("rigctl.recipe", recipe.name),
              ("rigctl.image-digest", recipe.image_digest)]
    for key, value in sorted((labels_extra or {}).items()):
        if not key or "=" in key or key != key.strip() or key in dict(labels):
            raise RenderError(f"label key {key!r} is empty, contains '=', has edge whitespace or is rigctl's own",
                              fix="use a plain key such as example.com/owner")
        labels.append((key, value))

    env = list(process.env)
    volumes = [_volume(v.host, v.container, v.read_only, v.selinux_relabel) for v in container.volumes]
    cache_key = engine_cache_key(recipe)
    if cache_key is not None:
        env += _cache_env(recipe, env)

    file_name = f"{recipe.container_name}.container"
    context: dict[str, Any] = {
        "file_name": file_name,
        "recipe_name": recipe.name,
        "podman_version": fmt(pv),
        "quadlet_version": fmt(qv),
        "description": f"rigctl: {recipe.description}",
        "image": recipe.image,
        "container_name": recipe.container_name,
        "entrypoint": entrypoint,
        "exec_args": process.args,
        "env": env,
        "secrets": secrets,
        "volumes": volumes,
        "publish": _publish(recipe),
        "devices": devices,
        "shm_size": shm_size,
        "run_init": container.init,
        "labels": labels,
        "health": health,
        "notify_healthy": notify_healthy,
        "stop_timeout": stop_timeout,
        "podman_args": podman_args,
        "engine_log_subdir": ENGINE_LOG_SUBDIR,
        "engine_cache": f"{ENGINE_CACHE_SUBDIR}/{cache_key}" if cache_key is not None else None,
        "engine_cache_mount": ENGINE_CACHE_MOUNT,
        "service": {
            "restart": recipe.service.restart,
            "restart_sec": recipe.service.restart_sec,
            "timeout_start": recipe.service.warmup_budget_s,
            "timeout_stop": recipe.service.unit_stop_timeout_s,
            "exec_start_pre": exec_start_pre,
        },
        "wanted_by": Scope(scope).boot_target,
    }
    text = _environment().get_template("container.j2").render(context)
    return RenderedUnits(recipe.name, pv, qv, scope, [RenderedFile(file_name, text)], notes)


def write_files(files: Sequence[RenderedFile], out_dir: Path) -> list[Path]:
    """Write each file atomically (``safefs``: a fresh temporary in the opened directory, renamed over
    the name there): a reader, or quadlet running mid-write, sees the old file or the new one, never
    half of one, and a link at a unit's name is replaced, never written through."""
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--out {out_dir}: not a directory", fix="give a directory to write the units into")
    try:
        directory = safefs.open_out(out_dir, create=True)
    except OSError as exc:
        raise UsageError(f"--out {out_dir}: cannot create the directory: {exc.strerror or exc}") from None
    except safefs.FileRefused as exc:  # not a directory there, or a link another user could have placed
        raise UsageError(f"--out {out_dir}: {safefs.reason_of(exc)}", fix=exc.fix) from None
    written = []
    with directory:
        for unit in files:
            directory.write_atomic(unit.name, unit.text.encode(), mode=0o644)
            written.append(Path(directory.path) / unit.name)  # where it really went, a link followed or not
    return written
