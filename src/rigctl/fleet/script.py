"""The shell scripts fleet status and fleet doctor send to a host answer in sections, each headed by a
line ``<boundary> NAME`` whose boundary is new for every call (so no file or output the host holds can
forge a header)."""

from __future__ import annotations

import secrets


def new_boundary() -> str:
    """A section boundary no host can have guessed."""
    return "@@rigctl-" + secrets.token_hex(6)


def split_sections(text: str, boundary: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.split("\n"):  # systemd's line rule: unit text travels through here
        if line.startswith(boundary + " "):
            if current is not None:
                out[current] = "\n".join(lines)
            current, lines = line[len(boundary) + 1 :], []
        else:
            lines.append(line)
    if current is not None:
        out[current] = "\n".join(lines)
    return out


def section_rc(sections: dict[str, str], prefix: str) -> int | None:
    """The exit status a script section header carries (``<boundary> rc 7``); None when the section never
    came (the command did not finish), -1 when it is not a number."""
    key = next((k for k in sections if k.startswith(prefix)), None)
    if key is None:
        return None
    text = key[len(prefix):]
    return int(text) if text.isdigit() else -1
