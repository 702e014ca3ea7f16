"""The ports probe and GPU process names read /proc themselves (``rigctl.host.procfs``) instead of importing
psutil: what they report must be what psutil reports. Compared on this live host (real sockets opened
here, real processes), and on a /proc tree written from real table lines for the parts a live host may
not show (IPv6, a socket shared by two processes, a cut name)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from rigctl.host import procfs
from rigctl.host.gather import facts_for_recipe
from rigctl.host.nvml import psutil_process_name
from rigctl.host.probes import probe_ports
from rigctl.recipe.load import load


def psutil_listeners() -> set[tuple[str, int, int | None]]:
    return {(c.laddr.ip, c.laddr.port, c.pid) for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.laddr}


@pytest.fixture
def listeners() -> Iterator[list[tuple[str, int]]]:
    """A listening socket on 127.0.0.1 and, where the host has IPv6, one on ::1."""
    opened = []
    for family, host in ((socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
            s.bind((host, 0))
        except OSError:
            continue  # no IPv6 here
        s.listen()
        opened.append(s)
    yield [(s.getsockname()[0], s.getsockname()[1]) for s in opened]
    for s in opened:
        s.close()


def test_listening_sockets_are_psutils_on_this_host(listeners: list[tuple[str, int]]) -> None:
    # other work on this machine opens and closes ports: what psutil saw both before and after must be
    # there, and nothing may be there that psutil saw neither time
    for _ in range(5):
        before = psutil_listeners()
        ours = set(procfs.listening_tcp())
        after = psutil_listeners()
        if before & after <= ours <= before | after:
            break
        time.sleep(0.2)
    assert before & after <= ours <= before | after
    for host, port in listeners:
        assert (host, port, os.getpid()) in ours


def test_the_ports_probe_names_this_process(listeners: list[tuple[str, int]]) -> None:
    ports = probe_ports()
    assert ports.error is None
    for host, port in listeners:
        holder = ports.holder(port, host)
        assert holder is not None and holder.pid == os.getpid()
        assert holder.process == psutil.Process().name()


def test_process_names_are_psutils(tmp_path: Path) -> None:
    # a command whose name is longer than the 15 bytes /proc/PID/stat keeps: psutil takes it from argv[0]
    long_name = tmp_path / "rigctl-a-rather-long-process-name"
    long_name.symlink_to(shutil.which("sleep") or "/bin/sleep")
    child = subprocess.Popen([str(long_name), "30"])
    try:
        time.sleep(0.1)
        assert psutil_process_name(child.pid) == psutil.Process(child.pid).name() == long_name.name
        compared = 0
        for pid in psutil.pids():
            try:
                want = psutil.Process(pid).name()
            except psutil.Error:
                continue  # gone meanwhile
            got = procfs.process_name(pid)
            if got is None and not psutil.pid_exists(pid):
                continue
            assert got == want, pid
            compared += 1
        assert compared >= 3
    finally:
        child.kill()
        child.wait()
    assert procfs.process_name(child.pid) is None  # reaped: gone


# Lines as this host's /proc/net/tcp and tcp6 print them (the header and columns of a 6.x kernel)
TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:07E8 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1166 1 000000001e6be1d9 100 0 0 10 0
   1: 0100007F:4723 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 52311 1 00000000c7d5a99a 100 0 0 10 0
   2: 0100007F:8B78 0100007F:4722 06 00000000:00000000 03:000014FC 00000000     0        0 0 3 00000000c7d5a99a
   3: 0100007F:E05A 0100007F:4722 01 00000000:00000000 00:00000000 00000000  1000        0 52400 1 0000000016d293ca 20 4 30 10 -1
"""
TCP6 = """\
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 61001 1 00000000aa 100 0 0 10 0
   1: 0000000000000000FFFF00000100007F:1F91 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 61002 1 00000000bb 100 0 0 10 0
"""


