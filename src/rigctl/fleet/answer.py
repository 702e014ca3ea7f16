"""A remote rigctl: run it over ssh (``rigctl --host NAME <command>``, and the fleet commands that need
rigctl on the host), and judge what it answered (``parse_answer``: exactly one JSON envelope whose ``ok``
agrees with the exit status, within bounds checked as it is decoded)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from rigctl.errors import HostUnreachableError, RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.fleet.inventory import Host
from rigctl.fleet.result import HostResult
from rigctl.fleet.ssh import (
    NOT_FOUND,
    SSH_UNREACHABLE,
    TIMED_OUT,
    OpenSsh,
    Transport,
    output_cut,
    remote_command,
    stream,
)
from rigctl.fleet.visible import brief, shown, tail
from rigctl.util.proc import Completed
from rigctl.util.text import SCHEMA_VERSION, VERSION


class RemoteAnswerError(RigctlError):
    """A remote rigctl answered something that cannot be taken as an answer: bad input, exit 3."""

    exit_code = ExitCode.INVALID_INPUT
    code = "remote-answer"


_EXIT_CODES = frozenset(int(c) for c in ExitCode)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # Python would accept NaN/Infinity; our JSON output could not


# What a remote answer may hold, checked as it is decoded and before anything of ours walks it (asdict,
# jsonable, json.dumps and the views all recurse): far more than any real rigctl answer, far less than
# what makes them fail. An answer past one is that host's failure.
ANSWER_DEPTH = 48  # arrays and objects inside each other
ANSWER_VALUES = 400_000  # values in all
INT_DIGITS = 19  # |n| < 10**19: every count, size, pid or timestamp rigctl reports


def _parse_int(text: str) -> int:
    if len(text) > INT_DIGITS + 1 or len(text.lstrip("-")) > INT_DIGITS:
        raise ValueError(f"a number of {len(text):,} digits is out of range")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: Python reads inf, which no strict JSON can carry on
        raise ValueError(f"{text[:40]} is out of range (not a finite number)")
    return value


def answer_problem(value: Any, *, depth: int = ANSWER_DEPTH) -> str | None:
    """Why ``value`` (decoded JSON, or a result made of it) is past the bounds, or None. Iterative: it
    never recurses itself, whatever it is given."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    count = 0
    while stack:
        item, level = stack.pop()
        count += 1
        if count > ANSWER_VALUES:
            return f"it holds more than {ANSWER_VALUES:,} values"
        if isinstance(item, dict | list | tuple):
            if level > depth:
                return f"it is nested more than {depth} deep"
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
        elif isinstance(item, float) and not math.isfinite(item):
            return "it holds a number that is not finite"
        elif isinstance(item, int) and not isinstance(item, bool) and abs(item) >= 10**INT_DIGITS:
            return "it holds a number out of range"
    return None


def one_value(text: str) -> tuple[Any, str | None]:
    """``text`` as exactly one JSON value within the bounds above, or why it is not one."""
    body = text.strip()
    if not body:
        return None, "it printed nothing on stdout"
    decoder = json.JSONDecoder(parse_constant=_refuse_constant, parse_int=_parse_int, parse_float=_parse_float)
    try:
        value, end = decoder.raw_decode(body)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError; so is a 5000-digit number
        return None, f"its output is not JSON ({str(exc)[:120] or type(exc).__name__})"
    if body[end:].strip():
        return None, "its output is more than one JSON value (or JSON followed by other text)"
    problem = answer_problem(value)
    if problem is not None:
        return None, f"its answer is past what rigctl accepts: {problem}"
    return value, None


Answer = tuple[dict[str, Any] | None, str | None]  # (the document when there is one, what is wrong or None)


def parse_answer(stdout: str, rc: int, *, command: str, cut: str | None = None) -> Answer:
    """THE judge of a remote rigctl's answer to ``rigctl COMMAND ... --json`` that exited ``rc``
    (``command``: its first word).

    Returns the document and None when stdout is exactly one envelope ``{"rigctl": "1", "command":
    COMMAND..., "ok": bool, ...}`` whose ``ok`` agrees with ``rc`` (ok exactly when rc is 0) and ``rc``
    is a rigctl exit code; otherwise what is wrong (and the document, when there is one)."""
    if cut is not None:
        return None, cut
    document, problem = one_value(stdout)
    if problem is not None:
        return None, problem
    if not isinstance(document, dict):
        return None, f"its output is a JSON {type(document).__name__}, not an object"
    version, said, ok = document.get("rigctl"), document.get("command"), document.get("ok")
    if version != SCHEMA_VERSION:
        return document, f'it is not a rigctl envelope ("rigctl" is {brief(version)}, not "{SCHEMA_VERSION}")'
    if not isinstance(said, str) or said.split(" ", 1)[0] != command:  # "fleet status" answers "fleet"
        return document, f'its envelope is for command {brief(said)}, not {command!r}'
    if not isinstance(ok, bool):
        return document, f'its envelope\'s "ok" is {brief(ok)}, not true or false'
    if ok != (rc == 0):
        return document, f"it exited {rc} but its envelope says ok:{str(ok).lower()}"
    if rc not in _EXIT_CODES:
        return document, f"it exited {rc}, which is not a rigctl exit code"
    return document, None


