"""Rules about the service as its manager runs it now, not its files: a unit whose files are sound can
still be failed, dying and restarting, or running an older version of its files (a file edited without a
daemon-reload). They read ``facts.live`` (``doctor.host_state.live_units``, asked at the edge); a unit not asked
about (``--path``, another user's, a manager that did not answer) gets none of them."""

from __future__ import annotations

import time

from rigctl.doctor.host_state import LiveUnit
from rigctl.doctor.rules.context import Hit, RuleContext
from rigctl.recipe.names import recipe_name_problem
from rigctl.severity import Severity


def _ended(live: LiveUnit) -> str:
    said = live.state.ended()
    if said is None:
        return ""
    at = ""
    if live.state.exited_mono_us:
        wall = time.time() - max(0.0, time.monotonic() - live.state.exited_mono_us / 1e6)
        at = f" at {time.strftime('%H:%M', time.localtime(wall))}"
    return f", its engine ended with {said}{at}"


def _why(ctx: RuleContext, live: LiveUnit) -> str:
    """Where to read why it died: rigctl's logs for its own units, else the manager's journal."""
    labels = ctx.unit.labels
    name = labels.get("rigctl.recipe") if ctx.unit.managed else None
    name = name if name and recipe_name_problem(name) is None else None  # pasted into a shell: a plain name only
    journal = f"journalctl{' --user' if live.scope == 'user' else ''} -u {live.service}"
    return f"`rigctl logs {name}`" if name else f"`{journal}`"


def failed(ctx: RuleContext) -> list[Hit]:
    live = ctx.facts.live.get(ctx.unit.path)
    if live is None or live.state.active != "failed":
        return []
    return [Hit(
        f"{live.service} is failed (result {live.state.result or '?'}{_ended(live)}): it serves nothing and "
        "systemd will not start it again by itself",
        f"see why with {_why(ctx, live)}, then `{live.systemctl} reset-failed {live.service} && "
        f"{live.systemctl} start {live.service}`",
    )]


def restarting(ctx: RuleContext) -> list[Hit]:
    live = ctx.facts.live.get(ctx.unit.path)
    if live is None:
        return []
    state = live.state
    if state.restart_pending or (state.active == "activating" and state.restarts):
        now = "waiting to start it again" if state.restart_pending else "warming it up again"
        return [Hit(
            f"{live.service} is restarting: its engine died{_ended(live)} and systemd is {now} "
            f"(restart {state.restarts + (1 if state.restart_pending else 0)} since it was started); the model is "
            "down until it is ready",
            f"see why with {_why(ctx, live)}; if it keeps dying, `{live.systemctl} stop {live.service}` frees "
            "its GPUs while you look",
        )]
    if state.running and state.restarts:
        return [Hit(
            f"{live.service} runs, but systemd has restarted it {state.restarts} time(s) since it was started: "
            "its engine died each time",
            f"see why with {_why(ctx, live)}",
            severity=Severity.WARN,
        )]
    return []


def needs_reload(ctx: RuleContext) -> list[Hit]:
    live = ctx.facts.live.get(ctx.unit.path)
    if live is None or not live.state.need_daemon_reload:
        return []
    return [Hit(
        f"its files changed since the {live.scope} manager last read them (NeedDaemonReload=yes): systemd still "
        f"runs {live.service} as it was, so what doctor read is not what runs",
        f"`{live.systemctl} daemon-reload` (a changed container command line also needs "
        f"`{live.systemctl} restart {live.service}`)",
    )]
