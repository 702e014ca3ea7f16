"""Probes of the host other than NVML: /dev/shm, paths and disks, podman, CDI, systemd, ports.

Each probe returns a fact value and never raises for a condition of the host (a missing socket, a
directory that does not exist); ``gather_facts`` still isolates them, so a probe bug costs its section
only. Roots (``/etc/cdi``, ``/var/lib/systemd/linger``, ...) are parameters so tests can point them at
temporary directories instead of patching the file system.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

from rigctl.host import procfs
from rigctl.host.cdi import CDI_DIRS, read_spec
from rigctl.host.early import (
    IMAGES_TIMEOUT_S,
    VERSION_TIMEOUT_S,
    EarlyPodman,
    images_argv,
    podman_socket_candidates,
    version_argv,
)
from rigctl.host.facts import (
    IMAGE_ENV_MAX,
    Cdi,
    FileEntry,
    Listener,
    PathProbe,
    PodmanFacts,
    PodmanImage,
    Ports,
    Shm,
    SystemdFacts,
)
from rigctl.host.quadlet import QuadletAsked, ask_version, other_generator
from rigctl.invocation import current
from rigctl.places import Scope, default_scope
from rigctl.util.proc import CANCELLED, Started, run

MAX_FILES = 20_000  # a checkpoint has hundreds of shards at most; a bigger directory is not one

LIB_DIRS = (
    "/usr/lib/x86_64-linux-gnu",
    "/usr/lib/aarch64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
    "/usr/local/nvidia/lib64",
    "/usr/local/nvidia/lib",
)


def probe_shm(path: str = "/dev/shm") -> Shm:
    try:
        st = os.statvfs(path)
    except OSError as exc:
        return Shm(path=path, error=f"{exc.strerror or exc}")
    return Shm(path=path, total_bytes=st.f_blocks * st.f_frsize, free_bytes=st.f_bavail * st.f_frsize)


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def probe_path(path: str) -> PathProbe:
    """Existence, free space where it lives (or would), and a directory's top-level regular files."""
    p = Path(path)
    probed = _nearest_existing(p)
    free = total = None
    error = None
    try:
        st = os.statvfs(probed)
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    except OSError as exc:
        error = f"statvfs {probed}: {exc.strerror or exc}"
    files: list[FileEntry] | None = None
    truncated = False
    is_dir = p.is_dir()
    if is_dir:
        files = []
        try:
            with os.scandir(p) as it:
                for entry in it:
                    if len(files) >= MAX_FILES:
                        truncated = True
                        break
                    try:
                        if entry.is_file():  # follows symlinks: HF caches link shards into blobs/
                            st2 = entry.stat()
                            files.append(FileEntry(name=entry.name, size=st2.st_size, mtime_ns=st2.st_mtime_ns))
                    except OSError:
                        continue  # a dangling link is a missing shard, reported by the checkpoint check
        except OSError as exc:
            error = f"cannot list {p}: {exc.strerror or exc}"
        files.sort(key=lambda f: f.name)
    return PathProbe(path=path, exists=p.exists(), is_dir=is_dir, probed=str(probed), free_bytes=free,
                     total_bytes=total, files=files, files_truncated=truncated, error=error)


# --- podman ----------------------------------------------------------------------------------------


def _image_from_api(attrs: dict[str, Any]) -> PodmanImage:
    return PodmanImage(
        id=str(attrs.get("Id", "")),
        digest=attrs.get("Digest"),
        repo_digests=list(attrs.get("RepoDigests") or []),
        names=list(attrs.get("RepoTags") or attrs.get("Names") or []),
    )


def _probe_podman_api(socket: str) -> tuple[str | None, list[PodmanImage]] | str:
    """(version, images) through podman-py, or why the API did not answer."""
    try:
        from podman import PodmanClient  # noqa: PLC0415 - lazy: 0.3 s import, only when a socket exists
        from podman.errors import APIError, PodmanError  # noqa: PLC0415
    except ImportError as exc:  # pragma: no cover - podman-py is a dependency
        return f"podman-py unavailable: {exc}"
    try:
        with PodmanClient(base_url=f"unix://{socket}", timeout=5) as client:
            version = client.version().get("Version")  # type: ignore[no-untyped-call] # podman-py is untyped
            images = [_image_from_api(img.attrs) for img in client.images.list()]
    except (APIError, PodmanError, OSError) as exc:
        return f"API at {socket} did not answer: {exc}"
    except Exception as exc:  # requests' errors are not PodmanErrors; any of them means "no API here"
        return f"API at {socket} did not answer: {type(exc).__name__}: {exc}"
    return (str(version) if version else None), images


def _quadlet_version(asked: Started | None) -> str | None:
    if asked is None:
        return None
    done = asked.wait()
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", done.stdout + done.stderr)
    return match.group(1) if done.ok and match else None


