"""``podman run`` / ``docker run`` command lines as unit files carry them: quadlet's ``PodmanArgs=``, or
a ``.service``'s ``ExecStart=`` (``podman generate systemd --new`` writes those). Split into options,
image and container command the way podman reads them, so a value is never mistaken for an option
(``--env -l`` is an environment variable, not a label).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

from rigctl.host.unitfile import split_words

Tool = Literal["podman", "docker"]

# podman/docker run options that take no value; every other long option takes one.
_BOOL_OPTIONS = {
    "--rm", "--detach", "--interactive", "--tty", "--init", "--privileged", "--replace", "--read-only",
    "--no-healthcheck", "--rmi", "--publish-all", "--read-only-tmpfs", "--env-host", "--no-hosts",
    "--oom-kill-disable", "--quiet", "--sig-proxy", "--http-proxy", "--disable-content-trust", "--help",
    "--passwd", "--tls-verify", "--cgroupns-host",
}
_SHORT_VALUE = set("evpwumchlaL")
_SHELLS = {"sh", "bash", "dash", "zsh"}


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
            return parse_run_args(tool, words[j + 1 :])  # type: ignore[arg-type]
        if j + 1 < len(words) and words[j] == "container" and words[j + 1] in ("run", "create"):
            return parse_run_args(tool, words[j + 2 :])  # type: ignore[arg-type]
    return None


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
