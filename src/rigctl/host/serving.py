"""What a unit serves, whatever wrote it: a quadlet ``.container``, a ``.service`` running
``podman run``/``docker run`` (``podman generate systemd --new`` writes those), or a ``.service``
starting an engine on the bare host, normalized into one ServingSpec: what doctor's rules read. A Unit
works it out once (``Unit.serving``), as it does whose unit it is (``Unit.managed``) and where it listens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from rigctl.host.runargs import exec_words, parse_run
from rigctl.host.unitfile import WHITESPACE, Entry, MergedUnit
from rigctl.podman_args import RunCommand, podman_args
from rigctl.recipe.reference import repository_of

UnitKind = Literal["container", "service"]  # a quadlet .container, or any .service

Runner = Literal["quadlet", "podman", "docker", "engine"]

# Engines an ExecStart may start directly, matched on the command's words.
ENGINE_PATTERNS: dict[str, re.Pattern[str]] = {
    "vllm": re.compile(r"(^|/)vllm$|^vllm\.entrypoints"),
    "sglang": re.compile(r"^sglang\.launch_server$|(^|/)sglang$"),
    "tabbyapi": re.compile(r"tabbyapi", re.IGNORECASE),
    "llama-server": re.compile(r"(^|/)llama-server$|^llama_cpp\.server$"),
    "ollama": re.compile(r"(^|/)ollama$"),
    "text-generation-launcher": re.compile(r"(^|/)text-generation-launcher$"),
    "lmdeploy": re.compile(r"(^|/)lmdeploy$"),
    "trtllm-serve": re.compile(r"(^|/)trtllm-serve$"),
    "aphrodite": re.compile(r"(^|/)aphrodite$|^aphrodite\.endpoints"),
    "koboldcpp": re.compile(r"koboldcpp", re.IGNORECASE),
    "mistralrs-server": re.compile(r"(^|/)mistralrs-server$"),
}

# Engines recognized from an image's repository name when the command does not say.
IMAGE_ENGINES: dict[str, re.Pattern[str]] = {
    "vllm": re.compile(r"vllm", re.IGNORECASE),
    "sglang": re.compile(r"sglang", re.IGNORECASE),
    "tabbyapi": re.compile(r"tabby", re.IGNORECASE),
    "llama-server": re.compile(r"llama[.-]?cpp|llama-server", re.IGNORECASE),
    "text-generation-launcher": re.compile(r"text-generation-inference", re.IGNORECASE),
    "ollama": re.compile(r"ollama", re.IGNORECASE),
    "lmdeploy": re.compile(r"lmdeploy", re.IGNORECASE),
    "aphrodite": re.compile(r"aphrodite", re.IGNORECASE),
}

# Where each engine listens when no host/bind option is given. None: loopback or unknown.
ENGINE_BINDS_ALL_BY_DEFAULT = {"vllm", "aphrodite", "text-generation-launcher", "lmdeploy", "koboldcpp"}
ENGINE_HOST_OPTIONS = ("--host", "--hostname", "--server-name")
# Engines that require a key unless told otherwise (TabbyAPI generates api_tokens.yml on first start).
ENGINE_AUTH_BY_DEFAULT = {"tabbyapi"}

def find_engine(words: list[str] | tuple[str, ...], image: str = "") -> str | None:
    """The engine a command starts, else the one its image is named after."""
    for word in words:
        for engine, pattern in ENGINE_PATTERNS.items():
            if word and pattern.search(word):
                return engine
    repository = repository_of(image) if image else ""
    for engine, pattern in IMAGE_ENGINES.items():
        if repository and pattern.search(repository):
            return engine
    return None


@dataclass(frozen=True)
class ServingSpec:
    runner: Runner
    image: str | None = None
    image_entry: Entry | None = None
    publish: tuple[str, ...] = ()
    network: tuple[str, ...] = ()
    ipc: str | None = None
    shm_size: str | None = None
    shm_sources: tuple[str, ...] = ()  # "ShmSize=" and/or "--shm-size"
    env_names: frozenset[str] = frozenset()
    env_files: tuple[str, ...] = ()
    podman_restart: str | None = None
    removes_container: bool = False
    notify_healthy: bool = False
    engine: str | None = None
    engine_args: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    run_entry: Entry | None = None  # the ExecStart= that runs the container or engine


def _env_names(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0] for w in words if w}


def _secret_env(specs: list[str]) -> set[str]:
    names: set[str] = set()
    for spec in specs:
        parts = dict(p.split("=", 1) for p in spec.split(",")[1:] if "=" in p)
        if parts.get("type") == "env":
            names.add(parts.get("target") or spec.split(",", 1)[0])
    return names


@dataclass(frozen=True)
class _RunFields:
    publish: tuple[str, ...]
    network: tuple[str, ...]
    ipc: str | None
    shm_size: str | None
    env_names: frozenset[str]
    env_files: tuple[str, ...]
    podman_restart: str | None
    removes_container: bool
    devices: tuple[str, ...]


def _from_run(run: RunCommand, extra_env: set[str]) -> _RunFields:
    env = _env_names(run.values("-e", "--env")) | extra_env | _secret_env(run.values("--secret"))
    shm = run.values("--shm-size")
    restart = run.values("--restart")
    ipc = run.values("--ipc")
    return _RunFields(
        publish=tuple(run.values("-p", "--publish")),
        network=tuple(run.values("--network", "--net")),
        ipc=ipc[-1] if ipc else None,
        shm_size=shm[-1] if shm else None,
        env_names=frozenset(env),
        env_files=tuple(run.values("--env-file")),
        podman_restart=restart[-1] if restart else None,
        removes_container=run.has("--rm"),
        devices=tuple(run.values("--device", "--gpus")),
    )


def describe(unit: MergedUnit, kind: UnitKind) -> ServingSpec | None:
    """The ServingSpec of a unit's keys (drop-ins applied), or None for a .service that runs no container and no
    known engine."""
    return _describe_container(unit) if kind == "container" else _describe_service(unit)


def _describe_container(unit: MergedUnit) -> ServingSpec:
    args = _from_run(podman_args(unit.words("Container", "PodmanArgs")), set())
    exec_args = unit.words("Container", "Exec")
    env = set(args.env_names) | _env_names(unit.words("Container", "Environment"))
    env |= _secret_env([e.value for e in unit.all("Container", "Secret")])
    shm_key = unit.value("Container", "ShmSize")
    shm_sources = (("ShmSize=",) if shm_key else ()) + (("--shm-size",) if args.shm_size else ())
    image_entry = unit.last("Container", "Image")
    image = image_entry.value.strip(WHITESPACE) if image_entry else None  # systemd's, not str.strip()
    return ServingSpec(
        runner="quadlet",
        image=image,
        image_entry=image_entry,
        publish=tuple(unit.words("Container", "PublishPort")) + args.publish,
        network=tuple(unit.words("Container", "Network")) + args.network,
        ipc=args.ipc,
        shm_size=shm_key or args.shm_size,
        shm_sources=shm_sources,
        env_names=frozenset(env),
        env_files=tuple(e.value for e in unit.all("Container", "EnvironmentFile")) + args.env_files,
        podman_restart=args.podman_restart,
        removes_container=True,  # quadlet always runs `podman run --rm`
        notify_healthy=(unit.value("Container", "Notify") or "").lower() == "healthy",
        engine=find_engine(exec_args, image or ""),
        engine_args=tuple(exec_args),
        devices=tuple(unit.words("Container", "AddDevice")) + args.devices,
    )


def _describe_service(unit: MergedUnit) -> ServingSpec | None:
    service_env = _env_names(unit.words("Service", "Environment"))
    service_env_files = tuple(e.value.lstrip("-") for e in unit.all("Service", "EnvironmentFile"))
    for entry in unit.all("Service", "ExecStart"):
        words = exec_words(entry.value)
        run = parse_run(words)
        if run is not None:
            # `podman run -e NAME` without a value passes the service's own variable through
            args = _from_run(run, service_env)
            sdnotify = run.values("--sdnotify")
            return ServingSpec(
                runner=run.tool,
                image=run.image,
                image_entry=entry,
                publish=args.publish,
                network=args.network,
                ipc=args.ipc,
                shm_size=args.shm_size,
                shm_sources=("--shm-size",) if args.shm_size else (),
                env_names=args.env_names,
                env_files=service_env_files + args.env_files,
                podman_restart=args.podman_restart,
                removes_container=args.removes_container,
                notify_healthy=bool(sdnotify and sdnotify[-1] == "healthy"),
                engine=find_engine(run.command, run.image or ""),
                engine_args=run.command,
                devices=args.devices,
                run_entry=entry,
            )
        engine = find_engine(words)
        if engine is not None:
            return ServingSpec(
                runner="engine",
                env_names=frozenset(service_env),
                env_files=service_env_files,
                engine=engine,
                engine_args=tuple(words),
                run_entry=entry,
            )
    return None