def fake_proc(root: Path) -> Path:
    (root / "net").mkdir(parents=True)
    (root / "net" / "tcp").write_text(TCP)
    (root / "net" / "tcp6").write_text(TCP6)
    processes = {101: ("vllm-serve-worker-main", ["52311", "61001"]), 102: ("python3", ["61001"])}
    for pid, (name, inodes) in processes.items():
        (root / str(pid) / "fd").mkdir(parents=True)
        (root / str(pid) / "stat").write_bytes(f"{pid} ({name[:15]}) S 1 1 1 0 -1".encode())
        (root / str(pid) / "cmdline").write_bytes("\x00".join([f"/usr/bin/{name}", "--port", "8001", ""]).encode())
        for fd, inode in enumerate(inodes, start=3):
            (root / str(pid) / "fd" / str(fd)).symlink_to(f"socket:[{inode}]")
        (root / str(pid) / "fd" / "0").symlink_to("/dev/null")
    (root / "self").mkdir()  # not a PID: skipped
    return root


def test_tables_decode_as_psutil_decodes_them(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc")
    found = procfs.listening_tcp(str(proc))
    by_port = {port: (address, pid) for address, port, pid in found}
    assert by_port[2024] == ("0.0.0.0", None)  # nobody visible holds it
    assert by_port[18211] == ("127.0.0.1", 101)
    assert by_port[8080] == ("::1", by_port[8080][1]) and by_port[8080][1] in {101, 102}
    assert by_port[8081] == ("::ffff:127.0.0.1", None)
    assert 35704 not in by_port and 57434 not in by_port  # connected sockets are not listening
    assert procfs.process_name(101, str(proc)) == "vllm-serve-worker-main"  # cut in stat, whole in argv[0]
    assert procfs.process_name(102, str(proc)) == "python3"
    assert procfs.process_name(999, str(proc)) is None


def test_a_shared_socket_is_named_by_the_pid_psutil_names(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc")
    listed = [int(e) for e in os.listdir(proc) if e.isdigit()]  # psutil: the last PID listed wins
    assert {port: pid for _, port, pid in procfs.listening_tcp(str(proc))}[8080] == listed[-1]


def test_the_probe_reports_a_table_it_cannot_parse(tmp_path: Path) -> None:
    proc = fake_proc(tmp_path / "proc")
    (proc / "net" / "tcp").write_text(TCP.replace("0100007F:4723", "01Z0007F:4723"))
    ports = probe_ports(str(proc))
    assert ports.listening == [] and ports.error is not None and "cannot list sockets" in ports.error


def test_without_proc_the_probe_asks_psutil(tmp_path: Path, listeners: list[tuple[str, int]]) -> None:
    ports = probe_ports(str(tmp_path / "no-proc-here"))
    assert ports.error is None
    for host, port in listeners:
        holder = ports.holder(port, host)
        assert holder is not None and holder.pid == os.getpid()



def test_only_the_ports_asked_about_have_their_holders_looked_up(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    proc = fake_proc(tmp_path / "proc")
    everyone = {port: pid for _, port, pid in procfs.listening_tcp(str(proc))}
    only = {port: pid for _, port, pid in procfs.listening_tcp(str(proc), owners_of={18211})}
    assert only.keys() == everyone.keys()  # every listener is still listed
    assert only[18211] == everyone[18211] == 101
    assert everyone[8080] is not None and only[8080] is None
    def walk(*_: object) -> None:
        raise AssertionError("the processes were read for a port nobody listens on")

    monkeypatch.setattr(procfs, "_socket_owners", walk)  # no listener on an asked-about port: no walk
    assert {pid for _, _, pid in procfs.listening_tcp(str(proc), owners_of={9})} == {None}
    monkeypatch.undo()
    ports = probe_ports(str(proc), owners_of=[8080, 8080, 2024])
    assert ports.owners_of == [2024, 8080] and probe_ports(str(proc)).owners_of is None


def test_a_recipes_facts_name_the_holder_of_its_own_port(tmp_path: Path) -> None:
    with socket.socket() as other, socket.socket() as its_own:
        other.bind(("127.0.0.1", 0))
        its_own.bind(("127.0.0.1", 0))
        other.listen()
        its_own.listen()
        recipe = load("qwen3-8b-vllm", sets=[f"container.publish.port={its_own.getsockname()[1]}"]).recipe
        facts = facts_for_recipe(recipe)
        assert facts.ports.owners_of == [its_own.getsockname()[1]]
        by_port = {lis.port: lis for lis in facts.ports.listening}
        assert by_port[its_own.getsockname()[1]].pid == os.getpid()
        assert by_port[other.getsockname()[1]].pid is None
