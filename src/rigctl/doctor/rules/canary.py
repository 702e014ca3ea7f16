"""The rule about a deployment's canary: a canary that fails, cannot be read, or no longer runs (stale: no run
for two intervals, its service failed, or the interpreter its service runs is gone) is a finding, as `status`
fails the deployment for it. It reads the canary's record (``deploy.history``) of the units this login's
managers run (``facts.live``: the state of the canary's service comes with them, when asked); a unit not asked
about (``--path``, another user's) gets none."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Any

from rigctl.doctor.rules.context import Hit, RuleContext
from rigctl.recipe.names import recipe_name_problem


def failing(ctx: RuleContext) -> list[Hit]:
    live = ctx.facts.live.get(ctx.unit.path)
    name = ctx.unit.labels.get("rigctl.recipe") if ctx.unit.managed else None
    if live is None or not name or recipe_name_problem(name) is not None:
        return []
    from rigctl.deploy import history  # noqa: PLC0415 - only for this host's own units
    from rigctl.deploy.canary import systemd_dir  # noqa: PLC0415
    from rigctl.places import Dirs, Scope  # noqa: PLC0415
    from rigctl.render.canary_units import service_name  # noqa: PLC0415

    scope = Scope(live.scope)
    state = history.canary_state(Dirs.of(scope).state, name)
    from rigctl.deploy.state import lock_holder  # noqa: PLC0415

    hits = hits_for(name, state.summary(service=live.canary, paused_by=lock_holder(name)), systemctl=live.systemctl)
    gone = missing_interpreter(systemd_dir(scope) / service_name(name))
    if gone is not None:
        hits.append(Hit(
            f"the canary of {name} runs {gone}, which no longer exists (a virtual environment moved or rebuilt): "
            "each run fails before it can record anything",
            f"install it again with the rigctl you run now: `rigctl canary {name} --every SPAN ...`"))
    return hits


def hits_for(name: str, summary: dict[str, Any] | None, *, systemctl: str = "systemctl --user") -> list[Hit]:
    """The finding of a canary's summary (``history.CanaryState.summary``): none while it runs and passes."""
    if not summary or not summary.get("failing"):
        return []
    fix = f"`rigctl status` and `rigctl canary {name}` show its runs"
    if summary.get("unreadable"):
        return [Hit(f"the canary of {name} cannot be read: {summary['unreadable']}",
                    f"`rigctl canary {name} --every SPAN ...` writes its settings again")]
    if summary.get("stale"):
        return [Hit(f"the canary of {name} is stale: {summary.get('stale_reason')}",
                    f"see why with `journalctl{' --user' if '--user' in systemctl else ''} -u rigctl-{name}-canary."
                    f"service`; {fix}")]
    return [Hit(f"the canary of {name} fails: {summary.get('consecutive_failures')} run(s) in a row, the last: "
                f"{summary.get('last_failure_reason')}", fix)]


def missing_interpreter(service_file: Path) -> str | None:
    """The program a canary service's ExecStart= runs, when it is an absolute path that does not exist."""
    try:
        text = service_file.read_text(errors="replace")[:65536]
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("ExecStart="):
            try:
                words = shlex.split(line.removeprefix("ExecStart="))
            except ValueError:
                return None
            program = words[0] if words else ""
            return program if os.path.isabs(program) and not os.path.exists(program) else None
    return None
