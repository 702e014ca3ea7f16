"""The canary's two systemd units, as text: a timer and the oneshot service it starts.

``rigctl canary NAME --every 10m`` installs ``rigctl-NAME-canary.timer`` and ``rigctl-NAME-canary.service``
beside the deployment, in the same scope. The service runs ``rigctl canary NAME --run-once`` with the
scope's flag; that run checks the endpoint, records the result and, when told to, restarts the engine's
service once. Pure: the caller passes the command line (the interpreter running rigctl now) and writes the
files through the one safe writer (``deploy.install.install_files``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rigctl.recipe.names import recipe_name_problem
from rigctl.render.escape import RenderError, text, words

CANARY_LABEL = "rigctl.canary"  # in each unit's [Unit] X- key: the units rigctl wrote for a canary
SLACK_S = 30  # TimeoutStartSec= beyond the run's own bound: systemd's backstop, never the normal end


_PREFIX, _TIMER, _SERVICE = "rigctl-", "-canary.timer", "-canary.service"


def timer_name(deployment: str) -> str:
    return f"{_PREFIX}{deployment}{_TIMER}"


def timer_deployment(name: str) -> str | None:
    """The deployment a canary timer's file name is for (``timer_name`` read back), or None for any other
    name, or one whose middle is no recipe name."""
    return _named(name, _TIMER)


def service_name(deployment: str) -> str:
    return f"{_PREFIX}{deployment}{_SERVICE}"


def service_deployment(name: str) -> str | None:
    """The deployment a canary service's name is for (``service_name`` read back), or None."""
    return _named(name, _SERVICE)


def _named(name: str, suffix: str) -> str | None:
    if not (name.startswith(_PREFIX) and name.endswith(suffix)):
        return None
    deployment = name[len(_PREFIX):-len(suffix)]
    return deployment if recipe_name_problem(deployment) is None else None


def unit_names(deployment: str) -> list[str]:
    return [timer_name(deployment), service_name(deployment)]


@dataclass(frozen=True)
class CanaryUnits:
    deployment: str
    engine_unit: str  # the service the canary watches (and may restart), e.g. rigctl-NAME.service
    every_s: int
    run_timeout_s: int
    checks: tuple[str, ...]
    command: tuple[str, ...]  # the whole ExecStart argv: interpreter, -m rigctl, canary NAME --run-once, scope


def seconds(value: int) -> str:
    """A time span as systemd reads it (systemd.time(7)); whole seconds."""
    return f"{int(value)}s"


def render(units: CanaryUnits) -> dict[str, str]:
    """{file name: text} for the timer and its service."""
    if (problem := recipe_name_problem(units.deployment)) is not None:
        raise RenderError(f"canary of {units.deployment!r}: {problem}")
    if units.every_s < 1 or units.run_timeout_s < 1:
        raise RenderError("canary: the interval and the run's time bound are at least 1 s")
    what = ",".join(units.checks)
    timer = "\n".join([
        "# Written by rigctl (`rigctl canary`); `rigctl canary NAME --off` or `rigctl down` removes it.",
        "[Unit]",
        f"Description={text(f'rigctl canary of {units.deployment} (every {seconds(units.every_s)}: {what})')}",
        f"X-{CANARY_LABEL}={units.deployment}",
        "",
        "[Timer]",
        # the first run one interval after the timer starts (the engine was just verified by `up`), then one
        # interval after each run began
        f"OnActiveSec={seconds(units.every_s)}",
        f"OnUnitActiveSec={seconds(units.every_s)}",
        "AccuracySec=1s",
        f"Unit={service_name(units.deployment)}",
        "",
        "[Install]",
        "WantedBy=timers.target",
        "",
    ])
    service = "\n".join([
        "# Written by rigctl (`rigctl canary`); `rigctl canary NAME --off` or `rigctl down` removes it.",
        "[Unit]",
        f"Description={text(f'rigctl canary run of {units.deployment}: {what}')}",
        f"X-{CANARY_LABEL}={units.deployment}",
        f"After={units.engine_unit}",
        "StartLimitIntervalSec=0",  # a short test interval must not trip the start rate limit
        "",
        "[Service]",
        "Type=oneshot",
        f"ExecStart={exec_line(units.command)}",
        # exit 1 is a failing check: a finding kept in the record, not a broken canary (the unit never ends
        # "failed" for it, so `systemctl --failed` lists only canaries that could not run)
        "SuccessExitStatus=1",
        # the run bounds itself (run_timeout_s); this is the backstop should it not
        f"TimeoutStartSec={seconds(units.run_timeout_s + SLACK_S)}",
        "",
    ])
    return {timer_name(units.deployment): timer, service_name(units.deployment): service}


def exec_line(argv: Sequence[str]) -> str:
    """ExecStart's value: each word quoted as systemd splits it, specifiers and variables doubled."""
    return words(list(argv), "canary command")
