"""``fleet status`` on one host: a shell script over ssh reads podman, systemctl and nvidia-smi (nothing
of ours needed there) and, where rigctl is installed, its own ``rigctl status --json`` verdict of each
rigctl unit: a dead model fails the host even when systemd shows the unit active."""

from __future__ import annotations

from typing import Any

from rigctl.deploy.status import FAILING, VERDICTS
from rigctl.exitcodes import ExitCode
from rigctl.fleet.answer import note_version, one_value, parse_answer
from rigctl.fleet.inventory import Host
from rigctl.fleet.result import HostResult
from rigctl.fleet.script import run_script, section_rc
from rigctl.fleet.ssh import Transport, remote_command
from rigctl.fleet.visible import shown_line, tail
from rigctl.host.unitdirs import SERVICE_HINT
from rigctl.render.canary_units import service_deployment

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
    raw, problem = one_value(body.strip() or "[]")
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
    result, done, sections = run_script(host, ssh, timeout, "status", lambda b: _status_script(b, host.program))
    if sections is None:
        return result
    if "end" not in sections:
        result.error = f"status script did not finish (exit {done.rc}): {tail(done.stderr)}"
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
    judged: list[str] = []  # the host's own rigctl status, read first: its verdicts decide for its units
    rigctl_ok = _remote_status(result, host, sections, judged) if "rigctl status" in sections else True
    verdicts = {(row["scope"], row["unit"]): row["verdict"] for row in result.data.get("rigctl_units") or []}
    down = [u for u in units if u["active"] == "failed" or (u["rigctl"] and u["active"] != "active"
                                                            and _down(u, verdicts))]
    result.summary.append(
        f"{shown_line(result.data['hostname'], 100)}: {len(running)}/{len(containers)} container(s) running"
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
    result.summary += judged
    result.ok = (podman_error is None or podman_error == "podman is not installed") and not down and rigctl_ok
    return result


def _down(unit: dict[str, Any], verdicts: dict[tuple[str, str], str]) -> bool:
    """Whether a rigctl-looking unit that systemd does not show active is down. The host's rigctl decides for
    the units it judged (one stopped by `rigctl down` is ``stopped``, not failing); a canary's oneshot
    service is inactive between its runs (a failed run is ``failed``, counted as every failed unit is)."""
    verdict = verdicts.get((unit["scope"], unit["unit"]))
    if verdict is not None:
        return verdict in FAILING
    return not (service_deployment(unit["unit"]) is not None and unit["active"] == "inactive")


def _remote_status(result: HostResult, host: Host, sections: dict[str, str], summary: list[str]) -> bool:
    """The host's own ``rigctl status --json`` (its verdict of each rigctl unit) into ``result.data
    ["rigctl_units"]``, its lines into ``summary``; False when a unit does not serve (the host's status
    exited 7) or the answer cannot be understood."""
    rc = section_rc(sections, "rigctl rc ")
    document, problem = parse_answer(sections.get("rigctl status", ""), rc if rc is not None else -1, command="status")
    if problem is None and rc not in (0, ExitCode.SERVICE_DOWN):
        problem = f"it exited {rc}"
    if problem is not None or document is None:
        summary.append(f"FAIL rigctl status on {host.name}: {shown_line(problem or 'no answer', 300)}")
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
            return shown_line(value, limit) if value is not None else None

        rows.append({
            "unit": text("unit", 200) or "?", "scope": text("scope", 20), "recipe": text("recipe", 200),
            "verdict": verdict if isinstance(verdict, str) and verdict in VERDICTS else "unknown",
            "detail": text("verdict_detail", 300) or "", "health": text("health", 200),
            "endpoint": text("endpoint", 300),
            "last_exit": shown_line(last.get("said"), 60) if isinstance(last, dict) and last.get("said") else None,
        })
    failing = [r for r in rows if r["verdict"] in FAILING]
    result.data["rigctl_units"] = rows
    for row in rows:
        mark = "FAIL" if row in failing else "ok  "
        summary.append(f"  {mark} rigctl {row['scope']} {row['unit']}: {row['verdict']}"
                              + (f" ({row['detail']})" if row["detail"] and row["detail"] != row["verdict"] else ""))
    down = rc == ExitCode.SERVICE_DOWN or bool(failing)
    if down:
        summary.append(f"FAIL {len(failing) or '?'} rigctl model(s) not serving on {host.name}")
    return not down
