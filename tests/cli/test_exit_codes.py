"""Exit codes that mean one thing (#15), as an operator's script sees them: the README's table is the
code's, and each situation (not found, host unreachable, lock held, bad usage) ends with its own code,
in text and with --json (where the error object's code says the same)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from rigctl import errors
from rigctl.exitcodes import ExitCode

pytestmark = pytest.mark.timeout(120)

README = Path(__file__).resolve().parents[2] / "README.md"
RUN_TIMEOUT_S = 90


def rigctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True,
                          timeout=RUN_TIMEOUT_S, env={**os.environ, **(env or {})}, check=False)


def error_of(done: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The error object of the one JSON document on stdout (no traceback anywhere)."""
    assert "Traceback" not in done.stderr, done.stderr
    doc = json.loads(done.stdout)
    assert doc["ok"] is False, doc
    return dict(doc["error"])


# --- the table ---------------------------------------------------------------------------------------


def readme_exit_codes() -> dict[int, str]:
    """The rows `| N | `NAME` | meaning |` of the README's "Exit codes" section."""
    text = README.read_text(encoding="utf-8")
    section = text.split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    return {int(n): name for n, name in re.findall(r"^\| (\d+) \| `([A-Z_]+)` \|", section, re.MULTILINE)}


def test_the_readme_table_is_the_code() -> None:
    assert readme_exit_codes() == {int(code): code.name for code in ExitCode}


def test_each_situation_has_its_own_code() -> None:
    assert errors.NotFoundError("x").exit_code == ExitCode.NOT_FOUND
    assert errors.DeploymentNotFoundError("x").exit_code == ExitCode.NOT_FOUND
    assert errors.HostUnreachableError("x").exit_code == ExitCode.HOST_UNREACHABLE
    assert errors.LockHeldError("x").exit_code == ExitCode.LOCK_HELD
    assert isinstance(errors.LockHeldError("x"), errors.DeployError)  # who refuses on DeployError still does
    # kept as scripts know them: a recipe that is not there is bad input (3), as it always was
    assert errors.RecipeNotFoundError("x", []).exit_code == ExitCode.INVALID_INPUT
    assert len({int(c) for c in ExitCode}) == len(ExitCode)


# --- usage -------------------------------------------------------------------------------------------


def test_doctor_of_a_path_that_is_not_there_is_a_usage_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nonexistent")
    text = rigctl("doctor", "--path", missing)
    assert text.returncode == ExitCode.USAGE and "no such file or directory" in text.stderr
    done = rigctl("doctor", "--path", missing, "--json")
    assert done.returncode == ExitCode.USAGE and error_of(done)["code"] == "usage"


@pytest.mark.parametrize(("argv", "command", "said"), [
    (["show", "--json"], "show", "Missing argument 'RECIPE'"),
    (["status", "--json", "--bogus"], "status", "No such option: --bogus"),
    (["--json", "--bogus"], "rigctl", "No such option: --json"),
    (["fleet", "status", "--bogus", "--json"], "fleet status", "No such option: --bogus"),
    (["no-such-command", "--json"], "rigctl", "No such command"),
])
def test_a_usage_error_under_json_is_one_error_object(argv: list[str], command: str, said: str) -> None:
    done = rigctl(*argv)
    assert done.returncode == ExitCode.USAGE
    assert done.stderr == ""  # click's text is not printed as well
    doc = json.loads(done.stdout)
    assert doc["command"] == command and doc["ok"] is False
    assert doc["error"]["code"] == "usage" and said in doc["error"]["message"] and doc["error"]["fix"]


def test_a_usage_error_in_text_is_clicks_message() -> None:
    done = rigctl("status", "--bogus")
    assert done.returncode == ExitCode.USAGE and done.stdout == ""
    assert "No such option: --bogus" in done.stderr and "Usage:" in done.stderr


# --- not found ---------------------------------------------------------------------------------------


