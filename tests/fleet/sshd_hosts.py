"""Helpers shared by the fleet tests and benchmarks/fleet_status.py: real sshd instances on 127.0.0.1 as fleet hosts.

Each host is its own ``sshd -D -e -f CONFIG`` on its own port with its own host key; one client key is
authorized for all of them. ``SetEnv`` gives every host its own HOME and XDG_RUNTIME_DIR, so the
user-level unit directories (and therefore what doctor finds there) differ from host to host even
though they share this machine. A "down" host is a port nothing listens on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass
class SshdHost:
    name: str
    port: int
    home: Path
    runtime: Path
    process: subprocess.Popen[bytes] | None


@dataclass
class SshFleet:
    root: Path
    client_key: Path
    hosts: list[SshdHost]
    down_port: int

    def inventory(self, *, names: list[str] | None = None, include_down: bool = True, rigctl: str | None = None,
                  extra: str = "") -> Path:
        lines = ["defaults:", f"  identity_file: {self.client_key}"]
        if rigctl:
            lines.append(f"  rigctl: {rigctl}")
        lines.append("hosts:")
        for host in self.hosts:
            if names is None or host.name in names:
                lines += [f"  - name: {host.name}", "    ssh: 127.0.0.1", f"    port: {host.port}",
                          "    tags: [lab]"]
        if include_down:
            lines += ["  - name: down", "    ssh: 127.0.0.1", f"    port: {self.down_port}", "    tags: [lab]"]
        path = self.root / f"hosts-{len(list(self.root.glob('hosts-*.yaml')))}.yaml"
        path.write_text("\n".join(lines) + "\n" + extra)
        return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_listening(port: int, proc: subprocess.Popen[bytes], deadline_s: float = 10.0) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise RuntimeError(f"sshd on {port} exited {proc.returncode}: {err}")
        with socket.socket() as s:
            s.settimeout(0.2)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"sshd on {port} did not listen within {deadline_s}s")


_CLIENT_CONFIG: list[Path] = []  # the ssh_config of this test process's ssh, once made


def client_config(root: Path) -> Path:
    """Stand in for the operator's ssh_config: put an ``ssh`` first on this process's PATH (so on every
    rigctl it starts) that runs the real one with ``-F`` a config taking these hosts' keys, new on every
    run, without recording them. A config's values rank below the command line's, as the operator's
    ~/.ssh/config does: what rigctl (or an inventory the operator trusts) passes still wins. An inventory
    may not name a known-hosts file itself (fleet.ssh_options)."""
    if _CLIENT_CONFIG:
        return _CLIENT_CONFIG[0]
    real = shutil.which("ssh")
    assert real is not None
    bin_dir = root / "client-bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    config = root / "ssh_config"
    config.write_text("StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n")
    wrapper = bin_dir / "ssh"
    wrapper.write_text(f'#!/bin/sh\nexec {real} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    os.environ["PATH"] = f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"
    _CLIENT_CONFIG.append(config)
    return config


def start_fleet(root: Path, count: int, *, session_env: str = "", launcher: Sequence[str] = ()) -> SshFleet:
    """``session_env``: more ``NAME=VALUE`` words for every session (e.g. a PATH without podman);
    ``launcher``: words that run each sshd (e.g. in a mount namespace of its own), which ends by exec'ing
    the sshd command line it is given after them."""
    root.mkdir(parents=True, exist_ok=True)
    client_config(root)
    key = root / "client_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client_ed25519.pub").read_text())
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation directory
    hosts: list[SshdHost] = []
    for i in range(count):
        name = f"box{i:02d}"
        hdir = root / name
        (hdir / "home").mkdir(parents=True)
        (hdir / "run").mkdir(mode=0o700)
        hostkey = hdir / "ssh_host_ed25519_key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
        port = _free_port()
        config = hdir / "sshd_config"
        config.write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {hostkey}", f"PidFile {hdir / 'sshd.pid'}",
            f"AuthorizedKeysFile {authorized}", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "UsePAM no", "StrictModes no", "PermitRootLogin prohibit-password", "LogLevel ERROR",
            "MaxStartups 100:30:200", "MaxSessions 50",
            f"SetEnv HOME={hdir / 'home'} XDG_RUNTIME_DIR={hdir / 'run'} RIGCTL_TEST_HOST={name} {session_env}".rstrip(),
        ]) + "\n")
        proc = subprocess.Popen([*launcher, SSHD, "-D", "-e", "-f", str(config)], stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        hosts.append(SshdHost(name, port, hdir / "home", hdir / "run", proc))
    for host in hosts:
        assert host.process is not None
        _wait_listening(host.port, host.process)
    return SshFleet(root, key, hosts, _free_port())


def stop_fleet(fleet: SshFleet) -> None:
    for host in fleet.hosts:
        if host.process is not None and host.process.poll() is None:
            host.process.terminate()
            try:
                host.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                host.process.kill()
                host.process.wait(timeout=5)


def sshd_available() -> tuple[bool, str]:
    if not os.access(SSHD, os.X_OK) or shutil.which("ssh") is None:
        return False, "openssh-server/openssh-client not installed (.ci/sshd-hosts.sh installs them)"
    if os.geteuid() != 0:
        return False, "the sshd test hosts run as root (they log in as root on 127.0.0.1)"
    return True, ""




@contextlib.contextmanager
def fleet_or_skip(root: Path, count: int) -> Iterator[SshFleet]:
    """``count`` loopback hosts for a module fixture, with the `need` rule: without sshd, skip locally and
    fail in CI (RIGCTL_REQUIRE_TESTBED=1)."""
    import pytest

    ok, why = sshd_available()
    if not ok:
        if os.environ.get("RIGCTL_REQUIRE_TESTBED") == "1":
            pytest.fail(f"testbed component missing in CI: {why}")
        pytest.skip(why)
    fleet = start_fleet(root, count)
    try:
        yield fleet
    finally:
        stop_fleet(fleet)
