"""OpenSSH as the transport to other hosts: no agent of rigctl's own, just ``ssh`` with connection
sharing so that several commands to one host pay for one handshake.

Every call runs ``ssh`` non-interactively (BatchMode: a missing key fails at once instead of asking for
a password), with a connect timeout, keep-alives that notice a dead peer, and a control socket in a
private directory. ssh exits 255 when it could not reach or log in to the host; any other status is the
remote command's own.

What comes back is the remote host's to choose, so it is read in one place (``capture``): at most
``OUTPUT_LIMIT`` bytes per stream (more cuts the command off and says so), decoded as UTF-8 with
undecodable bytes replaced. Every remote command line is built by ``remote_command``, which quotes
every word, so nothing of ours (or of the hosts file) is ever read by the remote shell as syntax.
"""

from __future__ import annotations

import codecs
import os
import selectors
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from rigctl.errors import InvalidInputError, RigctlError
from rigctl.fleet.inventory import Host, ssh_option_problems
from rigctl.fleet.ssh_options import ALLOW_SSH_OPTIONS, without_own
from rigctl.invocation import current, expand_user
from rigctl.util.proc import Completed, run
from rigctl.util.safefs import MiB, SafeDir, format_size, reason_of

SSH_UNREACHABLE = 255
TIMED_OUT = 124  # like util.proc.run and timeout(1)
NOT_FOUND = 127
OUTPUT_LIMIT = 16 * MiB  # per stream; a real answer (a doctor snapshot, an inventory) is far smaller


class Transport(Protocol):
    def run(self, host: Host, command: str, *, timeout: float) -> Completed: ...


_SOCKET_PATH_MAX = 104  # sun_path is 108 bytes on Linux, 104 on the BSDs and macOS
_CONTROL_NAME_LEN = 41  # "/" + the 40 hex digits of ssh's %C


def control_dir() -> Path:
    """A directory only we can use for control sockets: $XDG_RUNTIME_DIR/rigctl/ssh, else (or when that
    path is too long for a unix socket) /tmp/rigctl-ssh-UID. It, and every directory above it, must pass
    the trust rule (``safefs.SafeDir.at``): one another user owns or made first is refused."""
    me = current()  # as root, a runtime directory inherited from a user is not root's (rigctl.invocation)
    candidates = []
    if me.runtime_given and me.runtime_dir.is_dir():
        candidates.append(me.runtime_dir / "rigctl" / "ssh")
    candidates += [me.tmp_dir / f"rigctl-ssh-{me.uid}", Path(f"/tmp/rigctl-ssh-{me.uid}")]
    base = next(c for c in candidates if len(str(c)) + _CONTROL_NAME_LEN < _SOCKET_PATH_MAX)
    try:
        handle = SafeDir.at(base, create=True, mode=0o700)
    except InvalidInputError as exc:
        raise RigctlError(f"refusing {base} for ssh control sockets: {reason_of(exc)}",
                          fix=f"remove {base} and retry") from None
    with handle:
        info = handle.stat()
        if info.st_uid != me.euid:  # root's own directory, but not this user's: their sockets stay apart
            raise RigctlError(f"{base} is not owned by this user; refusing it for ssh control sockets",
                              fix=f"remove {base} and retry")
        if info.st_mode & 0o077:  # a master connection is a login: nobody else may reach its socket
            os.fchmod(handle.fd, 0o700)
    return base


@dataclass(frozen=True)
class OpenSsh:
    """The real adapter: the ``ssh`` client."""

    control_path_dir: Path
    connect_timeout: int = 10
    control_persist: str = "120s"
    binary: str = "ssh"
    allow_options: bool = False  # the operator's --allow-ssh-options: every option of the inventory passes

    def check(self, host: Host) -> None:
        """Refuse a host with an ssh option (or identity file) the inventory may not set by itself, unless
        ``allow_options`` (the last guard: Inventory.select refuses such a host first, with every problem)."""
        problems = [] if self.allow_options else ssh_option_problems("the inventory", [host])
        if problems:
            raise InvalidInputError(problems, fix=f"pass {ALLOW_SSH_OPTIONS} if you trust the inventory as code")

    @staticmethod
    def default(**kwargs: object) -> OpenSsh:
        return OpenSsh(control_dir(), **kwargs)  # type: ignore[arg-type]

    def argv(self, host: Host, command: str) -> list[str]:
        """ssh's command line for ``command`` on ``host``. ssh keeps the first value it is given for an
        option, so rigctl's own come first, where nothing of the inventory can replace them (and an
        inventory's copy of one is left out besides); the inventory's next; the defaults it may tune last."""
        own = {
            "BatchMode": "yes",
            "ControlMaster": "auto",
            # %C: a hash of (local host, remote host, port, user): short enough for a socket path
            "ControlPath": str(self.control_path_dir / "%C"),
            "ControlPersist": self.control_persist,
            "LogLevel": "ERROR",
        }
        tunable = {"ConnectTimeout": str(self.connect_timeout), "ServerAliveInterval": "5", "ServerAliveCountMax": "3"}
        self.check(host)
        given = [(key, expand_user(value) if key.lower() == "identityfile" else value)
                 for key, value in without_own(host.ssh_options.items())]
        argv = [self.binary, "-T", "-n"]  # -n: never the local stdin (the remote reads /dev/null)
        for key, value in [*own.items(), *given, *tunable.items()]:
            argv += ["-o", f"{key}={value}"]
        if host.port:
            argv += ["-p", str(host.port)]
        if host.user:
            argv += ["-l", host.user]
        if host.identity_file:
            argv += ["-i", expand_user(host.identity_file)]
        return [*argv, "--", host.ssh, command]

    def run(self, host: Host, command: str, *, timeout: float) -> Completed:
        return capture(self.argv(host, command), timeout=timeout)

    def close_all(self) -> None:
        """Close every shared connection whose socket lives in our control directory."""
        for sock in sorted(self.control_path_dir.glob("*")):
            if sock.is_socket():
                run([self.binary, "-o", f"ControlPath={sock}", "-O", "exit", "rigctl-control"], timeout=10)

    def close(self, host: Host) -> None:
        """Ask the shared connection's master to exit (ControlPersist would otherwise keep it a while)."""
        argv = self.argv(host, "true")
        run([*argv[:-3], "-O", "exit", "--", host.ssh], timeout=10)  # [:-3]: without "--", host, command


