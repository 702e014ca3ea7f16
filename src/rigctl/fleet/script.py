"""The shell scripts fleet status and fleet doctor send to a host answer in sections, each headed by a
line ``<boundary> NAME`` whose boundary is new for every call (so no file or output the host holds can
forge a header)."""

from __future__ import annotations

import secrets
from collections.abc import Callable

from rigctl.fleet.inventory import Host
from rigctl.fleet.result import HostResult
from rigctl.fleet.ssh import Transport, output_cut, unreachable
from rigctl.util.proc import Completed


def new_boundary() -> str:
    """A section boundary no host can have guessed."""
    return "@@rigctl-" + secrets.token_hex(6)


def run_script(host: Host, ssh: Transport, timeout: float, label: str,
               script: Callable[[str], str]) -> tuple[HostResult, Completed, dict[str, str] | None]:
    """Send ``script(boundary)`` to ``host`` and split what it printed into sections. The sections are None
    when there is nothing to read: ``result`` then says why (unreachable, or its output cut short: what
    is missing could be any host's failure, never an ok with fewer rows)."""
    result = HostResult(host.name, host.destination)
    boundary = new_boundary()
    done = ssh.run(host, script(boundary), timeout=timeout)
    if unreachable(done):
        return result.not_reached(done), done, None
    cut = output_cut(done)
    if cut is not None:
        result.error = f"{label}: {cut}"
        return result, done, None
    return result, done, split_sections(done.stdout, boundary)


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
