"""Rules about how systemd runs the unit: restart policy and start timeout. Each is a failure seen in
the field: a ``Restart=on-failure`` unit left the default model down after vLLM's API server exited 0,
and a TP2 warmup takes minutes, longer than systemd's default start timeout."""

from __future__ import annotations

from rigctl.doctor.edits import Edit, Remove, SetKey
from rigctl.doctor.rules.context import Hit, RuleContext, entry_with, last_raw
from rigctl.host.unitfile import format_seconds, parse_timespan
from rigctl.recipe.defaults import RESTART_SEC, WARMUP_BUDGET_S
from rigctl.severity import Severity


def restart(ctx: RuleContext) -> list[Hit]:
    entry = ctx.unit.merged.last("Service", "Restart")
    value = entry.value if entry else None
    if value == "always":
        return []
    why = (
        "vLLM's API server exits 0 when its EngineCore dies (vllm-project/vllm#48966), and systemd only "
        "restarts a clean exit under Restart=always, so the model stays down without a word"
    )
    if value is None:
        if ctx.unit.kind == "container":
            head = "no Restart= in [Service]: quadlet writes none, so systemd's default Restart=no applies"
        else:
            head = "no Restart= in [Service]: systemd's default is Restart=no"
    else:
        head = f"Restart={value} is weaker than Restart=always"
    target = last_raw(ctx.unit.merged, "Service", "Restart")
    path = target.file if target else ctx.unit.path
    edits: list[Edit] = [SetKey(path, "Service", "Restart", "always")]
    if ctx.unit.merged.last("Service", "RestartSec") is None:
        edits.append(SetKey(path, "Service", "RestartSec", str(RESTART_SEC), after="Restart"))
    return [Hit(
        f"{head}; {why}",
        f"set Restart=always (and RestartSec={RESTART_SEC}) in [Service]; `systemctl stop` still stops the unit, "
        "only exits systemd did not ask for bring it back",
        entry=target, edits=tuple(edits),
    )]


def notify_timeout(ctx: RuleContext) -> list[Hit]:
    if not ctx.spec.notify_healthy:
        return []
    entry = ctx.unit.merged.last("Service", "TimeoutStartSec") or ctx.unit.merged.last("Service", "TimeoutSec")
    seconds = parse_timespan(entry.value) if entry else None
    if seconds is not None and ctx.unit.managed:
        # rigctl wrote it from the recipe's warmup budget, which `up`'s watch and `status` also judge by: the
        # recipe decides how long its model may warm up (a small model's 300 s is no mistake to "fix")
        return []
    if seconds is None:
        seconds = ctx.facts.default_timeout_start_s
        told = f"no TimeoutStartSec, so systemd's default {format_seconds(seconds)} applies"
    else:
        told = f"TimeoutStartSec={entry.value if entry else ''}"
    if seconds >= ctx.facts.min_warmup_s:
        return []
    what = "Notify=healthy" if ctx.unit.kind == "container" else "--sdnotify=healthy"
    target = last_raw(ctx.unit.merged, "Service", "TimeoutStartSec")
    path = target.file if target else ctx.unit.path
    return [Hit(
        f"{what} makes systemd wait for the first passing health check, and {told}: a warmup longer "
        f"than that is killed and retried forever (containers/podman#27290); large models take minutes "
        f"to load and warm up",
        f"set TimeoutStartSec={WARMUP_BUDGET_S} (or the model's measured warmup plus margin) in [Service]",
        entry=entry or ctx.unit.merged.last("Container", "Notify") or ctx.spec.run_entry,
        edits=(SetKey(path, "Service", "TimeoutStartSec", str(WARMUP_BUDGET_S)),),
    )]


def podman_restart(ctx: RuleContext) -> list[Hit]:
    policy = ctx.spec.podman_restart
    if policy is None:
        return []
    section, key = ctx.run_keys
    entry = entry_with(ctx.unit.merged, section, key, "--restart")
    if ctx.unit.kind == "container" or ctx.spec.removes_container:
        message = (
            f"podman's own --restart={policy} conflicts with the --rm "
            f"{'quadlet always adds' if ctx.unit.kind == 'container' else 'on this command line'}, "
            "and fights systemd, which owns restarts"
        )
        severity = Severity.FAIL
    else:
        message = f"podman's own --restart={policy} competes with systemd's Restart= for the same container"
        severity = Severity.WARN
    return [Hit(message, "remove --restart and set Restart=always in [Service]", entry=entry, severity=severity,
                edits=(Remove(section, key, "--restart"),))]
