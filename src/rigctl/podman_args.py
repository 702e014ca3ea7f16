"""``podman run`` options as podman reads them: the words after ``run`` split into options (each with its
value), the image and the container's command, so that a value is never mistaken for an option (``--env -l``
is an environment variable, not a label). One reader for every place that looks at run options: a recipe's
``container.extra_podman_args`` (its model, preflight, render) and the units doctor audits (quadlet's
``PodmanArgs=``, a ``.service``'s ``podman run``: ``host.runargs``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Tool = Literal["podman", "docker"]

NVIDIA_CDI_KIND = "nvidia.com/gpu"  # the CDI kind of NVIDIA GPUs (the specs nvidia-ctk generates)


def nvidia_device(gpu: str) -> str:
    """The CDI name podman is given for one NVIDIA GPU (a UUID, an index, or ``all``): ``nvidia.com/gpu=ID``."""
    return f"{NVIDIA_CDI_KIND}={gpu}"

# podman/docker run options that take no value; every other long option takes one.
_BOOL_OPTIONS = {
    "--rm", "--detach", "--interactive", "--tty", "--init", "--privileged", "--replace", "--read-only",
    "--no-healthcheck", "--rmi", "--publish-all", "--read-only-tmpfs", "--env-host", "--no-hosts",
    "--oom-kill-disable", "--quiet", "--sig-proxy", "--http-proxy", "--disable-content-trust", "--help",
    "--passwd", "--tls-verify", "--cgroupns-host",
}
_SHORT_VALUE = set("evpwumchlaL")


@dataclass(frozen=True)
class RunCommand:
    """``podman run`` / ``docker run`` split into its options, image and container command."""

    tool: Tool
    options: tuple[tuple[str, str | None], ...]  # (--long-or-short, value)
    image: str | None
    command: tuple[str, ...]

    def values(self, *names: str) -> list[str]:
        return [v for n, v in self.options if n in names and v is not None]

    def has(self, *names: str) -> bool:
        return any(n in names for n, _ in self.options)


def parse_run_args(tool: Tool, args: list[str]) -> RunCommand:
    """The words after ``run``: options until the first word that is not one (the image)."""
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


def podman_args(words: list[str]) -> RunCommand:
    """Quadlet PodmanArgs= are run options without an image."""
    parsed = parse_run_args("podman", [*words, "IMAGE-PLACEHOLDER"])
    return RunCommand("podman", parsed.options, None, ())
