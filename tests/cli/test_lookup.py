"""One lookup for a deployment (issue #11): `verify`, `logs` and `down` find NAME by the same scope rule
(``rigctl.deploy.state.search_scopes`` / ``locate``) and `status` lists exactly the scopes they search.

Before, each command had its own rule: verify looked in both scopes whatever the flags, logs and down only in
the default one, and `down --user` answered "nothing to do" for a service deployed (and running) in the
system scope. Here one host's two scopes live in a temporary directory, a record of NAME is placed in
none, one or both, and the real commands are asked (in-process, ``--json``) which deployment NAME is.

Real: the records (written by ``state.save``), the recipe files, podman, the `systemd --user` manager, and
an HTTP server on 127.0.0.1 at each record's endpoint for `verify`. The testbed has no system manager, so
the system scope's systemctl is ``tests.fakes.FakeSystemd`` (which knows no unit, as systemd would not).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import require_or_skip
from tests.deploy import conftest as testbed  # by module: its testbed_env would be collected as a test
from tests.fakes import FakeClock, FakeSystemd, small_recipe_file
from typer.testing import CliRunner

from rigctl import places
from rigctl.adapters import systemd as systemd_adapter
from rigctl.cli.app import app
from rigctl.deploy import state
from rigctl.errors import DeploymentNotFoundError
from rigctl.exitcodes import ExitCode
from rigctl.places import Dirs, Scope

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

NAME = "lookup-me"  # no recipe of this name exists: only its records make it a deployment
SYSTEM, USER = Scope.SYSTEM, Scope.USER


class _Healthy(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b'{"data": [{"id": "test-model"}]}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


class Host:
    """Both scopes of one host under ``tmp``, an engine endpoint per scope, and the commands asked."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.dirs = {s: Dirs(tmp / str(s) / "units", tmp / str(s) / "state") for s in Scope}
        self.servers = {s: ThreadingHTTPServer(("127.0.0.1", 0), _Healthy) for s in Scope}
        for server in self.servers.values():
            threading.Thread(target=server.serve_forever, daemon=True).start()

    def port(self, scope: Scope) -> int:
        return int(self.servers[scope].server_address[1])

    def deploy(self, scope: Scope) -> None:
        """NAME's record in ``scope``, as `up` writes it; each scope's tells itself apart: its endpoint
        (verify), the kept output of a failed warmup (logs), its GPUs (down, status)."""
        source = small_recipe_file(self.tmp, NAME, port=self.port(scope))
        state.save(self.dirs[scope].state, state.DeploymentRecord(
            recipe=NAME, scope=scope, unit=f"rigctl-{NAME}.service", container=f"rigctl-{NAME}",
            unit_dir=str(self.dirs[scope].units), unit_files=[f"rigctl-{NAME}.container"],
            endpoint=f"http://127.0.0.1:{self.port(scope)}", served_name="test-model",
            image="localhost/x@sha256:" + "a" * 64, gpu_ids=[f"{scope}-gpu"], recipe_source=str(source),
            last_failure={"status": "died", "detail": "exit 1", "last_lines": [f"kept by the {scope} record"]},
        ))

    def run(self, *argv: str) -> tuple[int, dict[str, Any]]:
        result = CliRunner().invoke(app, [*argv, "--json"])
        assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
        return result.exit_code, json.loads(result.stdout)

    def close(self) -> None:
        for server in self.servers.values():
            server.shutdown()
            server.server_close()


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Host]:
    env = testbed.testbed_env()
    require_or_skip(shutil.which("podman") is not None, "podman is not installed (.ci/testbed.sh up)")
    require_or_skip(testbed._manager_running(env), "no `systemd --user` manager running (.ci/testbed.sh up)")
    for key in ("XDG_RUNTIME_DIR", "CONTAINERS_CONF"):
        if key in env:
            monkeypatch.setenv(key, env[key])
    box = Host(tmp_path)
    # every command reaches its directories through places (Dirs.of): both scopes' land in tmp
    monkeypatch.setattr(places, "install_dir", lambda scope, **_: box.dirs[Scope(scope)].units)
    monkeypatch.setattr(places, "state_dir", lambda scope: box.dirs[Scope(scope)].state)
    monkeypatch.setattr(places, "lock_dir", lambda: tmp_path / "locks")
    real = systemd_adapter.SystemctlCli

    def manager(scope: Scope) -> Any:
        return FakeSystemd(box.dirs[SYSTEM].units, FakeClock(), scope=SYSTEM) if scope is SYSTEM else real(scope)

    monkeypatch.setattr("rigctl.adapters.systemd.SystemctlCli", manager)
    monkeypatch.setattr("rigctl.adapters.SystemctlCli", manager)  # real_adapters' own name for it
    monkeypatch.setattr("rigctl.cli.cmd_deploy.SystemctlCli", manager)  # down's and status's, imported by name
    try:
        yield box
    finally:
        box.close()