@dataclass(frozen=True)
class RemoteRigctl:
    rc: int
    document: dict[str, Any] | None  # the remote command's JSON envelope (when it printed one object)
    problem: str | None  # why the answer cannot be taken as is (parse_answer); None: it can
    stderr: str
    done: Completed

    @property
    def ok(self) -> bool:
        return self.problem is None and self.rc == 0

    @property
    def exit_code(self) -> ExitCode:
        """The remote exit status when the answer is understood and agrees with it; else INVALID_INPUT."""
        return ExitCode(self.rc) if self.problem is None else RemoteAnswerError.exit_code

    def failure(self, host: Host, label: str) -> str:
        return answer_failure(host, label, self.problem, self.stderr)


_VERSION_TEXT = re.compile(r"[0-9A-Za-z][0-9A-Za-z.+_-]{0,39}")
UNKNOWN_VERSION = "unknown"  # a remote rigctl that answered without saying its version (or with nonsense)


def remote_version(document: dict[str, Any]) -> str:
    """THE place a remote rigctl's version is read: the ``version`` of its JSON envelope (a rigctl from
    before envelopes carried one says none, and anything but a short version word is not believed)."""
    said = document.get("version")
    return said if isinstance(said, str) and _VERSION_TEXT.fullmatch(said) else UNKNOWN_VERSION


def note_version(result: HostResult, document: dict[str, Any]) -> None:
    """Keep the version of the rigctl that answered for this host. One other than this rigctl's is a
    summary line, so the fleet's text shows it; the JSON has it in ``rigctl_version`` and ``versions``."""
    result.rigctl_version = remote_version(document)
    if result.version_skew:
        result.summary.append(f"WARN version skew: rigctl {result.rigctl_version} on {result.name}, {VERSION} "
                              "here; install the same rigctl on both")


def answer_failure(host: Host, label: str, problem: str | None, stderr: str) -> str:
    """One line for an answer that cannot be used, with the end of the remote stderr."""
    detail = tail(stderr)
    return (f"the answer of `rigctl {label}` on {host.name} cannot be used: {problem}"
            + (f" (stderr: {detail})" if detail else ""))


def _command_word(argv: Sequence[str]) -> str:
    return next((w for w in argv if not w.startswith("-")), "?")


class RemoteRigctlMissingError(RigctlError):
    """ssh reached the host but there is no rigctl to run there: the command could not be asked either,
    so the exit code is the unreachable one; the host itself is up (``HostResult.reachable`` stays true)."""

    exit_code = ExitCode.HOST_UNREACHABLE
    code = "remote-rigctl-missing"


def _check_reached(host: Host, rc: int, stderr: str) -> None:
    """Raise when ssh could not reach the host (255, or our timeout) or the program is not there (127)."""
    if rc in (SSH_UNREACHABLE, TIMED_OUT):
        raise HostUnreachableError(f"{host.name} ({host.destination}) is unreachable: {tail(stderr)}",
                                   fix="check `ssh` to it by hand; rigctl uses BatchMode (keys only, no prompts)")
    if rc == NOT_FOUND:
        raise RemoteRigctlMissingError(
            f"rigctl is not installed on {host.name} ({brief(host.program)}: command not found)",
            fix="install rigctl there, or set `rigctl:` for the host in the inventory")


REMOTE_TIMEOUT = 600.0  # `rigctl --host NAME COMMAND`, in JSON and in text: the remote command's deadline


def run_remote_rigctl(host: Host, argv: Sequence[str], *, transport: Transport | None = None,
                      timeout: float = REMOTE_TIMEOUT, allow_ssh_options: bool = False) -> RemoteRigctl:
    """Run ``rigctl ARGV --json`` on ``host`` and return its exit status and JSON document, judged by
    ``parse_answer`` (``problem`` says what is wrong with an answer that cannot be used).

    Raises HostUnreachableError when the host cannot be reached, RemoteRigctlMissingError when rigctl is not
    installed there; a remote command that ran and failed is a normal result (its rc and document say how)."""
    ssh = transport or OpenSsh.default(allow_options=allow_ssh_options)
    words = [*argv] if "--json" in argv else [*argv, "--json"]
    done = ssh.run(host, remote_command([host.program, *words]), timeout=timeout)
    _check_reached(host, done.rc, done.stderr)
    document, problem = parse_answer(done.stdout, done.rc, command=_command_word(argv), cut=output_cut(done))
    return RemoteRigctl(done.rc, document, problem, done.stderr, done)


def stream_remote_rigctl(host: Host, argv: Sequence[str], *, out: Callable[[str], None],
                         err: Callable[[str], None], transport: OpenSsh | None = None,
                         timeout: float = REMOTE_TIMEOUT, allow_ssh_options: bool = False) -> ExitCode:
    """``rigctl ARGV`` on ``host`` in text mode: its stdout and stderr handed to ``out``/``err`` as they
    come, control sequences made visible (``shown``); returns its exit status. The remote gets no stdin
    (never this terminal's) and ``timeout`` seconds, as in JSON mode. Raises HostUnreachableError when
    the host cannot be reached or the deadline passed, RemoteRigctlMissingError when rigctl is missing
    there, RemoteAnswerError for an exit status rigctl never uses."""
    ssh = transport or OpenSsh.default(allow_options=allow_ssh_options)
    rc = stream(ssh.argv(host, remote_command([host.program, *argv])),
                out=lambda text: out(shown(text)), err=lambda text: err(shown(text)), timeout=timeout)
    _check_reached(host, rc, f"timed out after {timeout:g}s" if rc == TIMED_OUT else "(see ssh's message above)")
    if rc not in _EXIT_CODES:
        raise RemoteAnswerError(f"the remote `rigctl {_command_word(argv)}` on {host.name} exited {rc}, "
                                "which is not a rigctl exit code")
    return ExitCode(rc)
