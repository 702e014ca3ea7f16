"""systemd, through ``systemctl [--user]``: present wherever rigctl deploys, with a stable output format,
and a CLI call needs no D-Bus library. Every unit name is passed after ``--``: names come from recipes
and deployment records, which are files, and a file's text must never be read as an option."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from rigctl.errors import CommandError
from rigctl.places import Scope
from rigctl.util.proc import Completed, run

UNIT_PROPS = (
    "ActiveState", "SubState", "LoadState", "Result", "NRestarts", "Restart", "RestartUSec",
    "ExecMainStatus", "ExecMainCode", "MainPID", "ActiveEnterTimestampMonotonic",
    "ExecMainStartTimestampMonotonic", "FragmentPath", "SourcePath",
)


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
        )

    @property
    def running(self) -> bool:
        return self.active == "active" and self.sub == "running"


class Systemd(Protocol):
    scope: Scope

    def daemon_reload(self) -> None: ...
    def start(self, unit: str) -> None: ...
    def stop(self, unit: str, *, wait: bool, timeout: float) -> None: ...
    def reset_failed(self, unit: str) -> None: ...
    def show(self, unit: str) -> UnitState: ...
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

    def daemon_reload(self) -> None:
        done = self._run("daemon-reload", timeout=120.0)
        if not done.ok:
            raise CommandError(done.describe())

    def start(self, unit: str) -> None:
        done = self._run("start", "--no-block", "--", unit)
        if not done.ok:
            raise CommandError(done.describe())

    def stop(self, unit: str, *, wait: bool, timeout: float) -> None:
        args = ("stop", "--", unit) if wait else ("stop", "--no-block", "--", unit)
        done = self._run(*args, timeout=timeout)
        if not done.ok and "not loaded" not in done.stderr:
            raise CommandError(done.describe())

    def reset_failed(self, unit: str) -> None:
        self._run("reset-failed", "--", unit)  # fails harmlessly when the unit is not failed

    def show(self, unit: str) -> UnitState:
        done = self._run("show", "-p", ",".join(UNIT_PROPS), "--", unit, timeout=10.0)
        if not done.ok:
            raise CommandError(done.describe())
        props = dict(line.split("=", 1) for line in done.stdout.split("\n") if "=" in line)
        return UnitState.from_props(props)

    def enable_now(self, unit: str) -> None:
        """Enable and start ``unit`` (the canary's timer: it comes back after a reboot)."""
        done = self._run("enable", "--now", "--", unit)
        if not done.ok:
            raise CommandError(done.describe())

    def disable_now(self, unit: str) -> None:
        done = self._run("disable", "--now", "--", unit)
        if not done.ok and "not loaded" not in done.stderr and "does not exist" not in done.stderr:
            raise CommandError(done.describe())

    def restart_unit(self, unit: str) -> None:
        """Restart without waiting for it (an engine's warmup is watched by its caller, if at all)."""
        done = self._run("restart", "--no-block", "--", unit)
        if not done.ok:
            raise CommandError(done.describe())

    def is_active(self, unit: str) -> str:
        """``systemctl is-active``: active, inactive, failed, activating, ... (its exit status says nothing more)."""
        done = self._run("is-active", "--", unit, timeout=10.0)
        return done.stdout.strip() or "unknown"

    def manager_environment(self) -> dict[str, str] | None:
        """The environment the manager (and so its quadlet generator) runs with; None when it cannot be
        asked."""
        done = self._run("show-environment", timeout=10.0)
        return parse_environment(done.stdout) if done.ok else None
