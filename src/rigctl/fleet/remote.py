"""Commands on several hosts over ssh: ``fleet status|doctor|preflight|swap`` and the ``--host`` mechanism.

The remote side needs nothing of ours: ``status`` reads podman, systemctl and nvidia-smi; ``doctor``
runs the remote ``rigctl doctor --json`` when rigctl is installed there, and otherwise ships the unit
files of the system's and the login's own directories (never another user's home), CDI specs and driver
version back (one ssh call, files separated by a random boundary) and audits them here with the same
core. ``doctor --fix`` rewrites units only through the remote rigctl (its own rules: managed units, all
or none, backups kept); without one it changes nothing on the host and only proposes patches.
``preflight`` and ``swap`` need rigctl on the host.

Hosts run in a bounded thread pool, one result per host, in inventory order. A host that cannot be
reached, times out, or answers nonsense becomes a result with ``reachable``/``error`` set; it never
stops or hides the others.

What a host answers is hostile input: ssh.capture bounds and decodes it, ``parse_answer`` is the one
place a remote rigctl's answer is judged (exactly one JSON envelope whose ``ok`` agrees with the exit
status), remote findings are checked one by one (a malformed one becomes a failing finding of its own),
and ``shown`` makes terminal control sequences in remote text visible before a person sees it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import posixpath
import re
import secrets
import shlex
import time
import typing
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from rigctl.deploy.status import FAILING, VERDICTS
from rigctl.doctor.audit import audit, serving_units
from rigctl.doctor.checkup import AppliedFix
from rigctl.doctor.fix import plan_fixes
from rigctl.doctor.host_state import DoctorFacts, snapshot_facts
from rigctl.errors import HostUnreachableError, RigctlError, UsageError
from rigctl.exitcodes import ExitCode
from rigctl.fleet.inventory import Host
from rigctl.fleet.ssh import (
    NOT_FOUND,
    SSH_UNREACHABLE,
    TIMED_OUT,
    OpenSsh,
    Transport,
    output_cut,
    remote_command,
    stream,
    unreachable,
)
from rigctl.host.cdi import CDI_DIRS, DRIVER_VERSION_FILE
from rigctl.host.unit import Unit
from rigctl.host.unitdirs import SERVICE_HINT, USERS_DIR, Root, collect, default_roots, uid_dirs
from rigctl.host.unitsnapshot import SKIP_DIRS, Skipped
from rigctl.recipe.problems import format_validation_error
from rigctl.util import safefs
from rigctl.util.proc import Completed
from rigctl.util.text import SCHEMA_VERSION, VERSION, printable

COMMANDS = ("status", "doctor", "preflight", "swap")
# what each remote-rigctl command needs after its name
_ARGS_NEEDED = {"preflight": ("RECIPE",), "swap": ("FROM", "TO")}


@dataclass
class HostResult:
    name: str
    destination: str
    ok: bool = False
    reachable: bool = True
    via: str = "ssh"  # "rigctl" when the remote rigctl answered, "ssh" when we read podman/systemctl/files
    rigctl_version: str | None = None  # what the remote rigctl's answer says it is (``note_version``); None: no answer
    elapsed_s: float = 0.0
    error: str | None = None
    summary: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class FleetResult:
    command: str
    hosts: list[HostResult]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    def to_dict(self) -> dict[str, Any]:  # reshapes on purpose: adds the counts scripts read
        return {
            "hosts": [asdict(h) for h in self.hosts],
            "elapsed_s": round(self.elapsed_s, 3),
            "counts": {
                "hosts": len(self.hosts),
                "ok": sum(1 for h in self.hosts if h.ok),
                "unreachable": sum(1 for h in self.hosts if not h.reachable),
            },
            # this rigctl's version, and the hosts whose rigctl answered with another one (or with none)
            "versions": {"local": VERSION, "skew": [h.name for h in self.hosts if version_skew(h)]},
        }


def _destination(host: Host) -> str:
    dest = f"{host.user}@{host.ssh}" if host.user else host.ssh
    return f"{dest}:{host.port}" if host.port else dest


def _unreachable(result: HostResult, done: Completed) -> HostResult:
    result.reachable = False
    detail = (done.stderr or done.stdout).strip().splitlines()
    result.error = f"unreachable: {_tail(detail[-1]) if detail else f'ssh exited {done.rc}'}"
    return result


# --- remote text shown to a person ---------------------------------------------------------------------

# Besides what ``printable`` escapes (C0, DEL, C1, the bidi overrides and marks): every other format
# character (Unicode's Cf: zero-width space and joiners, word joiner, invisible operators, BOM, the bidi
# isolates, interlinear annotation, tag characters) and the line and paragraph separators. They are
# invisible, or break a line where a reader sees none, so remote text shows them as escapes too.
_INVISIBLE = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f]"
)
FIELD_LIMIT = 1000  # one remote value on one line of a text view (a message, a path, an error)


def _escape_invisible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _visible(text: str) -> str:
    return _INVISIBLE.sub(_escape_invisible, printable(text, None))


def shown(text: str) -> str:
    """``text`` (from another host) safe to print on this terminal: every control and format character
    shown escaped (ESC -> ``\\x1b``, U+200B -> ``\\u200b``), except the newlines and tabs that lay out
    several lines of text (for the output of a remote command streamed as it is)."""
    lines = text.replace("\r\n", "\n").split("\n")
    return "\n".join("\t".join(_visible(part) for part in line.split("\t")) for line in lines)


def one_line(value: object, limit: int = FIELD_LIMIT) -> str:
    """A remote value for a text view: one line whatever it holds (a newline is shown as ``\\x0a``, so
    it can never start a line of its own, such as a forged ``== host`` block), every control and format
    character escaped, cut to ``limit`` characters."""
    text = str(value)
    text = _visible(text[: limit + 1])  # cut first: bounded work
    return text if len(text) <= limit else f"{text[: limit - 1]}…"


def _tail(text: str, limit: int = 300) -> str:
    """The end of some remote text, for an error message: one line, control characters made visible."""
    text = text.strip()
    return one_line(text if len(text) <= limit else "..." + text[-limit:], limit + 40)


# --- remote rigctl (also the `rigctl --host NAME <command>` mechanism) -------------------------------


class RemoteAnswerError(RigctlError):
    """A remote rigctl answered something that cannot be taken as an answer: bad input, exit 3."""

    exit_code = ExitCode.INVALID_INPUT
    code = "remote-answer"


_EXIT_CODES = frozenset(int(c) for c in ExitCode)


def _brief(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


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


def _one_value(text: str) -> tuple[Any, str | None]:
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
    document, problem = _one_value(stdout)
    if problem is not None:
        return None, problem
    if not isinstance(document, dict):
        return None, f"its output is a JSON {type(document).__name__}, not an object"
    version, said, ok = document.get("rigctl"), document.get("command"), document.get("ok")
    if version != SCHEMA_VERSION:
        return document, f'it is not a rigctl envelope ("rigctl" is {_brief(version)}, not "{SCHEMA_VERSION}")'
    if not isinstance(said, str) or said.split(" ", 1)[0] != command:  # "fleet status" answers "fleet"
        return document, f'its envelope is for command {_brief(said)}, not {command!r}'
    if not isinstance(ok, bool):
        return document, f'its envelope\'s "ok" is {_brief(ok)}, not true or false'
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
        return _answer_failure(host, label, self.problem, self.stderr)


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
    if version_skew(result):
        result.summary.append(f"WARN version skew: rigctl {result.rigctl_version} on {result.name}, {VERSION} "
                              "here; install the same rigctl on both")


def version_skew(result: HostResult) -> bool:
    """Whether a rigctl answered for this host, and is another version than this one."""
    return result.rigctl_version is not None and result.rigctl_version != VERSION


def _answer_failure(host: Host, label: str, problem: str | None, stderr: str) -> str:
    """One line for an answer that cannot be used, with the end of the remote stderr."""
    detail = _tail(stderr)
    return (f"the answer of `rigctl {label}` on {host.name} cannot be used: {problem}"
            + (f" (stderr: {detail})" if detail else ""))


def _program(host: Host) -> str:
    return host.rigctl or "rigctl"


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
        raise HostUnreachableError(f"{host.name} ({_destination(host)}) is unreachable: {_tail(stderr)}",
                                   fix="check `ssh` to it by hand; rigctl uses BatchMode (keys only, no prompts)")
    if rc == NOT_FOUND:
        raise RemoteRigctlMissingError(
            f"rigctl is not installed on {host.name} ({_brief(_program(host))}: command not found)",
            fix="install rigctl there, or set `rigctl:` for the host in the inventory")


REMOTE_TIMEOUT = 600.0  # `rigctl --host NAME COMMAND`, in JSON and in text: the remote command's deadline


def run_remote_rigctl(host: Host, argv: Sequence[str], *, transport: Transport | None = None,
                      timeout: float = REMOTE_TIMEOUT, allow_ssh_commands: bool = False) -> RemoteRigctl:
    """Run ``rigctl ARGV --json`` on ``host`` and return its exit status and JSON document, judged by
    ``parse_answer`` (``problem`` says what is wrong with an answer that cannot be used).

    Raises HostUnreachableError when the host cannot be reached, RemoteRigctlMissingError when rigctl is not
    installed there; a remote command that ran and failed is a normal result (its rc and document say how)."""
    ssh = transport or OpenSsh.default(allow_commands=allow_ssh_commands)
    words = [*argv] if "--json" in argv else [*argv, "--json"]
    done = ssh.run(host, remote_command([_program(host), *words]), timeout=timeout)
    _check_reached(host, done.rc, done.stderr)
    document, problem = parse_answer(done.stdout, done.rc, command=_command_word(argv), cut=output_cut(done))
    return RemoteRigctl(done.rc, document, problem, done.stderr, done)


def stream_remote_rigctl(host: Host, argv: Sequence[str], *, out: Callable[[str], None],
                         err: Callable[[str], None], transport: OpenSsh | None = None,
                         timeout: float = REMOTE_TIMEOUT, allow_ssh_commands: bool = False) -> ExitCode:
    """``rigctl ARGV`` on ``host`` in text mode: its stdout and stderr handed to ``out``/``err`` as they
    come, control sequences made visible (``shown``); returns its exit status. The remote gets no stdin
    (never this terminal's) and ``timeout`` seconds, as in JSON mode. Raises HostUnreachableError when
    the host cannot be reached or the deadline passed, RemoteRigctlMissingError when rigctl is missing
    there, RemoteAnswerError for an exit status rigctl never uses."""
    ssh = transport or OpenSsh.default(allow_commands=allow_ssh_commands)
    rc = stream(ssh.argv(host, remote_command([_program(host), *argv])),
                out=lambda text: out(shown(text)), err=lambda text: err(shown(text)), timeout=timeout)
    _check_reached(host, rc, f"timed out after {timeout:g}s" if rc == TIMED_OUT else "(see ssh's message above)")
    if rc not in _EXIT_CODES:
        raise RemoteAnswerError(f"the remote `rigctl {_command_word(argv)}` on {host.name} exited {rc}, "
                                "which is not a rigctl exit code")
    return ExitCode(rc)


# --- status ------------------------------------------------------------------------------------------


# the services fleet status lists on a host without rigctl: rigctl's, and those the unit loader reads as
# serving (a container tool or a known engine: ``SERVICE_HINT``), by their names
UNIT_NAMES = f"rigctl|{SERVICE_HINT.pattern}"


def _status_script(boundary: str, program: str = "rigctl") -> str:
    b = boundary
    status = [program, "status", "--json"]
    return "\n".join([
        f"echo '{b} host'; (hostname 2>/dev/null || uname -n)",
        f"echo '{b} podman'",
        # stdout alone is the JSON: podman 5 on a cgroup v1 host warns on stderr at every call; what it said
        # on stderr is asked for again only when it failed, on lines of their own after the status
        "if command -v podman >/dev/null 2>&1; then podman ps -a --format json 2>/dev/null; rc=$?; echo; "
        "echo \"rc=$rc\"; if [ \"$rc\" -ne 0 ]; then podman ps -a --format json 2>&1 >/dev/null | tail -n 5 | "
        "sed 's/^/err: /'; fi; else echo absent; fi",
        f"echo '{b} units'",
        "if command -v systemctl >/dev/null 2>&1; then "
        "systemctl list-units --all --type=service --plain --no-legend --no-pager 2>&1 | "
        f"grep -i -E '{UNIT_NAMES}' ; "
        "systemctl --user list-units --all --type=service --plain --no-legend --no-pager 2>/dev/null | "
        f"grep -i -E '{UNIT_NAMES}' | sed 's/^/user /'; fi",
        f"echo '{b} gpus'",
        "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=index,name,memory.used,"
        "memory.total --format=csv,noheader,nounits 2>&1; fi",
        # where rigctl is installed, its own judgement of each rigctl unit (verdict, last exit): a dead
        # model fails the host even when systemd shows the unit active, warming up again
        f"if {remote_command(['command', '-v', program])} >/dev/null 2>&1; then echo '{b} rigctl status'; "
        f"{remote_command(status)} </dev/null 2>/dev/null; rc=$?; echo; echo '{b} rigctl rc '\"$rc\"; fi",
        f"echo '{b} end'",
    ])


def _sections(text: str, boundary: str) -> dict[str, str]:
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


def _containers(section: str) -> tuple[list[dict[str, Any]], str | None]:
    if section.strip() == "absent":
        return [], "podman is not installed"
    lines = section.split("\n")
    at = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].startswith("rc=")), None)
    if at is None:
        return [], "podman ps answered no exit status"
    body, rc = "\n".join(lines[:at]), lines[at].removeprefix("rc=").strip()
    said = "\n".join(line.removeprefix("err: ") for line in lines[at + 1:] if line.startswith("err: "))
    if rc != "0":
        return [], f"podman ps failed: {(said or body).strip()[-300:]}"
    raw, problem = _one_value(body.strip() or "[]")
    if problem is not None or not isinstance(raw, list):
        return [], "podman ps answered something that is not a JSON list"
    rows = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        names, labels = item.get("Names"), item.get("Labels")
        names = names if isinstance(names, list) and names else [str(item.get("Id", ""))[:12]]
        labels = labels if isinstance(labels, dict) else {}
        rows.append({
            "name": str(names[0]),
            "image": str(item.get("Image", "")),
            "state": str(item.get("State", "")),
            "status": str(item.get("Status", "")),
            "managed": str(labels.get("rigctl.managed", "")).lower() == "true",
            "recipe": str(labels["rigctl.recipe"]) if "rigctl.recipe" in labels else None,
        })
    return rows, None


STATUS_ROWS = 2000  # containers, units or GPUs per host taken from a status answer; more is that host's failure


def _unit_rows(section: str) -> list[dict[str, Any]]:
    """``systemctl list-units --plain --no-legend`` lines (``user `` before the user manager's) as rows."""
    rows = []
    for line in section.split("\n"):
        words = line.split(None, 5) if line.startswith("user ") else ["system", *line.split(None, 4)]
        if len(words) < 5 or not words[1].endswith(".service"):
            continue  # a message of systemctl's, not a unit
        scope, unit, load, active, sub = words[:5]
        rows.append({"unit": unit, "scope": scope, "load": load, "active": active, "sub": sub,
                     "description": words[5] if len(words) > 5 else "", "rigctl": False})
    return rows


def host_status(host: Host, ssh: Transport, timeout: float) -> HostResult:
    result = HostResult(host.name, _destination(host))
    boundary = "@@rigctl-" + secrets.token_hex(6)
    done = ssh.run(host, _status_script(boundary, _program(host)), timeout=timeout)
    if unreachable(done):
        return _unreachable(result, done)
    cut = output_cut(done)
    if cut is not None:  # what is missing could be any host's failure: not an ok with fewer rows
        result.error = f"status: {cut}"
        return result
    sections = _sections(done.stdout, boundary)
    if "end" not in sections:
        result.error = f"status script did not finish (exit {done.rc}): {_tail(done.stderr)}"
        return result
    containers, podman_error = _containers(sections.get("podman", ""))
    units = _unit_rows(sections.get("units", ""))
    gpus = [[c.strip() for c in ln.split(",")] for ln in sections.get("gpus", "").split("\n") if ln.count(",") >= 3]
    if max(len(containers), len(units), len(gpus)) > STATUS_ROWS:
        result.error = f"status: the host listed more than {STATUS_ROWS} containers, units or GPUs"
        return result
    ours = {c["name"] for c in containers if c["managed"]}
    for row in units:  # a rigctl service is <container>.service (deploy.state), or says rigctl
        row["rigctl"] = row["unit"].removesuffix(".service") in ours or "rigctl" in row["unit"].lower() \
            or row["description"].lower().startswith("rigctl")
    result.data = {
        "hostname": sections.get("host", "").strip(),
        "containers": containers,
        # the unit lines as before (the JSON contract keeps a key's meaning), and each as a row
        "units": [" ".join(ln.split(None, 4)) for ln in sections.get("units", "").split("\n") if ln.strip()],
        "unit_rows": units,
        "gpus": [{"index": g[0], "name": g[1], "memory_used_mib": g[2], "memory_total_mib": g[3]} for g in gpus],
        "podman_error": podman_error,
    }
    running = [c for c in containers if c["state"] == "running"]
    down = [u for u in units if u["active"] == "failed" or (u["rigctl"] and u["active"] != "active")]
    result.summary.append(
        f"{one_line(result.data['hostname'], 100)}: {len(running)}/{len(containers)} container(s) running"
        + (f"; {podman_error}" if podman_error else "")
        + (f"; {len(gpus)} GPU(s)" if gpus else "")
        + (f"; {len(down)} serving unit(s) not running" if down else "")
    )
    for c in containers:
        mark = " (rigctl)" if c["managed"] else ""
        result.summary.append(f"  {c['state']:<9} {c['name']}{mark}  {c['image']}  {c['status']}")
    for u in units:
        if u["rigctl"] or u in down:
            mark = "FAIL" if u in down else "ok  "
            result.summary.append(f"  {mark} {u['scope']} {u['unit']}: {u['active']} ({u['sub']})")
    for g in result.data["gpus"]:
        result.summary.append(f"  gpu {g['index']} {g['name']}: {g['memory_used_mib']}/{g['memory_total_mib']} MiB")
    rigctl_ok = True
    if "rigctl status" in sections:
        rigctl_ok = _remote_status(result, host, sections)
    result.ok = (podman_error is None or podman_error == "podman is not installed") and not down and rigctl_ok
    return result


def _section_rc(sections: dict[str, str], prefix: str) -> int | None:
    """The exit status a script section header carries (``<boundary> rc 7``); None when the section never
    came (the command did not finish), -1 when it is not a number."""
    key = next((k for k in sections if k.startswith(prefix)), None)
    if key is None:
        return None
    text = key[len(prefix):]
    return int(text) if text.isdigit() else -1


def _remote_status(result: HostResult, host: Host, sections: dict[str, str]) -> bool:
    """The host's own ``rigctl status --json`` (its verdict of each rigctl unit) into ``result.data
    ["rigctl_units"]``; False when a unit does not serve (the host's status exited 7) or the answer
    cannot be understood."""
    rc = _section_rc(sections, "rigctl rc ")
    document, problem = parse_answer(sections.get("rigctl status", ""), rc if rc is not None else -1, command="status")
    if problem is None and rc not in (0, ExitCode.SERVICE_DOWN):
        problem = f"it exited {rc}"
    if problem is not None or document is None:
        result.summary.append(f"FAIL rigctl status on {host.name}: {one_line(problem or 'no answer', 300)}")
        result.data["rigctl_units"] = None
        return False
    note_version(result, document)
    services = document.get("services")
    rows: list[dict[str, Any]] = []
    for item in services if isinstance(services, list) else []:
        if not isinstance(item, dict) or len(rows) >= STATUS_ROWS:
            continue
        verdict = item.get("verdict")
        last = item.get("last_exit")

        def text(key: str, limit: int, item: dict[str, Any] = item) -> str | None:
            value = item.get(key)
            return one_line(value, limit) if value is not None else None

        rows.append({
            "unit": text("unit", 200) or "?", "scope": text("scope", 20), "recipe": text("recipe", 200),
            "verdict": verdict if isinstance(verdict, str) and verdict in VERDICTS else "unknown",
            "detail": text("verdict_detail", 300) or "", "health": text("health", 200),
            "endpoint": text("endpoint", 300),
            "last_exit": one_line(last.get("said"), 60) if isinstance(last, dict) and last.get("said") else None,
        })
    failing = [r for r in rows if r["verdict"] in FAILING]
    result.data["rigctl_units"] = rows
    for row in rows:
        mark = "FAIL" if row in failing else "ok  "
        result.summary.append(f"  {mark} rigctl {row['scope']} {row['unit']}: {row['verdict']}"
                              + (f" ({row['detail']})" if row["detail"] and row["detail"] != row["verdict"] else ""))
    down = rc == ExitCode.SERVICE_DOWN or bool(failing)
    if down:
        result.summary.append(f"FAIL {len(failing) or '?'} rigctl model(s) not serving on {host.name}")
    return not down


# --- doctor ------------------------------------------------------------------------------------------

# The directories the snapshot walks are default_roots' own, evaluated with these stand-ins, each of
# which the shell replaces with the remote login's value (``_shell_word``); ``_snapshot_roots`` turns
# what the script reports back into the same list, so the two sides cannot disagree about a directory.
# (The uid must be a number: one no login has, whose digits no literal directory holds.)
_HOME, _CONFIG, _DATA, _RUNTIME, _UID = "@HOME@", "@CONFIG@", "@DATA@", "@RUNTIME@", 4_123_456_789
_REMOTE_VALUES = {
    _HOME: '"$HOME"',
    _CONFIG: '"${XDG_CONFIG_HOME:-$HOME/.config}"',  # empty counts as unset, as in default_roots
    _DATA: '"${XDG_DATA_HOME:-$HOME/.local/share}"',
    _RUNTIME: '"$XDG_RUNTIME_DIR"',  # only inside ${XDG_RUNTIME_DIR:+...}: no runtime root without one
    str(_UID): '"$(id -u)"',
}
_STAND_IN = re.compile("(" + "|".join(re.escape(s) for s in _REMOTE_VALUES) + ")")
# Other users' homes are not walked by the snapshot: a shell cannot read a directory its owner may
# change under it without being led, by a link or a name with a newline, to a file root can read. The
# local doctor of a rigctl installed on the host reads them through safefs (no link followed out).
OTHER_HOMES_NOTE = ("other users' homes are audited only where rigctl is installed (this snapshot, taken as "
                    "root without rigctl on the host, read the system's and the login's own unit directories)")
LINK_NOT_READ = "a link: not followed by the snapshot of a host without rigctl (install rigctl there to audit it)"


def _shell_word(path: str) -> str:
    """``path`` (a Root's, with stand-ins) as one shell word: stand-ins become the remote values, the
    rest is quoted; a runtime path is no word at all when XDG_RUNTIME_DIR is unset or empty."""
    pieces = _STAND_IN.split(path)  # literal, stand-in, literal, ...
    word = "".join(_REMOTE_VALUES[p] if i % 2 else shlex.quote(p) for i, p in enumerate(pieces) if p)
    return f"${{XDG_RUNTIME_DIR:+{word}}}" if _RUNTIME in path else word


def _walk_roots(find: str) -> str:
    """The shell line that lists the unit files of default_roots for the login: the system's directories
    and its own (owned by root or by the login), followed through links as quadlet does; one inside
    another is walked only once. No other user's home (OTHER_HOMES_NOTE)."""
    own = [r.path for r in default_roots(_HOME, _RUNTIME, _UID, config=_CONFIG, data=_DATA)]
    own = [p for p in own if not any(p.startswith(q + "/") for q in own)]
    return f"for d in {' '.join(_shell_word(p) for p in own)}; do [ -d \"$d\" ] && find -L \"$d\" {find}; done"


def _meta(sections: dict[str, str]) -> dict[str, str]:
    """What the snapshot script reported about the login (``meta NAME`` sections)."""
    return {k[len("meta ") :]: v.strip() for k, v in sections.items() if k.startswith("meta ")}


def _snapshot_roots(sections: dict[str, str], files: Iterable[str] = ()) -> list[Root]:
    """The directories a snapshot came from: default_roots with the values its script reported; as root,
    each /etc/containers/systemd/users/UID among ``files`` too, as that uid's (their home is not known)."""
    meta = {k: _one_slash(v) for k, v in _meta(sections).items()}  # as the shipped paths are spelled
    uid = int(meta["uid"]) if meta.get("uid", "").isdigit() else -1
    others = {n: f"{USERS_DIR}/{n}" for n in uid_dirs(files)} if uid == 0 else None
    return default_roots(meta.get("home") or "/root", meta.get("runtime") or None, uid,
                         config=meta.get("config") or None, data=meta.get("data") or None, other_uids=others)


SNAPSHOT_FILES = 5000  # unit files and drop-ins a host without rigctl ships at most (and rigctl takes)


def _doctor_script(boundary: str, program: str, *, fix: bool = False) -> str:
    b = boundary
    doctor = [program, "doctor", *(["--fix"] if fix else []), "--json"]
    hint = SERVICE_HINT.pattern
    cdi = " ".join(f"{d}/*.yaml {d}/*.yml {d}/*.json" for d in CDI_DIRS)
    # a path with a newline in it is pruned ($nl is the pattern *<newline>*): `read` would take it for
    # several paths, the second one anything its author chose
    skip = " -o ".join(f"-name '*{d}'" for d in SKIP_DIRS)  # the directories the local snapshot skips
    find = (
        f"\\( -path \"$nl\" -prune \\) -o \\( {skip} \\) -prune -o -type f "
        "\\( -name '*.container' -o -name '*.service' -o -path '*.d/*.conf' \\) -print 2>/dev/null"
    )
    # each file: at most UNIT_LIMIT + 1 bytes (more means "too large", decided here on this side); names
    # and values go through printf, as dash's echo reads a backslash in them as an escape
    ship = f"printf '%s\\n' '{b} file '\"$f\"; head -c {safefs.UNIT_LIMIT + 1} -- \"$f\"; echo"
    # a listed file that is a link is not read; a quadlet unit or drop-in is named as not read, systemd's
    # files silently (its aliases are links; their targets are read where they are)
    link = (f"[ -L \"$f\" ] && {{ case \"$f\" in *.container|*container.d/*.conf) "
            f"printf '%s\\n' '{b} link '\"$f\";; esac; continue; }}")
    return "\n".join([
        f"if {remote_command(['command', '-v', program])} >/dev/null 2>&1; then echo '{b} via rigctl'; "
        f"{remote_command(doctor)}; rc=$?; echo; echo '{b} rc '\"$rc\"; exit 0; fi",
        f"echo '{b} via ssh'",
        f"echo '{b} meta home'; printf '%s\\n' \"$HOME\"",
        f"echo '{b} meta uid'; id -u",
        f"echo '{b} meta runtime'; printf '%s\\n' \"${{XDG_RUNTIME_DIR:-}}\"",
        f"echo '{b} meta config'; printf '%s\\n' \"${{XDG_CONFIG_HOME:-}}\"",
        f"echo '{b} meta data'; printf '%s\\n' \"${{XDG_DATA_HOME:-}}\"",
        "nl=$(printf '*\\n*')",
        "{ " + _walk_roots(find) + "; "
        "} | { n=0; while IFS= read -r f; do "
        f"{link}; "
        f"case \"$f\" in *.service) grep -q -i -E {shlex.quote(hint)} -- \"$f\" 2>/dev/null || continue;; esac; "
        f"n=$((n+1)); if [ \"$n\" -gt {SNAPSHOT_FILES} ]; then echo '{b} too many'; break; fi; "
        f"{ship}; done; }}",
        f"for f in {DRIVER_VERSION_FILE} {cdi}; do [ -f \"$f\" ] && {{ {ship}; }}; done",
        f"echo '{b} end'",
    ])


def _plain_path(path: str) -> bool:
    """Whether a shipped path is absolute and spelled as it normalises: no ``..`` nor ``.`` in it, so it
    is under the root it names (a path that leaves its root is refused, never audited or patched)."""
    return path.startswith("/") and posixpath.normpath(path) == path and not path.startswith("//")


PATH_REFUSED = "its path leaves its directory ('..' or '.' in it): refused, neither audited nor patched"


def _snapshot_files(sections: dict[str, str]) -> tuple[dict[str, str], list[Skipped]]:
    """The files a snapshot shipped back, and those it did not take: too large (the script sends one byte
    more than the limit of any file that has more), a link, or a path that is not plain (PATH_REFUSED:
    a host's failure)."""
    files: dict[str, str] = {}
    skipped: list[Skipped] = []
    for key, body in sections.items():
        if key.startswith(("file ", "link ")) and not _plain_path(_one_slash(key[len("file ") :])):
            skipped.append(Skipped(_one_slash(key[len("file ") :]), PATH_REFUSED))
            continue
        if key.startswith("file "):
            path = _one_slash(key[len("file ") :])
            # the script adds a newline after each file; splitting on lines already dropped it
            if len(body.encode()) > safefs.UNIT_LIMIT:
                skipped.append(Skipped(path, f"more than the {safefs.format_size(safefs.UNIT_LIMIT)} "
                                             "rigctl reads from such a file"))
            else:
                files[path] = body
        elif key.startswith("link "):
            skipped.append(Skipped(_one_slash(key[len("link ") :]), LINK_NOT_READ))
    return files, skipped


def _one_slash(path: str) -> str:
    """A shipped path as the roots spell it: find prints "$HOME"/.config with $HOME's trailing slash."""
    return re.sub("/{2,}", "/", path)


class _RemoteFinding(BaseModel):
    """One finding of a remote ``rigctl doctor --json`` (doctor.unit_findings.UnitFinding.to_dict), checked
    strictly: a remote host's answer is never trusted to have the shape the views rely on."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    unit: str
    id: str
    severity: Literal["fail", "warn", "info"]
    message: str
    fix: str = ""
    where: str | None = None
    line: int | None = Field(default=None, ge=1)
    managed: bool = False
    autofix: bool = False


class _RemoteError(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    message: str


def _strict_model(shape: type) -> type[BaseModel]:
    """The strict pydantic model of the dataclass ``shape`` (what a local rigctl writes): its fields, types and
    defaults, read from a remote host's JSON as every remote part is: strictly (no value coerced into another
    type), unknown keys ignored (a newer rigctl may say more). One shape serves both ends."""
    hints = typing.get_type_hints(shape)
    fields: dict[str, Any] = {}
    for f in dataclasses.fields(shape):
        if f.default is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], f.default)
        elif f.default_factory is not dataclasses.MISSING:
            fields[f.name] = (hints[f.name], Field(default_factory=f.default_factory))
        else:
            fields[f.name] = (hints[f.name], ...)
    model: type[BaseModel] = create_model(f"Remote{shape.__name__}", __module__=__name__,
                                          __config__=ConfigDict(strict=True, extra="ignore", frozen=True), **fields)
    return model


# One unit a remote ``doctor --fix`` rewrote: doctor.checkup.AppliedFix itself (an older rigctl says nothing of
# what the manager holds after the fix: those fields have their defaults)
_RemoteApplied = _strict_model(AppliedFix)


class _RemotePatch(BaseModel):
    """One unit a remote ``doctor --fix`` left alone, with the patch it proposes and why."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    unit: str
    fixed: list[str]
    patch: str
    why: str | None = None


class _RemoteFix(BaseModel):
    """The ``fix`` part of a remote ``doctor --fix`` document; its lists are checked one by one."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    applied: list[Any]
    patches: list[Any]
    error: str | None = None
    restart: bool = False  # whether --restart was asked (an older rigctl does not say: it had none)
    remaining: list[Any] | None = None  # missing: malformed (what is left after --fix is not known)


class _RemoteDoctor(BaseModel):
    """The rest of a remote doctor document; findings are checked one by one (``_findings``)."""

    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)

    findings: list[Any] = Field(default_factory=list)
    units: list[str] = Field(default_factory=list)
    driver_version: str | None = None
    counts: dict[str, int] | None = None
    error: _RemoteError | None = None
    fix: _RemoteFix | None = None


def _malformed(host: Host, what: str, problems: Sequence[str]) -> dict[str, Any]:
    """A failing finding standing for something the remote host answered that has the wrong shape."""
    return {
        "unit": f"(answer of {host.name})", "id": "remote-malformed-answer", "severity": "fail",
        "message": f"remote answered a malformed {what}: {'; '.join(problems)[:500]}",
        "fix": f"check the rigctl installed on {host.name} (`rigctl:` in the hosts file): it must be a "
               "rigctl whose `doctor --json` matches this one's",
        "where": None, "line": None, "managed": False, "autofix": False,
    }


def _each(host: Host, model: type[BaseModel], what: str, path: str,
          raw: list[Any]) -> list[tuple[bool, dict[str, Any]]]:
    """Each item of a remote list checked against ``model``, in order: (True, the item) when it is sound,
    (False, a failing finding that says what is wrong with it) when not."""
    out: list[tuple[bool, dict[str, Any]]] = []
    for i, item in enumerate(raw):
        try:
            out.append((True, model.model_validate(item).model_dump()))
        except ValidationError as exc:
            out.append((False, _malformed(host, f"{what} (#{i + 1})", format_validation_error(f"{path}.{i}", exc))))
    return out


def _findings(host: Host, raw: list[Any]) -> list[dict[str, Any]]:
    """Each remote finding checked; a malformed one becomes a failing finding of its own, in its place."""
    return [item for _, item in _each(host, _RemoteFinding, "finding", "findings", raw)]


def _checked(host: Host, model: type[BaseModel], what: str, raw: list[Any]) -> tuple[list[dict[str, Any]],
                                                                                      list[dict[str, Any]]]:
    """Each item of a remote ``fix`` list checked: (the good ones, a failing finding for each malformed one)."""
    checked = _each(host, model, what, f"fix.{what}", raw)
    return [item for ok, item in checked if ok], [item for ok, item in checked if not ok]


PATCH_LINES = 400  # lines of one remote patch shown in the text view (the JSON keeps it whole)


def _patch_lines(patch: str) -> list[str]:
    """A remote patch for the text view: split on newlines only (systemd's and diff's line rule, not
    ``str.splitlines``, which also breaks at \\x0b, \\x1c, U+2028...), each line one line, at most
    PATCH_LINES of them."""
    lines = patch.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    shown_lines = ["  " + one_line(ln) for ln in lines[:PATCH_LINES]]
    if len(lines) > PATCH_LINES:
        shown_lines.append(f"  ... {len(lines) - PATCH_LINES} more line(s) (all of it in --json)")
    return shown_lines


def fix_lines(fix: dict[str, Any]) -> list[str]:
    """What ``doctor --fix`` did on a host (``HostResult.data["fix"]``), as lines for the text view, each
    remote value on one line, escaped and capped (``one_line``)."""
    lines: list[str] = []
    if fix.get("error"):
        lines.append(f"--fix changed nothing: {one_line(fix['error'])}")
    for applied in fix["applied"]:
        lines.append(f"fixed {one_line(applied['unit'])} ({one_line(', '.join(applied['fixed']))}); "
                     f"backup: {one_line(', '.join(applied['backups']))}")
        lines += _patch_lines(applied["patch"])
        if applied.get("in_effect") is True:
            lines.append(f"in effect: {one_line(applied.get('service') or applied['unit'])} reloaded and read back")
        if applied.get("problem"):
            lines.append(f"{'NOT in effect' if applied.get('in_effect') is False else 'note'}: "
                         f"{one_line(applied['problem'])}")
        lines += [f"run on the host: {one_line(step)}" for step in applied.get("next_steps") or []]
    for patch in fix["patches"]:
        lines.append(f"left untouched: {one_line(patch['unit'])} ({one_line(patch.get('why') or 'not applied')}); "
                     f"proposed patch ({one_line(', '.join(patch['fixed']))}):")
        lines += _patch_lines(patch["patch"])
    remaining = fix.get("remaining")
    if isinstance(remaining, list):
        lines.append(f"after --fix: {sum(1 for f in remaining if f.get('severity') == 'fail')} failing finding(s) "
                     "remain")
    return lines


def _remote_fix(host: Host, fix: _RemoteFix | None) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The checked ``fix`` part of a remote ``doctor --fix`` answer, and a failing finding for each part
    that has the wrong shape (a missing ``fix`` is one: the host did not say what it changed)."""
    if fix is None:
        return None, [_malformed(host, "doctor --fix report", ["fix: missing: the host did not say what it changed"])]
    applied, bad_applied = _checked(host, _RemoteApplied, "applied", fix.applied)
    patches, bad_patches = _checked(host, _RemotePatch, "patches", fix.patches)
    if fix.remaining is None:
        missing = _malformed(host, "doctor --fix report", ["fix.remaining: missing: the host did not say what "
                                                           "failing findings remain"])
        return ({"applied": applied, "patches": patches, "error": fix.error, "restart": fix.restart,
                 "remaining": [missing]},
                [*bad_applied, *bad_patches, missing])
    remaining, bad_remaining = _checked(host, _RemoteFinding, "remaining", fix.remaining)
    # a malformed remaining finding fails among the remaining ones too: what is left is not known
    return ({"applied": applied, "patches": patches, "error": fix.error, "restart": fix.restart,
             "remaining": remaining + bad_remaining},
            bad_applied + bad_patches + bad_remaining)


def _remote_doctor(result: HostResult, host: Host, sections: dict[str, str], stderr: str, *, fix: bool) -> None:
    """Fill ``result`` from what the remote ``rigctl doctor [--fix] --json`` answered (in ``sections``)."""
    result.via = "rigctl"
    label = "doctor --fix --json" if fix else "doctor --json"
    rc = _section_rc(sections, "rc ")
    document, problem = parse_answer(sections.get("via rigctl", ""), rc if rc is not None else -1, command="doctor")
    if problem is None and rc is None:
        problem = "it did not finish"
    if problem is not None:
        result.error = _answer_failure(host, label, problem, stderr)
        return
    assert document is not None  # parse_answer returns one when there is no problem
    note_version(result, document)
    try:
        report = _RemoteDoctor.model_validate(document)
    except ValidationError as exc:
        result.findings = [_malformed(host, "doctor report", format_validation_error("doctor", exc))]
        return
    result.findings = _findings(host, report.findings)
    result.data = {"units": report.units, "driver_version": report.driver_version, "counts": report.counts}
    if report.error is not None:
        result.error = report.error.message
    # after --fix, what remains decides; the findings stay what the host found before it
    judged = result.findings
    if fix:
        checked, malformed = _remote_fix(host, report.fix)
        result.findings += malformed
        if checked is not None:
            result.data["fix"] = checked
            judged = checked["remaining"] + malformed
        else:
            judged = result.findings
    result.ok = bool(document["ok"]) and not any(f["severity"] == "fail" for f in judged)


def _no_remote_fix(host: Host, units: Sequence[Unit], facts: DoctorFacts) -> dict[str, Any]:
    """--fix on a host without rigctl: nothing is changed there; the patches rigctl would apply are
    proposed, made here from the files the snapshot shipped."""
    why = (f"rigctl is not installed on {host.name} ({_brief(_program(host))} not found): --fix rewrites units "
           "only through rigctl on the host itself, so nothing was changed there")
    patches = [{"unit": p.unit.path, "fixed": list(p.fixed), "patch": p.patch(),
                "why": "not changed: rigctl is not installed on the host; apply by hand or install rigctl"}
               for p in plan_fixes(units, facts)]
    return {"applied": [], "patches": patches, "error": why, "restart": False, "remaining": None}


def host_doctor(host: Host, ssh: Transport, timeout: float, *, fix: bool = False) -> HostResult:
    """``rigctl doctor`` on ``host`` (through the remote rigctl, else a snapshot audited here); with
    ``fix``, ``doctor --fix`` through the remote rigctl, and on a host without one nothing changed."""
    result = HostResult(host.name, _destination(host))
    boundary = "@@rigctl-" + secrets.token_hex(6)
    done = ssh.run(host, _doctor_script(boundary, _program(host), fix=fix), timeout=timeout)
    if unreachable(done):
        return _unreachable(result, done)
    cut = output_cut(done)
    if cut is not None:
        result.error = f"doctor: {cut}"
        return result
    sections = _sections(done.stdout, boundary)
    if "via rigctl" in sections:
        _remote_doctor(result, host, sections, done.stderr, fix=fix)
    else:
        if "end" not in sections:
            result.error = f"doctor snapshot did not finish (exit {done.rc}): {_tail(done.stderr)}"
            return result
        if "too many" in sections or sum(1 for k in sections if k.startswith("file ")) > SNAPSHOT_FILES:
            result.error = (f"doctor: the host has more than {SNAPSHOT_FILES} unit files and drop-ins to ship; "
                            "not audited (install rigctl there: its own doctor reads them)")
            return result
        files, skipped = _snapshot_files(sections)
        refused = [s.path for s in skipped if s.reason == PATH_REFUSED]
        driver_text = files.pop(DRIVER_VERSION_FILE, "")
        cdi = {p: files.pop(p) for p in sorted(files) if p.startswith(tuple(d + "/" for d in CDI_DIRS))}
        units = serving_units(collect(files, _snapshot_roots(sections, files)))
        facts = snapshot_facts(driver_text, cdi)
        found = audit(units, facts)
        result.findings = [f.model_dump(mode="json") for f in found]
        if refused:
            result.findings.append(_malformed(host, "snapshot", [
                f"{len(refused)} path(s) that leave their directory (with '..' or '.'), refused: "
                + ", ".join(one_line(r, 200) for r in refused[:3])]))
        result.data = {"units": [u.path for u in units], "driver_version": facts.driver_version,
                       "skipped": [asdict(s) for s in skipped]}
        result.ok = not any(f.fails for f in found) and not refused
        if fix:
            result.data["fix"] = _no_remote_fix(host, units, facts)
        if _meta(sections).get("uid") == "0":
            result.summary.append(OTHER_HOMES_NOTE)
        if skipped:
            result.summary.append(f"{len(skipped)} file(s) not read: " + "; ".join(
                shown(f"{s.path}: {s.reason}") for s in skipped[:5]))
    fails = sum(1 for f in result.findings if f.get("severity") == "fail")
    warns = sum(1 for f in result.findings if f.get("severity") == "warn")
    units_seen = result.data.get("units") or []
    fixed = result.data.get("fix")
    result.summary.append(f"{len(units_seen)} serving unit(s); {fails} fail, {warns} warn"
                          + (" (before --fix)" if fixed else ""))
    return result


# --- preflight ---------------------------------------------------------------------------------------


def host_rigctl(host: Host, ssh: Transport, timeout: float, argv: Sequence[str]) -> HostResult:
    """``rigctl ARGV --json`` on the host (needs rigctl installed there): its document, failed or warned
    findings/checks and swap steps as summary lines."""
    label = " ".join(argv)
    result = HostResult(host.name, _destination(host), via="rigctl")
    try:
        # "--": a recipe name is never read as an option by the remote rigctl, whatever it starts with
        remote = run_remote_rigctl(host, [argv[0], "--json", "--", *argv[1:]], transport=ssh, timeout=timeout)
    except RigctlError as err:
        result.reachable = not isinstance(err, HostUnreachableError)
        result.error = err.message
        return result
    if remote.document is not None:
        result.data = remote.document  # kept even when it cannot be used: it shows what the host said
    if remote.problem is not None or remote.document is None:
        result.error = remote.failure(host, label)
        return result
    note_version(result, remote.document)
    error = remote.document.get("error")
    if isinstance(error, dict):
        result.error = one_line(error.get("message"))
    failing = 0
    for key in ("findings", "checks"):
        items = remote.document.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and item.get("severity") in ("fail", "warn"):
                    mark = str(item["severity"]).upper()
                    failing += mark == "FAIL"
                    what = f"{one_line(item.get('id'), 200)}: {one_line(item.get('message', ''))}"
                    result.summary.append(f"{mark} {what}")
    steps = remote.document.get("steps")
    if isinstance(steps, list):
        for step in steps:
            if isinstance(step, dict):
                mark = "ok  " if step.get("ok") is True else "FAIL"  # a swap's history: not its verdict
                result.summary.append(f"{mark} {one_line(step.get('step'), 200)}: {one_line(step.get('message', ''))}")
    # rigctl decides from what the answer lists: an ok:true over failing checks is not believed
    result.ok = remote.ok and failing == 0 and not isinstance(error, dict)
    if remote.ok and not result.ok:
        result.summary.append(f"FAIL {host.name} answered ok but lists {failing} failing check(s)"
                              + (" and an error" if isinstance(error, dict) else "") + ": counted as failed")
    outcome = remote.document.get("outcome")
    verdict = one_line(outcome, 100) if isinstance(outcome, str) else ("ok" if result.ok else "FAILED")
    result.summary.insert(0, f"{label}: {verdict} (exit {remote.rc})")
    return result


# --- the runner --------------------------------------------------------------------------------------


RESULT_DEPTH = ANSWER_DEPTH + 8  # a host's result: its answer, and the few levels HostResult adds around it


def _reportable(result: HostResult) -> HostResult:
    """``result``, or when it is past what can be reported (too deep or large, a number JSON cannot carry;
    checked without recursing) a failure of that host saying so: never the loss of the others' results."""
    try:
        problem = answer_problem(asdict(result), depth=RESULT_DEPTH)
    except RecursionError:
        problem = f"it is nested more than {RESULT_DEPTH} deep"
    if problem is None:
        return result
    return HostResult(result.name, result.destination, reachable=result.reachable, via=result.via,
                      error=f"{result.name}'s result cannot be reported: {problem}")


def run_fleet(command: str, hosts: Sequence[Host], *, parallel: int = 16, timeout: float = 60.0,
              extra: Sequence[str] = (), transport: Transport | None = None, fix: bool = False,
              allow_ssh_commands: bool = False) -> FleetResult:
    if command not in COMMANDS:
        raise UsageError(f"unknown fleet command {command!r}; one of {', '.join(COMMANDS)}")
    if fix and command != "doctor":
        raise UsageError(f"--fix goes with fleet doctor, not fleet {command}")
    needed = _ARGS_NEEDED.get(command, ())
    if len(extra) < len(needed):
        raise UsageError(f"fleet {command} needs {' '.join(needed)}")
    ssh = transport or OpenSsh.default(allow_commands=allow_ssh_commands)
    job: Callable[[Host], HostResult]
    if command == "status":
        def job(h: Host) -> HostResult:
            return host_status(h, ssh, timeout)
    elif command == "doctor":
        def job(h: Host) -> HostResult:
            return host_doctor(h, ssh, timeout, fix=fix)
    else:
        def job(h: Host) -> HostResult:
            return host_rigctl(h, ssh, timeout, [command, *extra])

    def guarded(host: Host) -> HostResult:
        start = time.monotonic()
        try:
            result = job(host)
        except Exception as exc:  # one host's surprise must not hide the others; report it on that host
            result = HostResult(host.name, _destination(host), error=f"{type(exc).__name__}: {one_line(exc, 300)}")
        result = _reportable(result)
        result.elapsed_s = round(time.monotonic() - start, 3)  # as the JSON shows it
        return result

    start = time.monotonic()
    if not hosts:
        return FleetResult(command, [], 0.0)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        results = list(pool.map(guarded, hosts))
    return FleetResult(command, results, time.monotonic() - start)