NOT_FOUND = "not deployed"


def _refusal(code: int, doc: dict[str, Any]) -> str:
    assert code == ExitCode.NOT_FOUND, doc
    error = doc["error"]
    assert error["code"] == "deployment-not-found" and error["fix"], error
    for scope in Scope:
        if f"it is deployed in the {scope} scope" in error["message"]:
            assert f"--{scope}" in error["fix"], error
            return f"only in {scope}"
    return NOT_FOUND


def answers(host: Host, flags: list[str]) -> dict[str, str]:
    """Which deployment each command took NAME for: a scope, NOT_FOUND, or "only in <scope>"."""
    by_port = {f"http://127.0.0.1:{host.port(s)}": str(s) for s in Scope}
    out: dict[str, str] = {}

    code, doc = host.run("verify", NAME, "--checks", "health", "--timeout", "5", *flags)
    out["verify"] = by_port[doc["endpoint"]["url"]] if code == ExitCode.OK else _refusal(code, doc)

    code, doc = host.run("logs", NAME, *flags)
    if code == ExitCode.OK:
        (kept,) = [line["text"] for line in doc["lines"] if line["source"] == "last-failure"]
        out["logs"] = kept.removeprefix("kept by the ").removesuffix(" record")
    else:
        out["logs"] = _refusal(code, doc)

    code, doc = host.run("down", NAME, *flags)  # not --remove: the record stays for the next command
    if code == ExitCode.OK:  # not deployed: down is done already (idempotent), and says so
        out["down"] = doc["gpu_ids"][0].removesuffix("-gpu") if doc["gpu_ids"] else NOT_FOUND
        assert doc["gpu_ids"] or "nothing to do" in doc["message"], doc
    else:
        out["down"] = _refusal(code, doc)
    return out


def listed(host: Host, flags: list[str]) -> list[str]:
    code, doc = host.run("status", *flags)
    # these records' units were never started: a deployed model that does not serve is exit 7
    assert code in (ExitCode.OK, ExitCode.SERVICE_DOWN) and (code == ExitCode.SERVICE_DOWN) == bool(doc["failing"]), doc
    return [s["scope"] for s in doc["services"] if s["recipe"] == NAME]


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule for root, who manages both scopes")
@pytest.mark.parametrize(("deployed", "flags", "found", "status_lists"), [
    pytest.param([USER], [], "user", ["user"], id="user-scope-only"),
    pytest.param([SYSTEM], [], "system", ["system"], id="system-scope-only"),
    # both: the system scope's, where `up` without a flag deploys for root; status shows both
    pytest.param([SYSTEM, USER], [], "system", ["system", "user"], id="both-scopes"),
    pytest.param([SYSTEM, USER], ["--user"], "user", ["user"], id="both-scopes-user-chosen"),
    pytest.param([], [], NOT_FOUND, [], id="neither-scope"),
    pytest.param([SYSTEM], ["--user"], "only in system", [], id="user-chosen-only-system-has-it"),
    pytest.param([USER], ["--system"], "only in user", [], id="system-chosen-only-user-has-it"),
])
def test_verify_logs_down_and_status_agree(
    host: Host, deployed: list[Scope], flags: list[str], found: str, status_lists: list[str],
) -> None:
    for scope in deployed:
        host.deploy(scope)
    assert answers(host, flags) == {"verify": found, "logs": found, "down": found}
    assert listed(host, flags) == status_lists
    if status_lists:
        assert found == status_lists[0]  # what status shows first is what the others act on


def test_the_rule_for_someone_other_than_root(host: Host, monkeypatch: pytest.MonkeyPatch) -> None:
    """Not root: only the user scope is searched; a system deployment is named, with how to reach it."""
    host.deploy(SYSTEM)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert state.search_scopes(None) == (USER,)
    with pytest.raises(DeploymentNotFoundError) as refused:
        state.locate(NAME, None)
    assert "it is deployed in the system scope" in refused.value.message
    assert refused.value.fix == "add --system (as root)"
    host.deploy(USER)
    found = state.locate(NAME, None)
    assert found is not None and found[1] is USER