def probe_podman(sockets: Sequence[str] | None = None, podman_bin: str = "podman",
                 started: EarlyPodman | None = None, *, scope: Scope | None = None,
                 quadlet: QuadletAsked | None = None) -> PodmanFacts:
    """Podman (``_probe_podman``) and the quadlet generator of ``scope`` (default: root's system, anyone
    else's user), whose ``-version`` runs meanwhile (``quadlet``: already asked, by ``host.early``)."""
    scope = scope or default_scope()
    asked = quadlet if quadlet is not None and quadlet.scope == scope else ask_version(scope)
    try:
        found = _probe_podman(sockets, podman_bin, started)
        found = found.model_copy(update={"images": with_env(found.images, podman_bin)}) if found.images else found
    except BaseException:
        asked.cancel()  # reaped, not left behind
        raise
    return found.model_copy(update={"quadlet": asked.path, "quadlet_version": _quadlet_version(asked.version),
                                    "quadlet_scope": scope,
                                    "quadlet_elsewhere": other_generator(scope) if asked.path is None else None})


INSPECT_MAX = 64  # images inspected for their Env in one call; a box with more is a registry, not a rig
INSPECT_TIMEOUT_S = 20


def with_env(images: list[PodmanImage], podman_bin: str = "podman") -> list[PodmanImage]:
    """``images`` with their config's Env (what CUDA and NCCL they declare), from one `podman image inspect`
    of them all; an image it does not answer for keeps env None."""
    ids = [i.id for i in images[:INSPECT_MAX] if re.fullmatch(r"[0-9a-f]{12,64}", i.id)]
    if not ids:
        return images
    done = run([podman_bin, "image", "inspect", "--format", "json", "--", *ids], timeout=INSPECT_TIMEOUT_S)
    try:
        inspected = json.loads(done.stdout) if done.ok else []
    except ValueError:
        return images
    env: dict[str, list[str]] = {}
    for item in inspected if isinstance(inspected, list) else []:
        config = item.get("Config") if isinstance(item, dict) else None
        values = config.get("Env") if isinstance(config, dict) else None
        if isinstance(item, dict) and isinstance(values, list):
            env[str(item.get("Id", ""))] = [str(v) for v in values[:IMAGE_ENV_MAX]]
    return [i.model_copy(update={"env": env[i.id]}) if i.id in env else i for i in images]


def _probe_podman(sockets: Sequence[str] | None, podman_bin: str, started: EarlyPodman | None) -> PodmanFacts:
    """Podman's version and local images: through the API socket (podman-py) when one answers,
    otherwise through the CLI. ``started``: the CLI calls, already running (``early.start_podman_cli``)."""
    api_error = None
    for socket in podman_socket_candidates() if sockets is None else sockets:
        if not os.path.exists(socket):
            continue
        answer = _probe_podman_api(socket)
        if isinstance(answer, str):
            api_error = answer
            continue
        if started is not None:
            started.cancel()
        version, images = answer
        return PodmanFacts(installed=True, version=version, api_socket=socket, api_ok=True, images_via="api",
                           images=images)
    # the two CLI calls do not depend on each other: they run side by side (each costs tens of ms)
    cli = started or EarlyPodman(podman_bin, Started(images_argv(podman_bin), timeout=IMAGES_TIMEOUT_S),
                                 Started(version_argv(podman_bin), timeout=VERSION_TIMEOUT_S))
    podman_bin = cli.podman_bin
    ver = cli.version.wait()
    listed = cli.images.wait()
    if ver.rc == 127:
        return PodmanFacts(installed=False, error=f"{podman_bin} not found on PATH")
    version = None
    try:
        data = json.loads(ver.stdout)
        version = (data.get("Client") or {}).get("Version") or (data.get("Server") or {}).get("Version")
    except (ValueError, AttributeError):
        if ver.rc != CANCELLED:  # an old podman without `version --format json`; a cancelled call asks nothing
            first = run([podman_bin, "--version"], timeout=15)
            match = re.search(r"(\d+\.\d+(?:\.\d+)?)", first.stdout)
            version = match.group(1) if match else None
    local: list[PodmanImage] = []
    error = api_error
    if listed.ok:
        try:
            local = [_image_from_api(item) for item in json.loads(listed.stdout or "[]")]
        except (ValueError, TypeError) as exc:
            error = f"cannot parse `podman images --format json`: {exc}"
    else:
        error = listed.describe()
    return PodmanFacts(installed=True, version=version, images_via="cli" if listed.ok else "none",
                       images=local, error=error)


# --- CDI -------------------------------------------------------------------------------------------


def probe_cdi(driver_version: str | None, dirs: Sequence[str] = CDI_DIRS,
              lib_dirs: Sequence[str] = LIB_DIRS) -> Cdi:
    """The specs (each read by ``cdi.read_spec``) and when the driver's library was installed: what
    ``cdi.stale`` judges, for preflight and doctor alike."""
    specs = []
    for d in dirs:
        for name in sorted(glob.glob(os.path.join(d, "*"))):
            if name.endswith((".yaml", ".yml", ".json")):
                specs.append(read_spec(Path(name)))
    library = installed = None
    if driver_version:
        for d in lib_dirs:
            candidate = Path(d) / f"libnvidia-ml.so.{driver_version}"
            try:
                installed = candidate.stat().st_mtime_ns
            except OSError:
                continue
            library = str(candidate)
            break
    return Cdi(dirs=list(dirs), specs=specs, driver_library=library, driver_installed_ns=installed)