def test_logs_of_no_deployment_is_not_found(tmp_path: Path, need: Callable[[bool, str], None]) -> None:
    need(bool(os.environ.get("RIGCTL_TESTBED")), "needs the systemd --user manager of the testbed")
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    name = f"cli15-nope-{uuid.uuid4().hex[:8]}"
    done = rigctl("logs", name, "--user", "--json", env=env)
    assert done.returncode == ExitCode.NOT_FOUND
    error = error_of(done)
    assert error["code"] == "deployment-not-found" and name in error["message"]
    text = rigctl("logs", name, "--user", env=env)
    assert text.returncode == ExitCode.NOT_FOUND and "not deployed" in text.stderr


# --- lock held ---------------------------------------------------------------------------------------


@pytest.fixture
def held_lock() -> Iterator[str]:
    """A service name whose lock this process holds, as another rigctl command would."""
    from rigctl.deploy.state import ServiceLock

    name = f"cli15-lock-{uuid.uuid4().hex[:8]}"
    lock = ServiceLock(name, f"up {name}")
    lock.acquire()
    try:
        yield name
    finally:
        lock.release()
        lock.path.unlink(missing_ok=True)


def test_a_lock_held_by_another_rigctl_is_retryable(held_lock: str, tmp_path: Path,
                                                    need: Callable[[bool, str], None]) -> None:
    need(bool(os.environ.get("RIGCTL_TESTBED")), "needs the systemd --user manager of the testbed")
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    done = rigctl("down", held_lock, "--user", "--json", env=env)
    assert done.returncode == ExitCode.LOCK_HELD
    error = error_of(done)
    assert error["code"] == "lock-held" and "another rigctl command" in error["message"]
    assert f"pid {os.getpid()}" in error["message"]  # who holds it
    text = rigctl("down", held_lock, "--user", env=env)
    assert text.returncode == ExitCode.LOCK_HELD and "another rigctl command" in text.stderr


def test_without_the_lock_the_same_command_succeeds(tmp_path: Path, need: Callable[[bool, str], None]) -> None:
    """The control for the test above: with no one holding the lock, `down` of a name never deployed gets its
    own answer, not found (5, since #35: it was a silent 0), instead of lock-held."""
    need(bool(os.environ.get("RIGCTL_TESTBED")), "needs the systemd --user manager of the testbed")
    name = f"cli15-lock-{uuid.uuid4().hex[:8]}"
    done = rigctl("down", name, "--user", "--json", env={"XDG_STATE_HOME": str(tmp_path / "state")})
    assert done.returncode == ExitCode.NOT_FOUND, done.stdout + done.stderr
    assert error_of(done)["code"] == "deployment-not-found"


# --- host unreachable --------------------------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nothing listens once it is closed


def test_an_unreachable_host_has_its_own_code(tmp_path: Path, need: Callable[[bool, str], None]) -> None:
    need(os.path.exists("/usr/bin/ssh"), "needs the OpenSSH client")
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text(f"hosts:\n  - name: box\n    ssh: 127.0.0.1\n    port: {_closed_port()}\n")
    env = {"XDG_RUNTIME_DIR": str(tmp_path)}  # a private directory for ssh's control sockets
    done = rigctl("--hosts", str(hosts), "--host", "box", "status", "--json", env=env)
    assert done.returncode == ExitCode.HOST_UNREACHABLE
    error = error_of(done)
    assert error["code"] == "host-unreachable" and "box" in error["message"] and "unreachable" in error["message"]
    text = rigctl("--hosts", str(hosts), "--host", "box", "status", env=env)
    assert text.returncode == ExitCode.HOST_UNREACHABLE and "unreachable" in text.stderr


def _sshd_hosts() -> Any:
    import importlib.util

    name = "rigctl_test_sshd_hosts"  # the fleet tests' loopback sshd helper, loaded by path as they do
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / "fleet" / "sshd_hosts.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


def test_a_host_without_rigctl_cannot_be_asked_either(tmp_path: Path) -> None:
    with _sshd_hosts().fleet_or_skip(tmp_path / "f", 1) as fleet:
        hosts = fleet.inventory(rigctl="/nonexistent/rigctl", include_down=False)
        env = {"XDG_RUNTIME_DIR": str(tmp_path)}
        done = rigctl("--hosts", str(hosts), "--host", "box00", "status", "--json", env=env)
        assert done.returncode == ExitCode.HOST_UNREACHABLE
        error = error_of(done)
        assert error["code"] == "remote-rigctl-missing" and "rigctl is not installed on box00" in error["message"]
