"""Several hosts over real OpenSSH: sshd instances on 127.0.0.1 (conftest.ssh_fleet), one of them down."""

from __future__ import annotations

import json
import shutil
import socket
import stat
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rigctl.cli.app import app
from rigctl.errors import RigctlError
from rigctl.fleet.answer import run_remote_rigctl
from rigctl.fleet.loader import load_inventory
from rigctl.fleet.pool import run_fleet
from rigctl.fleet.ssh import OpenSsh

UNITS = Path(__file__).parent / "units"
REMOTE_RIGCTL = str(Path(sys.executable).with_name("rigctl"))  # this checkout's rigctl, as installed on a host

pytestmark = pytest.mark.integration


@pytest.fixture
def ssh(private_control_dir: Callable[[], Path]) -> Iterator[OpenSsh]:
    transport = OpenSsh.default()
    yield transport
    transport.close_all()  # leave no shared connection behind


def _put(home: Path, name: str, *, dropin_dir: str | None = None) -> Path:
    qdir = home / ".config" / "containers" / "systemd"
    qdir.mkdir(parents=True, exist_ok=True)
    shutil.copy(UNITS / name, qdir / name)
    if dropin_dir:
        shutil.copytree(UNITS / dropin_dir, qdir / dropin_dir, dirs_exist_ok=True)
    return qdir / name


@pytest.fixture
def placed_units(ssh_fleet: Any) -> Iterator[dict[str, Path]]:
    box0, box1, box2 = ssh_fleet.hosts
    placed = {
        "box00": _put(box0.home, "glm53-flash.container"),
        "box01": _put(box1.home, "v4flash.container"),
        "box02": _put(box2.home, "dropin-weakens.container", dropin_dir="dropin-weakens.container.d"),
    }
    yield placed
    for host in ssh_fleet.hosts:
        shutil.rmtree(host.home / ".config", ignore_errors=True)


def _invoke(args: list[str]) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(app, [*args, "--json"])
    return result.exit_code, json.loads(result.stdout)


def test_status_one_result_per_host_and_the_down_one_is_reported(ssh_fleet: Any, ssh: OpenSsh) -> None:
    code, data = _invoke(["fleet", "status", "--hosts", str(ssh_fleet.inventory())])
    assert code == 1  # one host is down
    assert [h["name"] for h in data["hosts"]] == ["box00", "box01", "box02", "down"]
    by_name = {h["name"]: h for h in data["hosts"]}
    assert by_name["down"]["reachable"] is False
    assert "Connection refused" in by_name["down"]["error"]
    for name in ("box00", "box01", "box02"):
        assert by_name[name]["reachable"] is True, by_name[name]
        assert by_name[name]["error"] is None
        assert by_name[name]["data"]["hostname"]
    assert data["counts"] == {"hosts": 4, "ok": 3, "unreachable": 1}


def test_status_shares_connections_in_a_private_dir(ssh_fleet: Any, ssh: OpenSsh) -> None:
    hosts = load_inventory(ssh_fleet.inventory(include_down=False)).select()
    first = run_fleet("status", hosts, transport=ssh)
    assert first.ok
    sockets = [p for p in ssh.control_path_dir.iterdir() if p.is_socket()]
    assert len(sockets) == len(hosts)  # one master per host, reused by later calls
    assert stat.S_IMODE(ssh.control_path_dir.stat().st_mode) == 0o700
    again = run_fleet("status", hosts, transport=ssh)
    assert again.ok
    assert sorted(p.name for p in ssh.control_path_dir.iterdir() if p.is_socket()) == sorted(p.name for p in sockets)


def test_doctor_ships_unit_files_back_without_remote_rigctl(
    ssh_fleet: Any, ssh: OpenSsh, placed_units: dict[str, Path]
) -> None:
    inventory = ssh_fleet.inventory(rigctl="/nonexistent/rigctl")
    code, data = _invoke(["fleet", "doctor", "--hosts", inventory])
    assert code == 1
    by_name = {h["name"]: h for h in data["hosts"]}
    assert by_name["box00"]["via"] == "ssh"
    assert [(f["unit"], f["id"]) for f in by_name["box00"]["findings"]] == [
        (str(placed_units["box00"]), "restart-not-always")
    ]
    assert by_name["box01"]["ok"] is True
    assert by_name["box01"]["data"]["units"] == [str(placed_units["box01"])]
    (dropin,) = by_name["box02"]["findings"]
    assert dropin["where"].endswith("dropin-weakens.container.d/50-restart.conf")  # the drop-in came along
    assert by_name["down"]["reachable"] is False


def test_doctor_uses_the_remote_rigctl_when_installed(
    ssh_fleet: Any, ssh: OpenSsh, placed_units: dict[str, Path]
) -> None:
    code, data = _invoke(["fleet", "doctor", "--hosts", str(ssh_fleet.inventory(rigctl=REMOTE_RIGCTL)), "--only", "box00"])
    assert code == 1
    (host,) = data["hosts"]
    assert host["via"] == "rigctl"
    assert [f["id"] for f in host["findings"]] == ["restart-not-always"]


def test_run_remote_rigctl_returns_the_remote_json(ssh_fleet: Any, ssh: OpenSsh, placed_units: dict[str, Path]) -> None:
    inventory = load_inventory(ssh_fleet.inventory(rigctl=REMOTE_RIGCTL))
    remote = run_remote_rigctl(inventory.get("box01"), ["doctor"], transport=ssh, timeout=60)
    assert remote.rc == 0
    assert remote.document is not None
    assert remote.document["command"] == "doctor"
    assert remote.document["units"] == [str(placed_units["box01"])]
    with pytest.raises(RigctlError, match="unreachable"):
        run_remote_rigctl(inventory.get("down"), ["doctor"], transport=ssh, timeout=30)
    missing = load_inventory(ssh_fleet.inventory(rigctl="/nonexistent/rigctl")).get("box01")
    with pytest.raises(RigctlError, match="not installed"):
        run_remote_rigctl(missing, ["doctor"], transport=ssh, timeout=30)


@pytest.fixture
def blackhole() -> Iterator[int]:
    """A port that accepts TCP and never says a word: a host hung mid-handshake."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
                held.append(conn)
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield int(server.getsockname()[1])
    stop.set()
    thread.join(timeout=2)
    for conn in held:
        conn.close()
    server.close()


def test_a_hung_host_times_out_and_the_others_still_answer(ssh_fleet: Any, ssh: OpenSsh, blackhole: int) -> None:
    extra = f"  - name: hung\n    ssh: 127.0.0.1\n    port: {blackhole}\n"
    inventory = ssh_fleet.inventory(include_down=False, extra=extra)
    code, data = _invoke(["fleet", "status", "--hosts", str(inventory), "--timeout", "3"])
    assert code == 1
    by_name = {h["name"]: h for h in data["hosts"]}
    assert by_name["hung"]["reachable"] is False
    assert "timed out" in by_name["hung"]["error"]
    assert all(by_name[n]["ok"] for n in ("box00", "box01", "box02"))


def test_preflight_without_remote_rigctl_says_so(ssh_fleet: Any, ssh: OpenSsh) -> None:
    inventory = ssh_fleet.inventory(rigctl="/nonexistent/rigctl", include_down=False)
    code, data = _invoke(["fleet", "preflight", "qwen3-8b-vllm", "--hosts", str(inventory), "--only", "box00"])
    assert code == 1
    (host,) = data["hosts"]
    assert host["reachable"] is True
    assert "not installed" in host["error"]