@dataclass(frozen=True)
class Captured(Completed):
    """A finished ssh call; ``cut``: a stream went past ``OUTPUT_LIMIT`` and the call was stopped there."""

    cut: bool = False


def output_cut(done: Completed) -> str | None:
    """Why ``done``'s output is incomplete, or None."""
    if isinstance(done, Captured) and done.cut:
        return f"the output went past {format_size(OUTPUT_LIMIT)}; it was cut off there and the command stopped"
    return None


def capture(argv: Sequence[str], *, timeout: float, limit: int = OUTPUT_LIMIT) -> Captured:
    """Run ``argv`` with stdin closed; read stdout and stderr together, at most ``limit`` bytes each.

    Past the limit, or past ``timeout`` seconds, the process is killed (rc 124 for the timeout, like
    util.proc.run). Bytes that are not UTF-8 become U+FFFD: remote output never raises here."""
    args = tuple(argv)
    try:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        return Captured(args, NOT_FOUND, "", f"{args[0]}: not found ({exc.strerror})")
    kept: list[list[bytes]] = [[], []]
    sizes = [0, 0]

    def keep(stream: int, data: bytes) -> bool:
        kept[stream].append(data[: max(0, limit - sizes[stream])])
        sizes[stream] += len(data)
        return sizes[stream] <= limit

    finished = _pump(proc, keep, deadline=time.monotonic() + timeout)
    out, err = (b"".join(k).decode("utf-8", errors="replace") for k in kept)
    if finished is None:
        return Captured(args, TIMED_OUT, out, f"timed out after {timeout}s")
    return Captured(args, proc.returncode, out, err, cut=not finished)


def stream(argv: Sequence[str], *, out: Callable[[str], None], err: Callable[[str], None],
           timeout: float | None = None) -> int:
    """Run ``argv`` (stdin closed: the local terminal is never the remote's) and hand its stdout and stderr
    over as they come, as text (bytes that are not UTF-8 become U+FFFD); return its exit status, or
    TIMED_OUT when ``timeout`` seconds passed first (it is killed then). For output a person watches, so
    no size limit."""
    try:
        proc = subprocess.Popen(tuple(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
    except FileNotFoundError as exc:
        err(f"{argv[0]}: not found ({exc.strerror})\n")
        return NOT_FOUND
    decoders = [codecs.getincrementaldecoder("utf-8")(errors="replace") for _ in range(2)]
    sinks = (out, err)

    def hand_over(which: int, data: bytes) -> bool:
        text = decoders[which].decode(data, final=not data)
        if text:
            sinks[which](text)
        return True

    finished = _pump(proc, hand_over, deadline=None if timeout is None else time.monotonic() + timeout)
    return TIMED_OUT if finished is None else proc.returncode


def _pump(proc: subprocess.Popen[bytes], take: Callable[[int, bytes], bool], *, deadline: float | None) -> bool | None:
    """Read ``proc``'s stdout (0) and stderr (1) as they come and give each chunk to ``take`` (an empty
    chunk: that stream ended), until both end. ``take`` returning False, the deadline passing, or an
    exception here kills the process. Always reaps it. True: both streams ended; False: ``take``
    stopped it; None: the deadline passed."""
    assert proc.stdout is not None
    assert proc.stderr is not None
    which = {proc.stdout.fileno(): 0, proc.stderr.fileno(): 1}
    outcome: bool | None = True
    ended = False
    try:
        with selectors.DefaultSelector() as sel:
            for pipe in (proc.stdout, proc.stderr):
                sel.register(pipe, selectors.EVENT_READ)
            while sel.get_map() and outcome:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    outcome = None
                    break
                for key, _ in sel.select(timeout=left):
                    data = os.read(key.fd, 1 << 16)
                    if not data:
                        sel.unregister(key.fileobj)
                    if not take(which[key.fd], data):
                        outcome = False
                        break
        if outcome:  # both streams ended; the process may linger a moment (or, past the deadline, too long)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                proc.wait(timeout=left)
            except subprocess.TimeoutExpired:
                outcome = None
        ended = outcome is True
    finally:
        if not ended:  # cut off, out of time, or interrupted (Ctrl-C) here: stop it
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
        proc.wait()
    return outcome


def remote_command(words: Sequence[str]) -> str:
    """THE way a remote command line is made: every word quoted for the remote login shell, so a word
    (the hosts file's ``rigctl:`` program, a recipe name, a path, an option) is always one word and
    never shell syntax (`;`, `$(...)`, spaces, globs)."""
    return shlex.join(words)


def unreachable(done: Completed) -> bool:
    return done.rc in (SSH_UNREACHABLE, TIMED_OUT)
