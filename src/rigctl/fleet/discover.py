"""Finding unit files and host facts for the doctor. This is the edge: it reads the filesystem (or a
snapshot shipped back from another host over ssh) and hands plain values to ``doctor.audit``.

A snapshot is a mapping {absolute path: text}. ``collect`` turns a snapshot plus the roots it was taken
from into UnitFiles with their drop-ins, the way quadlet and systemd would see them: the first root
that holds a name wins, drop-ins are applied in file-name order, and a quadlet's generated service also
takes ``NAME.service.d`` drop-ins from the systemd directories.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from rigctl.fleet.doctor import CdiSpec, DoctorFacts, DropIn, UnitFile
from rigctl.fleet.serving import describe
from rigctl.fleet.units import parse
from rigctl.util.proc import run

RootKind = Literal["quadlet", "systemd", "path"]
Scope = Literal["system", "user", "path"]

CDI_DIRS = ("/etc/cdi", "/var/run/cdi")
DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"

# A .service is only worth shipping/parsing when it mentions a container tool or a known engine.
SERVICE_HINT = re.compile(
    r"podman|docker|vllm|sglang|tabby|llama|ollama|text-generation|lmdeploy|trtllm|aphrodite|kobold|mistralrs",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Root:
    path: str
    kind: RootKind
    scope: Scope


def default_roots(home: str, runtime_dir: str | None, uid: int, other_homes: Sequence[str] = ()) -> list[Root]:
    """The directories quadlet and systemd read, highest priority first within each kind and scope."""
    roots = [
        Root("/etc/containers/systemd", "quadlet", "system"),
        Root("/usr/share/containers/systemd", "quadlet", "system"),
        Root("/etc/systemd/system", "systemd", "system"),
        Root("/usr/local/lib/systemd/system", "systemd", "system"),
        Root("/usr/lib/systemd/system", "systemd", "system"),
        Root("/lib/systemd/system", "systemd", "system"),
        Root(f"{home}/.config/containers/systemd", "quadlet", "user"),
    ]
    if runtime_dir:
        roots.append(Root(f"{runtime_dir}/containers/systemd", "quadlet", "user"))
    roots += [
        Root(f"/etc/containers/systemd/users/{uid}", "quadlet", "user"),
        Root("/etc/containers/systemd/users", "quadlet", "user"),
        Root(f"{home}/.config/systemd/user", "systemd", "user"),
        Root("/etc/systemd/user", "systemd", "user"),
        Root("/usr/lib/systemd/user", "systemd", "user"),
    ]
    for other in other_homes:  # as root, other users' units are audited too
        if other.rstrip("/") != home.rstrip("/"):
            roots.append(Root(f"{other}/.config/containers/systemd", "quadlet", "user"))
            roots.append(Root(f"{other}/.config/systemd/user", "systemd", "user"))
    return roots


def path_roots(paths: Iterable[str]) -> list[Root]:
    return [Root(str(Path(p).absolute()), "path", "path") for p in paths]


def _under(path: str, root: str) -> bool:
    return path.startswith(root.rstrip("/") + "/")


def _in_dropin_dir(path: str) -> bool:
    return PurePosixPath(path).parent.name.endswith(".d")


def _unit_in_root(path: str, root: Root, all_roots: Sequence[Root]) -> bool:
    if root.kind == "path":
        if path == root.path:
            return True
        return _under(path, root.path) and not _in_dropin_dir(path)
    if not _under(path, root.path) or _in_dropin_dir(path):
        return False
    if root.kind == "systemd":
        # systemd does not recurse (subdirectories are *.wants, *.requires and drop-ins)
        return str(PurePosixPath(path).parent) == root.path.rstrip("/") and path.endswith(".service")
    # quadlet recurses, but a deeper root (…/users) belongs to another scope
    deeper = [r for r in all_roots if r is not root and _under(r.path, root.path) and _under(path, r.path)]
    return path.endswith(".container") and not deeper


def _dropins(tree: Mapping[str, str], roots: Sequence[Root], dirnames: Sequence[str]) -> tuple[DropIn, ...]:
    """``*.conf`` under any of ``dirnames`` in any root; the first root wins for a given file name;
    applied in order of ``dirnames`` (type-level first), then by file name."""
    chosen: dict[tuple[int, str], str] = {}
    for order, dirname in enumerate(dirnames):
        for root in roots:
            for path in tree:
                p = PurePosixPath(path)
                if p.suffix != ".conf" or p.parent.name != dirname or not _under(path, root.path):
                    continue
                if root.kind != "quadlet" and str(p.parent.parent) != root.path.rstrip("/"):
                    continue
                chosen.setdefault((order, p.name), path)
    return tuple(DropIn(path, tree[path]) for _, path in sorted(chosen.items()))


def collect(tree: Mapping[str, str], roots: Sequence[Root]) -> list[UnitFile]:
    units: list[UnitFile] = []
    seen: set[tuple[str, str]] = set()
    for root in roots:
        for path in sorted(tree):
            if not _unit_in_root(path, root, roots):
                continue
            text = tree[path]
            name = PurePosixPath(path).name
            if not text.strip():
                continue  # empty or masked (a link to /dev/null reads as empty)
            if root.kind != "path" and (root.scope, name) in seen:
                continue  # shadowed by a higher-priority directory
            if name.endswith(".service") and not SERVICE_HINT.search(text):
                continue
            seen.add((root.scope, name))
            same_scope = [r for r in roots if r.scope == root.scope]
            if name.endswith(".container"):
                service = _service_name(path, text)
                dirnames = ["container.d", f"{name}.d", "service.d", f"{service}.d"]
            else:
                dirnames = ["service.d", f"{name}.d"]
            units.append(UnitFile(path, text, _dropins(tree, same_scope, dirnames), root.scope))
    return units


def _service_name(path: str, text: str) -> str:
    for entry in parse(path, text).entries:
        if entry.section == "Container" and entry.key == "ServiceName" and entry.value:
            return entry.value if entry.value.endswith(".service") else entry.value + ".service"
    return PurePosixPath(path).stem + ".service"


# --- local snapshot ----------------------------------------------------------------------------------


def _read(path: Path) -> str | None:
    try:
        if path.is_symlink() and os.path.realpath(path) == "/dev/null":
            return ""
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def _wanted(name: str, parent: str) -> bool:
    return name.endswith((".container", ".service")) or (name.endswith(".conf") and parent.endswith(".d"))


def local_snapshot(roots: Sequence[Root]) -> dict[str, str]:
    tree: dict[str, str] = {}
    for root in roots:
        base = Path(root.path)
        if base.is_file():
            text = _read(base)
            if text is not None:
                tree[str(base)] = text
            continue
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            # systemd's *.wants/*.requires hold links to units found elsewhere; skip them
            dirnames[:] = sorted(d for d in dirnames if not d.endswith((".wants", ".requires", ".upholds")))
            for filename in filenames:
                if not _wanted(filename, dirpath):
                    continue
                path = Path(dirpath, filename)
                text = _read(path)
                if text is None:
                    continue
                if filename.endswith(".service") and not SERVICE_HINT.search(text):
                    continue
                tree[str(path)] = text
    return tree


def local_roots() -> list[Root]:
    home = os.path.expanduser("~")
    uid = os.getuid()
    others: list[str] = []
    if uid == 0 and Path("/home").is_dir():
        others = sorted(str(p) for p in Path("/home").iterdir() if p.is_dir())
    return default_roots(home, os.environ.get("XDG_RUNTIME_DIR"), uid, others)


# --- host facts --------------------------------------------------------------------------------------

_NVRM = re.compile(r"Kernel Module(?: for \S+)?\s+(\d+\.\d+(?:\.\d+)?)")


def driver_from_proc(text: str) -> str | None:
    match = _NVRM.search(text)
    return match.group(1) if match else None


def _driver_from_nvml() -> str | None:
    try:
        import pynvml  # noqa: PLC0415 - only when there is no /proc/driver/nvidia: keeps doctor light

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # NVMLError_LibraryNotFound and friends: no driver, the CDI checks are skipped
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def read_cdi_specs(dirs: Sequence[str] = CDI_DIRS) -> tuple[CdiSpec, ...]:
    specs: list[CdiSpec] = []
    for d in dirs:
        base = Path(d)
        if not base.is_dir():
            continue
        for path in sorted(base.iterdir()):
            if path.suffix in (".yaml", ".yml", ".json"):
                text = _read(path)
                if text is not None:
                    specs.append(CdiSpec(str(path), text))
    return tuple(specs)


def unpinned_images(units: Sequence[UnitFile]) -> list[str]:
    images: list[str] = []
    for unit in units:
        spec = describe(unit.kind, unit.merged())
        if spec and spec.image and "@sha256:" not in spec.image and spec.runner in ("quadlet", "podman"):
            images.append(spec.image)
    return sorted(set(images))


def local_image_digests(images: Sequence[str]) -> dict[str, str]:
    """Digests of images already on this host (podman), so `--fix` can pin what actually runs."""
    digests: dict[str, str] = {}
    if not images or shutil.which("podman") is None:
        return digests
    for image in images:
        done = run(["podman", "image", "inspect", "--format", "{{.Digest}}", image], timeout=20)
        digest = done.stdout.strip()
        if done.ok and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
            digests[image] = digest
    return digests


def local_facts(units: Sequence[UnitFile], *, driver_file: str = DRIVER_VERSION_FILE,
                cdi_dirs: Sequence[str] = CDI_DIRS) -> DoctorFacts:
    text = _read(Path(driver_file))
    version = driver_from_proc(text) if text else None
    source = driver_file if version else None
    if version is None:
        version = _driver_from_nvml()
        source = "nvml" if version else None
    return DoctorFacts(
        driver_version=version, driver_source=source, cdi_specs=read_cdi_specs(cdi_dirs),
        image_digests=local_image_digests(unpinned_images(units)),
    )


# --- writing -----------------------------------------------------------------------------------------


def write_atomic(path: str, text: str) -> str:
    """Replace a file atomically (temp file in the same directory, fsync, rename), keeping the old one
    as ``PATH.bak``. Returns the backup's path. Links are followed: the file they point to is replaced."""
    target = Path(os.path.realpath(path))
    info = target.stat()
    backup = target.with_name(target.name + ".bak")
    shutil.copy2(target, backup)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, info.st_mode & 0o7777)
        with contextlib.suppress(PermissionError):  # not root: the file stays ours, as it was
            os.chown(tmp, info.st_uid, info.st_gid)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself must survive a crash
    finally:
        os.close(dir_fd)
    return str(backup)
