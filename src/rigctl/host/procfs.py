"""Listening TCP sockets and process names read from /proc, as psutil reports them on Linux.

psutil costs tens of milliseconds to import, a large part of what a whole `rigctl preflight` took, for
the two things the probes ask of it: which TCP ports are listening and who holds them
(``psutil.net_connections``), and a process's name (``psutil.Process(pid).name()``). Both are a few
reads of /proc, done here the way psutil does them (tests/preflight/test_procfs.py compares the two on the
live host). Where /proc cannot be read (not Linux) the callers fall back to psutil.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Collection

PROC = "/proc"
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column
TASK_COMM_LEN = 15  # /proc/PID/stat's name is cut to 15 bytes: psutil then looks at the command line


class ProcUnavailable(Exception):
    """/proc/net/tcp cannot be read here: use psutil instead."""


def _address(hex_ip: str) -> str:
    """/proc/net/tcp's address: 32-bit words in host byte order, as hex (4 bytes IPv4, 16 IPv6)."""
    raw = bytes.fromhex(hex_ip)
    if len(raw) not in {4, 16}:
        raise ValueError(f"not an IPv4 or IPv6 address: {hex_ip!r:.60}")
    if sys.byteorder == "little":  # each word was printed as a native integer: put its bytes back in order
        raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def _listening(path: str) -> list[tuple[str, int, str]]:
    """(address, port, inode) of each listening socket in one /proc/net/tcp* table."""
    out = []
    with open(path, encoding="ascii", errors="replace") as table:
        table.readline()  # the header
        for line in table:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            hex_ip, _, hex_port = fields[1].partition(":")
            port = int(hex_port, 16)
            if port:  # port 0: not bound to anything a service could collide with (psutil skips it too)
                out.append((_address(hex_ip), port, fields[9]))
    return out


def _socket_owners(wanted: set[str], proc: str) -> dict[str, int]:
    """inode -> the PID holding it, for the inodes in ``wanted``. A socket held by several processes
    (a forking server) is named by the last PID listed, as psutil names it; processes this user may
    not inspect are skipped (their sockets have no PID, as with psutil and netstat)."""
    owners: dict[str, int] = {}
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        fd_dir = f"{proc}/{entry}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:  # gone, or not ours to read
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            if target.startswith("socket:[") and target[8:-1] in wanted:
                owners[target[8:-1]] = int(entry)
    return owners


def listening_tcp(proc: str = PROC, owners_of: Collection[int] | None = None) -> list[tuple[str, int, int | None]]:
    """(address, port, pid or None) of every listening TCP socket, IPv4 then IPv6, in table order.
    ``owners_of``: the ports whose holders are looked up (None: every port's). Finding a holder means
    reading every file descriptor link of every process, which on a busy host costs more than the rest
    of a preflight's gather; a recipe needs only its own port's."""
    try:
        sockets = _listening(f"{proc}/net/tcp")
    except FileNotFoundError as exc:
        raise ProcUnavailable(str(exc)) from exc
    if os.path.exists(f"{proc}/net/tcp6"):  # absent where IPv6 is disabled
        sockets += _listening(f"{proc}/net/tcp6")
    wanted = {inode for _, port, inode in sockets if owners_of is None or port in owners_of}
    owners = _socket_owners(wanted, proc) if wanted else {}
    return [(address, port, owners.get(inode)) for address, port, inode in sockets]


def process_name(pid: int, proc: str = PROC) -> str | None:
    """The name psutil gives a process: /proc/PID/stat's, or where that was cut to 15 characters, the
    base name of its first argument when that begins with it. None: gone, or not visible here."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    name = stat[stat.find(b"(") + 1 : stat.rfind(b")")].decode("utf-8", "surrogateescape")
    if len(name) < TASK_COMM_LEN:
        return name
    try:
        with open(f"{proc}/{pid}/cmdline", "rb") as f:
            data = f.read().decode("utf-8", "surrogateescape")
    except OSError:
        return name
    sep = "\0" if data.endswith("\0") else " "
    args = data.removesuffix(sep).split(sep)
    if sep == "\0" and len(args) == 1 and " " in data:  # a process that rewrote its command line
        args = data.removesuffix(sep).split(" ")
    first = os.path.basename(args[0]) if args and args[0] else ""
    return first if first.startswith(name) else name


PROCESS_SCAN_LIMIT = 65536  # /proc entries read at most when walking a process tree


def process_tree(root: int, proc: str = PROC) -> set[int]:
    """``root`` and every process below it, from each process's parent in /proc/PID/stat.

    An engine's GPU memory is held by its workers (vLLM's EngineCore and one worker per GPU under tensor
    parallelism), children of the process podman names as the container's, which often holds none. The
    name in /proc/PID/stat may hold spaces and parentheses: the parent is read after the last ``)``.
    Gone or unreadable processes are left out; a system without /proc gives just ``{root}``.
    """
    children: dict[int, list[int]] = {}
    try:
        entries = os.scandir(proc)
    except OSError:
        return {root}
    with entries:
        for count, entry in enumerate(entries):
            if count >= PROCESS_SCAN_LIMIT:
                break
            if not entry.name.isdigit():
                continue
            try:
                with open(f"{proc}/{entry.name}/stat", "rb") as f:
                    stat = f.read(4096)
                parent = int(stat[stat.rfind(b")") + 2 :].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    tree, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in tree:
                tree.add(child)
                todo.append(child)
    return tree


def cpu_ticks(pids: Collection[int], proc: str = PROC) -> int:
    """User + system CPU time of ``pids`` in clock ticks (/proc/PID/stat's utime and stime, after the name):
    a warming engine that prints nothing but computes (a compile, an autotune) still spends it. Gone or
    unreadable processes count 0."""
    total = 0
    for pid in list(pids)[:PROCESS_SCAN_LIMIT]:
        try:
            with open(f"{proc}/{pid}/stat", "rb") as f:
                stat = f.read(4096)
            fields = stat[stat.rfind(b")") + 2 :].split()
            total += int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted after the name
        except (OSError, ValueError, IndexError):
            continue
    return total
