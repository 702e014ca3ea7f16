"""rigctl doctor: audit every serving unit on this host, and fix rigctl's own."""

from __future__ import annotations

from rigctl.cli import options as opt
from rigctl.cli import views
from rigctl.cli.output import Outcome
from rigctl.cli.root import app, finish
from rigctl.doctor.checkup import doctor


@app.command("doctor")
def doctor_cmd(paths: opt.PathOpt = None, fix: opt.FixOpt = False, restart: opt.RestartFixedOpt = False,
               as_json: opt.JsonOpt = False) -> None:
    """Audit every serving unit on this host (quadlet .container files and .service files running
    podman/docker or an engine): restart policy, ipc/shm, start timeouts, digests, exposure, CDI, and what
    systemd runs now (failed, restarting, files changed without a daemon-reload). --fix reloads the manager
    and reads back what it holds; --restart also restarts what needs it."""

    def produce() -> Outcome:
        report = doctor(paths or None, fix=fix, restart=restart)
        return Outcome("doctor", report.ok, report.to_dict(), view=views.doctor(report))

    finish("doctor", as_json, produce)
