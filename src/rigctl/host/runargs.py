"""``podman run`` / ``docker run`` command lines as a ``.service``'s ``ExecStart=`` carries them (``podman
generate systemd --new`` writes those): the argv systemd runs (its prefixes, ``env`` and ``sh -c`` opened
up) and the run command found in it, whose options ``rigctl.podman_args`` reads as podman does.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from rigctl.host.unitfile import split_words
from rigctl.podman_args import RunCommand, parse_run_args

_SHELLS = {"sh", "bash", "dash", "zsh"}


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
