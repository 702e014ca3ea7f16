"""OpenSSH as the transport to other hosts: no agent of rigctl's own, just ``ssh`` with connection
sharing so that several commands to one host pay for one handshake.

Every call runs ``ssh`` non-interactively (BatchMode: a missing key fails at once instead of asking for
a password), with a connect timeout, keep-alives that notice a dead peer, and a control socket in a
private directory. ssh exits 255 when it could not reach or log in to the host; any other status is the
remote command's own.
"""

from __future__ import annotations

import os
import shlex
import stat
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rigctl.errors import RigctlError
from rigctl.fleet.inventory import Host
from rigctl.util.proc import Completed, run

SSH_UNREACHABLE = 255


class Transport(Protocol):
    def run(self, host: Host, command: str, *, timeout: float) -> Completed: ...


_SOCKET_PATH_MAX = 104  # sun_path is 108 bytes on Linux, 104 on the BSDs and macOS
_CONTROL_NAME_LEN = 41  # "/" + the 40 hex digits of ssh's %C


def control_dir() -> Path:
    """A directory only we can use for control sockets: $XDG_RUNTIME_DIR/rigctl/ssh, else (or when that
    path is too long for a unix socket) /tmp/rigctl-ssh-UID. Refuses a directory another user owns."""
    candidates = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and Path(runtime).is_dir():
        candidates.append(Path(runtime) / "rigctl" / "ssh")
    candidates += [Path(tempfile.gettempdir()) / f"rigctl-ssh-{os.getuid()}", Path(f"/tmp/rigctl-ssh-{os.getuid()}")]
    base = next(c for c in candidates if len(str(c)) + _CONTROL_NAME_LEN < _SOCKET_PATH_MAX)
    base.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = base.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise RigctlError(f"{base} is not a directory owned by this user; refusing it for ssh control sockets",
                          fix=f"remove {base} and retry")
    if info.st_mode & 0o077:
        base.chmod(0o700)
    return base


@dataclass(frozen=True)
class OpenSsh:
    """The real adapter: the ``ssh`` client."""

    control_path_dir: Path
    connect_timeout: int = 10
    control_persist: str = "120s"
    binary: str = "ssh"
    extra_options: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def default(**kwargs: object) -> OpenSsh:
        return OpenSsh(control_dir(), **kwargs)  # type: ignore[arg-type]

    def argv(self, host: Host, command: str) -> list[str]:
        options: dict[str, str] = {
            "BatchMode": "yes",
            "ConnectTimeout": str(self.connect_timeout),
            "ServerAliveInterval": "5",
            "ServerAliveCountMax": "3",
            "ControlMaster": "auto",
            # %C: a hash of (local host, remote host, port, user): short enough for a socket path
            "ControlPath": str(self.control_path_dir / "%C"),
            "ControlPersist": self.control_persist,
            "LogLevel": "ERROR",
        }
        options.update(dict(self.extra_options))
        options.update(host.ssh_options)
        argv = [self.binary, "-T"]
        for key, value in options.items():
            argv += ["-o", f"{key}={value}"]
        if host.port:
            argv += ["-p", str(host.port)]
        if host.user:
            argv += ["-l", host.user]
        if host.identity_file:
            argv += ["-i", os.path.expanduser(host.identity_file)]
        return [*argv, "--", host.ssh, command]

    def run(self, host: Host, command: str, *, timeout: float) -> Completed:
        return run(self.argv(host, command), timeout=timeout)

    def close_all(self) -> None:
        """Close every shared connection whose socket lives in our control directory."""
        for sock in sorted(self.control_path_dir.glob("*")):
            if sock.is_socket():
                run([self.binary, "-o", f"ControlPath={sock}", "-O", "exit", "rigctl-control"], timeout=10)

    def close(self, host: Host) -> None:
        """Ask the shared connection's master to exit (ControlPersist would otherwise keep it a while)."""
        argv = self.argv(host, "true")
        run([*argv[:-2], "-O", "exit", host.ssh], timeout=10)


def remote_command(argv: Sequence[str]) -> str:
    """One argv as a command line for the remote login shell."""
    return shlex.join(argv)


def unreachable(done: Completed) -> bool:
    return done.rc in (SSH_UNREACHABLE, 124)
