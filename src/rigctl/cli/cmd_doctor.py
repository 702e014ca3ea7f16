"""rigctl doctor: audit every serving unit on this host, and fix rigctl's own."""

from __future__ import annotations

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish, scope_choice
from rigctl.doctor.checkup import doctor


@app.command("doctor")
def doctor_cmd(  # noqa: PLR0917 - typer maps every option to a parameter
    paths: opt.PathOpt = None, fix: opt.FixOpt = False, restart: opt.RestartFixedOpt = False,
    user: opt.UserOpt = False, system: opt.SystemOpt = False, as_json: opt.JsonOpt = False,
) -> None:
    """Audit every serving unit on this host (quadlet .container files and .service files running
    podman/docker or an engine): restart policy, ipc/shm, start timeouts, digests, exposure, CDI, and what
    systemd runs now (failed, restarting, files changed without a daemon-reload). --fix reloads the manager
    and reads back what it holds; --restart also restarts what needs it. --user/--system: that scope's
    directories and canaries only."""

    def produce() -> Outcome:
        report = doctor(paths or None, fix=fix, restart=restart, scope=scope_choice(user, system))
        return Outcome("doctor", report.ok, report.to_dict(), view=views.doctor(report))

    finish("doctor", as_json, produce)