# --- systemd, ports --------------------------------------------------------------------------------


def manager_answers(socket_path: str, timeout: float = 1.0) -> bool:
    """Whether a systemd manager listens on its private socket: a connection is accepted (or refused to this
    user by its permissions, which only a live socket has). A directory or a stale socket file left behind
    says nothing: /run/systemd/system exists wherever someone made it (a container, this project's
    testbed), and a socket whose manager died refuses the connection."""
    import socket  # noqa: PLC0415 - only this probe

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(socket_path)
        except PermissionError:
            return True
        except OSError:  # missing, refused, not a socket, a path too long for sun_path
            return False
    return True


def probe_systemd(run_dir: str = "/run/systemd", linger_dir: str = "/var/lib/systemd/linger",
                  runtime_dir: str | None = None) -> SystemdFacts:
    """Each manager is asked: it counts when its private socket accepts a connection (the system manager's
    in ``run_dir``, a user manager's in its runtime directory), and the system one only beside
    ``run_dir``/system, which systemd makes when it boots as PID 1. No subprocess, no D-Bus."""
    me = current()
    uid, user = me.euid, me.user_name()
    runtime = runtime_dir or str(me.runtime_dir)
    user_manager = manager_answers(os.path.join(runtime, "systemd", "private"))
    booted = os.path.isdir(os.path.join(run_dir, "system"))
    system_manager = booted and manager_answers(os.path.join(run_dir, "private"))
    linger = None if user is None else os.path.exists(os.path.join(linger_dir, user))
    return SystemdFacts(system_manager=system_manager, user_manager=user_manager, user=user, uid=uid, linger=linger)


def probe_ports(proc: str = procfs.PROC, owners_of: Collection[int] | None = None) -> Ports:
    """Every listening TCP socket, with the process that holds it where this user may see it (for the
    ports in ``owners_of`` only, when given): read from /proc (``procfs``, as psutil would report it,
    without importing psutil), or through psutil where there is no /proc."""
    looked_up = None if owners_of is None else sorted(set(owners_of))
    try:
        found = procfs.listening_tcp(proc, owners_of)
    except procfs.ProcUnavailable:
        return _probe_ports_psutil()
    except (OSError, ValueError) as exc:  # a table that cannot be read or parsed
        return Ports(error=f"cannot list sockets: {exc}")
    names: dict[int, str | None] = {}
    seen: set[tuple[str, int]] = set()
    out: list[Listener] = []
    for address, port, pid in found:
        if (address, port) in seen:
            continue
        seen.add((address, port))
        if pid is not None and pid not in names:
            names[pid] = procfs.process_name(pid, proc)
        out.append(Listener(address=address, port=port, pid=pid, process=None if pid is None else names[pid]))
    out.sort(key=lambda lis: (lis.port, lis.address))
    return Ports(listening=out, owners_of=looked_up)


def _probe_ports_psutil() -> Ports:
    import psutil  # noqa: PLC0415 - lazy: only where /proc cannot answer

    try:
        conns = psutil.net_connections(kind="inet")
    except (psutil.Error, OSError) as exc:
        return Ports(error=f"cannot list sockets: {exc}")
    names: dict[int, str | None] = {}
    seen: set[tuple[str, int]] = set()
    out: list[Listener] = []
    for c in conns:
        if c.status != psutil.CONN_LISTEN or not c.laddr:
            continue
        address, port = str(c.laddr.ip), int(c.laddr.port)
        if (address, port) in seen:
            continue
        seen.add((address, port))
        name = None
        if c.pid is not None:
            if c.pid not in names:
                try:
                    names[c.pid] = psutil.Process(c.pid).name()
                except (psutil.Error, OSError):
                    names[c.pid] = None
            name = names[c.pid]
        out.append(Listener(address=address, port=port, pid=c.pid, process=name))
    out.sort(key=lambda lis: (lis.port, lis.address))
    return Ports(listening=out)


# An image reference as podman writes one; anything else (an option, a NUL, a space) is never passed on.
IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,511}")


def local_image_digests(images: Sequence[str]) -> dict[str, str]:
    """Digests of images already on this host (podman), so `--fix` can pin what actually runs."""
    digests: dict[str, str] = {}
    if not images or shutil.which("podman") is None:
        return digests
    for image in images:
        if not IMAGE_REF.fullmatch(image):
            continue
        done = run(["podman", "image", "inspect", "--format", "{{.Digest}}", "--", image], timeout=20)
        digest = done.stdout.strip()
        if done.ok and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            digests[image] = digest
    return digests
