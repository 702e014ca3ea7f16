"""What a unit serves, whatever wrote it: a quadlet ``.container``, a ``.service`` running
``podman run``/``docker run`` (``podman generate systemd --new`` writes those), or a ``.service``
starting an engine on the bare host. Everything the checks need is normalized into one ServingSpec.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Literal

from rigctl.fleet.units import WHITESPACE, Entry, MergedUnit, split_words

UnitKind = Literal["container", "service"]
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

# podman/docker run options that take no value; every other long option takes one.
_BOOL_OPTIONS = {
    "--rm", "--detach", "--interactive", "--tty", "--init", "--privileged", "--replace", "--read-only",
    "--no-healthcheck", "--rmi", "--publish-all", "--read-only-tmpfs", "--env-host", "--no-hosts",
    "--oom-kill-disable", "--quiet", "--sig-proxy", "--http-proxy", "--disable-content-trust", "--help",
    "--passwd", "--tls-verify", "--cgroupns-host",
}
_SHORT_BOOL = set("ditPq")
_SHORT_VALUE = set("evpwumchlaL")
_SHELLS = {"sh", "bash", "dash", "zsh"}


@dataclass(frozen=True)
class RunCommand:
    """``podman run`` / ``docker run`` split into its options, image and container command."""

    tool: Literal["podman", "docker"]
    options: tuple[tuple[str, str | None], ...]  # (--long-or-short, value)
    image: str | None
    command: tuple[str, ...]

    def values(self, *names: str) -> list[str]:
        return [v for n, v in self.options if n in names and v is not None]

    def has(self, *names: str) -> bool:
        return any(n in names for n, _ in self.options)


def _strip_exec_prefix(word: str) -> str:
    return word.lstrip("-@:+!")


def exec_words(value: str) -> list[str]:
    """An ExecStart= value as argv, with systemd's prefixes removed, ``env`` unwrapped and
    ``sh -c "..."`` opened up."""
    words = split_words(value)
    if not words:
        return []
    words[0] = _strip_exec_prefix(words[0])
    while words and PurePosixPath(words[0]).name == "env":
        words = [w for w in words[1:] if "=" not in w or w.startswith("-")]
        words = [w for w in words if not w.startswith("-")]
    if words and PurePosixPath(words[0]).name in _SHELLS and "-c" in words:
        idx = words.index("-c")
        if idx + 1 < len(words):
            return split_words(words[idx + 1])
    return words


def parse_run(words: list[str]) -> RunCommand | None:
    """Find ``podman|docker [global opts] run|create ...`` in argv and parse it."""
    for i, word in enumerate(words):
        tool = PurePosixPath(word).name
        if tool not in ("podman", "docker"):
            continue
        j = i + 1
        while j < len(words) and words[j].startswith("-"):
            j += 1 if "=" in words[j] or j + 1 >= len(words) else 2  # global options carry values
        if j < len(words) and words[j] in ("run", "create"):
            return _parse_run_args(tool, words[j + 1 :])  # type: ignore[arg-type]
        if j + 1 < len(words) and words[j] == "container" and words[j + 1] in ("run", "create"):
            return _parse_run_args(tool, words[j + 2 :])  # type: ignore[arg-type]
    return None


def _parse_run_args(tool: Literal["podman", "docker"], args: list[str]) -> RunCommand:
    options: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg.startswith("--"):
            name, eq, value = arg.partition("=")
            if eq:
                options.append((name, value))
            elif name in _BOOL_OPTIONS:
                options.append((name, None))
            else:
                options.append((name, args[i + 1] if i + 1 < len(args) else None))
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            letters = arg[1:]
            for k, letter in enumerate(letters):
                if letter in _SHORT_VALUE:
                    rest = letters[k + 1 :].lstrip("=")
                    if rest:
                        options.append((f"-{letter}", rest))
                    else:
                        options.append((f"-{letter}", args[i + 1] if i + 1 < len(args) else None))
                        i += 1
                    break
                options.append((f"-{letter}", None))
        else:
            break
        i += 1
    image = args[i] if i < len(args) else None
    return RunCommand(tool, tuple(options), image, tuple(args[i + 1 :]))


def _podman_args(words: list[str]) -> RunCommand:
    """Quadlet PodmanArgs= are run options without an image."""
    parsed = _parse_run_args("podman", [*words, "IMAGE-PLACEHOLDER"])
    return RunCommand("podman", parsed.options, None, ())


def find_engine(words: list[str] | tuple[str, ...], image: str = "") -> str | None:
    """The engine a command starts, else the one its image is named after."""
    for word in words:
        for engine, pattern in ENGINE_PATTERNS.items():
            if word and pattern.search(word):
                return engine
    repository = image.split("@", 1)[0].rsplit(":", 1)[0] if image else ""
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
    labels: dict[str, str] = field(default_factory=dict)
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


def _labels(words: list[str]) -> dict[str, str]:
    pairs = (w.partition("=") for w in words if w)
    return {k: v for k, _, v in pairs}


@dataclass(frozen=True)
class _RunFields:
    publish: tuple[str, ...]
    network: tuple[str, ...]
    ipc: str | None
    shm_size: str | None
    env_names: frozenset[str]
    env_files: tuple[str, ...]
    labels: dict[str, str]
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
        labels=_labels(run.values("-l", "--label")),
        podman_restart=restart[-1] if restart else None,
        removes_container=run.has("--rm"),
        devices=tuple(run.values("--device", "--gpus")),
    )


def describe(kind: UnitKind, unit: MergedUnit) -> ServingSpec | None:
    """The ServingSpec of a unit, or None for a .service that runs no container and no known engine."""
    if kind == "container":
        return _describe_container(unit)
    return _describe_service(unit)


def _describe_container(unit: MergedUnit) -> ServingSpec:
    args = _from_run(_podman_args(unit.words("Container", "PodmanArgs")), set())
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
        labels={**args.labels, **_labels(unit.words("Container", "Label"))},
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
                labels=args.labels,
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
