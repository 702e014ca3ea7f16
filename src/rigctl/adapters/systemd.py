"""systemd, through ``systemctl [--user]``: present wherever rigctl deploys, with a stable output format,
and a CLI call needs no D-Bus library. Every unit name is passed after ``--``: names come from recipes
and deployment records, which are files, and a file's text must never be read as an option."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from rigctl.errors import CommandError
from rigctl.places import Scope
from rigctl.util.proc import Completed, run

UNIT_PROPS = (
    "ActiveState", "SubState", "LoadState", "Result", "NRestarts", "Restart", "RestartUSec",
    "ExecMainStatus", "ExecMainCode", "MainPID", "ActiveEnterTimestampMonotonic",
    "ExecMainStartTimestampMonotonic", "FragmentPath", "SourcePath", "NeedDaemonReload",
    "ExecMainExitTimestampMonotonic", "InactiveEnterTimestampMonotonic",
)
# ExecMainCode as systemctl prints it: the si_code of the main process's end (CLD_EXITED, CLD_KILLED, CLD_DUMPED)
EXIT_CODES = {"1": "exited", "2": "killed", "3": "dumped"}


@dataclass(frozen=True)
class UnitState:
    """What ``systemctl show`` says about one unit, the fields deploy decides on."""

    active: str
    sub: str
    load: str
    result: str
    restarts: int
    restart_policy: str
    exit_status: int | None
    main_pid: int
    active_since_mono_us: int
    source_path: str
    need_daemon_reload: bool = False  # the files on disk changed since the manager last read them
    exit_code: str = ""  # how the main process ended: exited (exit_status is its status) | killed | dumped (a signal)
    exited_mono_us: int = 0  # when it ended (CLOCK_MONOTONIC); 0: not since the unit last started
    inactive_since_mono_us: int = 0  # when the unit last went down (0: not since the manager started)
    # when its main process last started: after an automatic restart this start, where ActiveEnter is still the
    # last start's while a Notify=healthy unit is activating
    main_started_mono_us: int = 0

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> UnitState:
        def num(key: str) -> int:
            try:
                return int(props.get(key, "") or 0)
            except ValueError:
                return 0

        code = props.get("ExecMainCode", "0")
        return cls(
            active=props.get("ActiveState", "unknown"),
            sub=props.get("SubState", "unknown"),
            load=props.get("LoadState", "unknown"),
            result=props.get("Result", ""),
            restarts=num("NRestarts"),
            restart_policy=props.get("Restart", ""),
            # ExecMainCode 0 means the main process has not exited since the unit started
            exit_status=num("ExecMainStatus") if code not in ("", "0") else None,
            main_pid=num("MainPID"),
            active_since_mono_us=num("ActiveEnterTimestampMonotonic"),
            source_path=props.get("SourcePath", ""),
            need_daemon_reload=props.get("NeedDaemonReload", "no") == "yes",
            exit_code=EXIT_CODES.get(code, "") if code not in ("", "0") else "",
            exited_mono_us=num("ExecMainExitTimestampMonotonic"),
            inactive_since_mono_us=num("InactiveEnterTimestampMonotonic"),
            main_started_mono_us=num("ExecMainStartTimestampMonotonic"),
        )

    @property
    def running(self) -> bool:
        return self.active == "active" and self.sub == "running"

    @property
    def restart_pending(self) -> bool:
        """Between two runs: the main process ended and systemd will start it again (systemd 254 says
        ``auto-restart-queued`` once the restart job is queued)."""
        return self.sub.startswith("auto-restart")

    def ended(self) -> str | None:
        """How the main process ended last, in words (``exit 137``, ``signal 9``); None when systemd does
        not know (it forgets at the next start)."""
        if self.exit_status is None or not self.exit_code:
            return None
        return f"exit {self.exit_status}" if self.exit_code == "exited" else f"signal {self.exit_status}"


class Systemd(Protocol):
    scope: Scope

    def daemon_reload(self) -> None: ...
    def start(self, unit: str) -> None: ...
    def stop(self, unit: str, *, wait: bool, timeout: float) -> None: ...
    def reset_failed(self, unit: str) -> None: ...
    def show(self, unit: str) -> UnitState: ...
    def properties(self, unit: str, names: Sequence[str]) -> dict[str, str]: ...
    def restart(self, unit: str) -> None: ...
    def manager_environment(self) -> dict[str, str] | None: ...


def parse_environment(text: str) -> dict[str, str]:
    """``systemctl show-environment``: one ``NAME=value`` a line; a value systemd had to quote is written
    ``NAME=$'...'`` with C escapes, which are undone here."""
    env: dict[str, str] = {}
    for line in text.split("\n")[:4096]:
        name, sep, value = line.partition("=")
        if not sep or not name:
            continue
        if value.startswith("$'") and value.endswith("'") and len(value) >= 3:
            try:
                value = value[2:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
            except UnicodeDecodeError:
                continue
        env[name] = value
    return env


class SystemctlCli:
    """``systemctl [--user]``. Starts are ``--no-block``: with ``Type=notify`` a blocking start would
    sit through the whole warmup, and deploy wants to watch the warmup itself."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope

    def _run(self, *args: str, timeout: float = 30.0) -> Completed:
        return run(["systemctl", *(["--user"] if self.scope is Scope.USER else []), *args], timeout=timeout)

    def _must(self, *args: str, timeout: float = 30.0, unless: tuple[str, ...] = ()) -> Completed:
        """``systemctl ARGS`` that must succeed: a failure is a CommandError, except one whose stderr says one of
        ``unless`` (a unit already gone, for the commands that remove it)."""
        done = self._run(*args, timeout=timeout)
        if not done.ok and not any(word in done.stderr for word in unless):
            raise CommandError(done.describe())
        return done

    def daemon_reload(self) -> None:
        self._must("daemon-reload", timeout=120.0)

    def start(self, unit: str) -> None:
        self._must("start", "--no-block", "--", unit)

    def stop(self, unit: str, *, wait: bool, timeout: float) -> None:
        args = ("stop", "--", unit) if wait else ("stop", "--no-block", "--", unit)
        self._must(*args, timeout=timeout, unless=("not loaded",))

    def reset_failed(self, unit: str) -> None:
        self._run("reset-failed", "--", unit)  # fails harmlessly when the unit is not failed

    def show(self, unit: str) -> UnitState:
        return UnitState.from_props(self.properties(unit, UNIT_PROPS))

    def properties(self, unit: str, names: Sequence[str]) -> dict[str, str]:
        """``systemctl show -p NAME,...``: the live values the manager holds (what it runs, not the files)."""
        done = self._must("show", "-p", ",".join(names), "--", unit, timeout=10.0)
        return dict(line.split("=", 1) for line in done.stdout.split("\n") if "=" in line)

    def restart(self, unit: str) -> None:
        """``systemctl restart --no-block``: queued, not waited for (a warmup takes minutes)."""
        self._must("restart", "--no-block", "--", unit)

    def enable_now(self, unit: str) -> None:
        """Enable and start ``unit`` (the canary's timer: it comes back after a reboot)."""
        self._must("enable", "--now", "--", unit)

    def disable_now(self, unit: str) -> None:
        self._must("disable", "--now", "--", unit, unless=("not loaded", "does not exist"))

    def is_active(self, unit: str) -> str:
        """``systemctl is-active``: active, inactive, failed, activating, ... (its exit status says nothing more)."""
        done = self._run("is-active", "--", unit, timeout=10.0)
        return done.stdout.strip() or "unknown"

    def manager_environment(self) -> dict[str, str] | None:
        """The environment the manager (and so its quadlet generator) runs with; None when it cannot be
        asked."""
        done = self._run("show-environment", timeout=10.0)
        return parse_environment(done.stdout) if done.ok else None
