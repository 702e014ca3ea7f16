"""Commands on several hosts over ssh: ``fleet status|doctor|preflight|swap`` and the ``--host`` mechanism.

The remote side needs nothing of ours: ``status`` reads podman, systemctl and nvidia-smi; ``doctor``
runs the remote ``rigctl doctor --json`` when rigctl is installed there, and otherwise ships the unit
files, CDI specs and driver version back (one ssh call, files separated by a random boundary) and
audits them here with the same core. ``preflight`` and ``swap`` need rigctl on the host.

Hosts run in a bounded thread pool, one result per host, in inventory order. A host that cannot be
reached, times out, or answers nonsense becomes a result with ``reachable``/``error`` set; it never
stops or hides the others.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from rigctl.errors import RigctlError, UsageError
from rigctl.fleet.discover import CDI_DIRS, DRIVER_VERSION_FILE, SERVICE_HINT, collect, default_roots, driver_from_proc
from rigctl.fleet.doctor import CdiSpec, DoctorFacts, audit, serving_units
from rigctl.fleet.inventory import Host
from rigctl.fleet.ssh import OpenSsh, Transport, unreachable
from rigctl.util.proc import Completed

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
    elapsed_s: float = 0.0
    error: str | None = None
    summary: list[str] = field(default_factory=list)
    findings: list[dict[str, Any]] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "destination": self.destination, "ok": self.ok, "reachable": self.reachable,
            "via": self.via, "elapsed_s": round(self.elapsed_s, 3), "error": self.error,
            "summary": self.summary, "findings": self.findings, "data": self.data,
        }


@dataclass
class FleetResult:
    command: str
    hosts: list[HostResult]
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return all(h.ok for h in self.hosts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "hosts": [h.to_dict() for h in self.hosts],
            "elapsed_s": round(self.elapsed_s, 3),
            "counts": {
                "hosts": len(self.hosts),
                "ok": sum(1 for h in self.hosts if h.ok),
                "unreachable": sum(1 for h in self.hosts if not h.reachable),
            },
        }


def _destination(host: Host) -> str:
    dest = f"{host.user}@{host.ssh}" if host.user else host.ssh
    return f"{dest}:{host.port}" if host.port else dest


def _unreachable(result: HostResult, done: Completed) -> HostResult:
    result.reachable = False
    detail = (done.stderr or done.stdout).strip().splitlines()
    result.error = f"unreachable: {detail[-1] if detail else f'ssh exited {done.rc}'}"
    return result


# --- remote rigctl (also the `rigctl --host NAME <command>` mechanism) -------------------------------


@dataclass(frozen=True)
class RemoteRigctl:
    rc: int
    document: dict[str, Any] | None  # the remote command's JSON envelope
    stderr: str
    done: Completed


def run_remote_rigctl(host: Host, argv: Sequence[str], *, transport: Transport | None = None,
                      timeout: float = 600.0) -> RemoteRigctl:
    """Run ``rigctl ARGV --json`` on ``host`` and return its exit status and JSON document.

    Raises RigctlError when the host cannot be reached or rigctl is not installed there; a remote
    command that ran and failed is a normal result (its rc and document say how)."""
    ssh = transport or OpenSsh.default()
    program = host.rigctl or "rigctl"
    words = [*argv] if "--json" in argv else [*argv, "--json"]
    command = f"{program} {shlex.join(words)}"
    done = ssh.run(host, command, timeout=timeout)
    if unreachable(done):
        raise RigctlError(f"{host.name} ({_destination(host)}) is unreachable: {done.stderr.strip()}",
                          fix="check `ssh` to it by hand; rigctl uses BatchMode (keys only, no prompts)")
    if done.rc == 127:
        raise RigctlError(f"rigctl is not installed on {host.name} (`{program}`: command not found)",
                          fix="install rigctl there, or set `rigctl:` for the host in the inventory")
    try:
        document = json.loads(done.stdout)
    except json.JSONDecodeError:
        document = None
    if not isinstance(document, dict):
        document = None
    return RemoteRigctl(done.rc, document, done.stderr, done)


def remote_argv(host: Host, argv: Sequence[str], *, transport: OpenSsh | None = None) -> list[str]:
    """The ssh command line that runs ``rigctl ARGV`` on ``host`` as is (text output, the remote exit
    status): for ``rigctl --host NAME <command>`` in text mode, exec it and let the output through."""
    ssh = transport or OpenSsh.default()
    return ssh.argv(host, f"{host.rigctl or 'rigctl'} {shlex.join(argv)}")


# --- status ------------------------------------------------------------------------------------------


def _status_script(boundary: str) -> str:
    b = boundary
    return "\n".join([
        f"echo '{b} host'; (hostname 2>/dev/null || uname -n)",
        f"echo '{b} podman'",
        "if command -v podman >/dev/null 2>&1; then podman ps -a --format json 2>&1; echo \"rc=$?\"; "
        "else echo absent; fi",
        f"echo '{b} units'",
        "if command -v systemctl >/dev/null 2>&1; then "
        "systemctl list-units --all --type=service --plain --no-legend --no-pager 2>&1 | "
        "grep -i -E 'rigctl|podman|vllm|sglang|tabby|llama|ollama' ; "
        "systemctl --user list-units --all --type=service --plain --no-legend --no-pager 2>/dev/null | "
        "grep -i -E 'rigctl|podman|vllm|sglang|tabby|llama|ollama' | sed 's/^/user /'; fi",
        f"echo '{b} gpus'",
        "if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi --query-gpu=index,name,memory.used,"
        "memory.total --format=csv,noheader,nounits 2>&1; fi",
        f"echo '{b} end'",
    ])


def _sections(text: str, boundary: str) -> dict[str, str]:
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in text.splitlines():
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
    body, _, rc = section.rpartition("rc=")
    if section.strip() == "absent":
        return [], "podman is not installed"
    if rc.strip() != "0":
        return [], f"podman ps failed: {body.strip()[-300:]}"
    try:
        raw = json.loads(body or "[]")
    except json.JSONDecodeError:
        return [], "podman ps answered something that is not JSON"
    rows = []
    for item in raw if isinstance(raw, list) else []:
        names = item.get("Names") or []
        labels = item.get("Labels") or {}
        rows.append({
            "name": names[0] if names else item.get("Id", "")[:12],
            "image": item.get("Image", ""),
            "state": item.get("State", ""),
            "status": item.get("Status", ""),
            "managed": str(labels.get("rigctl.managed", "")).lower() == "true",
            "recipe": labels.get("rigctl.recipe"),
        })
    return rows, None


def host_status(host: Host, ssh: Transport, timeout: float) -> HostResult:
    result = HostResult(host.name, _destination(host))
    boundary = "@@rigctl-" + secrets.token_hex(6)
    done = ssh.run(host, _status_script(boundary), timeout=timeout)
    if unreachable(done):
        return _unreachable(result, done)
    sections = _sections(done.stdout, boundary)
    if "end" not in sections:
        result.error = f"status script did not finish (exit {done.rc}): {done.stderr.strip()[-300:]}"
        return result
    containers, podman_error = _containers(sections.get("podman", ""))
    units = [ln.split(None, 4) for ln in sections.get("units", "").splitlines() if ln.strip()]
    gpus = [[c.strip() for c in ln.split(",")] for ln in sections.get("gpus", "").splitlines() if ln.count(",") >= 3]
    result.data = {
        "hostname": sections.get("host", "").strip(),
        "containers": containers,
        "units": [" ".join(u) for u in units],
        "gpus": [{"index": g[0], "name": g[1], "memory_used_mib": g[2], "memory_total_mib": g[3]} for g in gpus],
        "podman_error": podman_error,
    }
    running = [c for c in containers if c["state"] == "running"]
    result.summary.append(
        f"{result.data['hostname']}: {len(running)}/{len(containers)} container(s) running"
        + (f"; {podman_error}" if podman_error else "")
        + (f"; {len(gpus)} GPU(s)" if gpus else "")
    )
    for c in containers:
        mark = " (rigctl)" if c["managed"] else ""
        result.summary.append(f"  {c['state']:<9} {c['name']}{mark}  {c['image']}  {c['status']}")
    for g in result.data["gpus"]:
        result.summary.append(f"  gpu {g['index']} {g['name']}: {g['memory_used_mib']}/{g['memory_total_mib']} MiB")
    result.ok = podman_error is None or podman_error == "podman is not installed"
    return result


# --- doctor ------------------------------------------------------------------------------------------

_SNAPSHOT_DIRS = (
    "/etc/containers/systemd /usr/share/containers/systemd /etc/systemd/system /usr/local/lib/systemd/system "
    "/usr/lib/systemd/system /lib/systemd/system /etc/systemd/user /usr/lib/systemd/user "
    '"$HOME/.config/containers/systemd" "$HOME/.config/systemd/user" '
    '${XDG_RUNTIME_DIR:+"$XDG_RUNTIME_DIR/containers/systemd"} '
    "/home/*/.config/containers/systemd /home/*/.config/systemd/user"
)


def _doctor_script(boundary: str, program: str) -> str:
    b = boundary
    hint = SERVICE_HINT.pattern
    cdi = " ".join(f"{d}/*.yaml {d}/*.yml {d}/*.json" for d in CDI_DIRS)
    return "\n".join([
        f"if command -v {shlex.quote(program)} >/dev/null 2>&1; then echo '{b} via rigctl'; "
        f"{shlex.quote(program)} doctor --json; echo; echo '{b} rc'\"$?\"; exit 0; fi",
        f"echo '{b} via ssh'",
        f"echo '{b} meta home'; echo \"$HOME\"",
        f"echo '{b} meta uid'; id -u",
        f"echo '{b} meta runtime'; echo \"${{XDG_RUNTIME_DIR:-}}\"",
        f"echo '{b} meta homes'; for h in /home/*; do [ -d \"$h\" ] && echo \"$h\"; done",
        f"for d in {_SNAPSHOT_DIRS}; do [ -d \"$d\" ] && echo \"$d\"; done | "
        "while IFS= read -r d; do find -L \"$d\" \\( -name '*.wants' -o -name '*.requires' \\) -prune -o -type f "
        "\\( -name '*.container' -o -name '*.service' -o -path '*.d/*.conf' \\) -print 2>/dev/null; done | "
        "while IFS= read -r f; do "
        f"case \"$f\" in *.service) grep -q -i -E {shlex.quote(hint)} \"$f\" 2>/dev/null || continue;; esac; "
        f"echo '{b} file '\"$f\"; cat -- \"$f\"; echo; done",
        f"for f in {DRIVER_VERSION_FILE} {cdi}; do [ -f \"$f\" ] && "
        f"{{ echo '{b} file '\"$f\"; cat -- \"$f\"; echo; }}; done",
        f"echo '{b} end'",
    ])


def _snapshot_files(sections: dict[str, str]) -> dict[str, str]:
    files: dict[str, str] = {}
    for key, body in sections.items():
        if key.startswith("file "):
            # the script adds a newline after each file; splitting on lines already dropped it
            files[key[len("file ") :]] = body
    return files


def host_doctor(host: Host, ssh: Transport, timeout: float) -> HostResult:
    result = HostResult(host.name, _destination(host))
    boundary = "@@rigctl-" + secrets.token_hex(6)
    program = host.rigctl or "rigctl"
    done = ssh.run(host, _doctor_script(boundary, program), timeout=timeout)
    if unreachable(done):
        return _unreachable(result, done)
    sections = _sections(done.stdout, boundary)
    if "via rigctl" in sections:
        result.via = "rigctl"
        try:
            document = json.loads(sections["via rigctl"])
        except json.JSONDecodeError:
            result.error = f"remote `{program} doctor --json` did not answer JSON: {done.stderr.strip()[-300:]}"
            return result
        findings = document.get("findings", [])
        result.findings = findings if isinstance(findings, list) else []
        result.data = {k: document.get(k) for k in ("units", "driver_version", "counts")}
        if "error" in document:
            result.error = str(document["error"].get("message"))
        result.ok = bool(document.get("ok"))
    else:
        if "end" not in sections:
            result.error = f"doctor snapshot did not finish (exit {done.rc}): {done.stderr.strip()[-300:]}"
            return result
        files = _snapshot_files(sections)
        meta = {k[len("meta ") :]: v.strip() for k, v in sections.items() if k.startswith("meta ")}
        driver_text = files.pop(DRIVER_VERSION_FILE, "")
        cdi = tuple(CdiSpec(p, t) for p, t in sorted(files.items()) if p.startswith(tuple(d + "/" for d in CDI_DIRS)))
        for spec in cdi:
            files.pop(spec.path, None)
        uid = int(meta.get("uid") or -1)
        roots = default_roots(meta.get("home") or "/root", meta.get("runtime") or None, uid,
                              meta.get("homes", "").split() if uid == 0 else [])
        units = serving_units(collect(files, roots))
        version = driver_from_proc(driver_text) if driver_text else None
        facts = DoctorFacts(driver_version=version, driver_source=DRIVER_VERSION_FILE if version else None,
                            cdi_specs=cdi)
        found = audit(units, facts)
        result.findings = [f.to_dict() for f in found]
        result.data = {"units": [u.path for u in units], "driver_version": version}
        result.ok = not any(f.fails for f in found)
    fails = sum(1 for f in result.findings if f.get("severity") == "fail")
    warns = sum(1 for f in result.findings if f.get("severity") == "warn")
    units_seen = result.data.get("units") or []
    result.summary.append(f"{len(units_seen)} serving unit(s); {fails} fail, {warns} warn")
    return result


# --- preflight ---------------------------------------------------------------------------------------


def host_rigctl(host: Host, ssh: Transport, timeout: float, argv: Sequence[str]) -> HostResult:
    """``rigctl ARGV --json`` on the host (needs rigctl installed there): its document, failed or warned
    findings/checks and swap steps as summary lines."""
    label = " ".join(argv)
    result = HostResult(host.name, _destination(host), via="rigctl")
    try:
        remote = run_remote_rigctl(host, argv, transport=ssh, timeout=timeout)
    except RigctlError as err:
        result.reachable = "unreachable" not in err.message
        result.error = err.message
        return result
    if remote.document is None:
        result.error = f"remote {argv[0]} exited {remote.rc} without JSON: {remote.stderr.strip()[-300:]}"
        return result
    result.data = remote.document
    result.ok = remote.rc == 0 and bool(remote.document.get("ok"))
    error = remote.document.get("error")
    if isinstance(error, dict):
        result.error = str(error.get("message"))
    for key in ("findings", "checks"):
        items = remote.document.get(key)
        if isinstance(items, list):
            for item in items:
                if isinstance(item, dict) and item.get("severity") in ("fail", "warn"):
                    mark = str(item["severity"]).upper()
                    result.summary.append(f"{mark} {item.get('id')}: {item.get('message', '')}")
    steps = remote.document.get("steps")
    if isinstance(steps, list):
        for step in steps:
            if isinstance(step, dict):
                mark = "ok  " if step.get("ok") else "FAIL"
                result.summary.append(f"{mark} {step.get('step')}: {step.get('message', '')}")
    outcome = remote.document.get("outcome")
    verdict = str(outcome) if isinstance(outcome, str) else ("ok" if result.ok else "FAILED")
    result.summary.insert(0, f"{label}: {verdict} (exit {remote.rc})")
    return result


# --- the runner --------------------------------------------------------------------------------------


def run_fleet(command: str, hosts: Sequence[Host], *, parallel: int = 16, timeout: float = 60.0,
              extra: Sequence[str] = (), transport: Transport | None = None) -> FleetResult:
    if command not in COMMANDS:
        raise UsageError(f"unknown fleet command {command!r}; one of {', '.join(COMMANDS)}")
    needed = _ARGS_NEEDED.get(command, ())
    if len(extra) < len(needed):
        raise UsageError(f"fleet {command} needs {' '.join(needed)}")
    ssh = transport or OpenSsh.default()
    job: Callable[[Host], HostResult]
    if command == "status":
        def job(h: Host) -> HostResult:
            return host_status(h, ssh, timeout)
    elif command == "doctor":
        def job(h: Host) -> HostResult:
            return host_doctor(h, ssh, timeout)
    else:
        def job(h: Host) -> HostResult:
            return host_rigctl(h, ssh, timeout, [command, *extra])

    def guarded(host: Host) -> HostResult:
        start = time.monotonic()
        try:
            result = job(host)
        except Exception as exc:  # one host's surprise must not hide the others; report it on that host
            result = HostResult(host.name, _destination(host), error=f"{type(exc).__name__}: {exc}")
        result.elapsed_s = time.monotonic() - start
        return result

    start = time.monotonic()
    if not hosts:
        return FleetResult(command, [], 0.0)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts)))) as pool:
        results = list(pool.map(guarded, hosts))
    return FleetResult(command, results, time.monotonic() - start)
