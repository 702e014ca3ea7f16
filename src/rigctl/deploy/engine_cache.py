"""The engine caches on the host: the directory a unit mounts for its engine's compile and autotune caches
(``render.units.engine_cache_key``, under ``places.engine_cache_root``), whether a boot found it warm, how
large it is, and removing it with the last deployment that used it. Every walk is bounded and never follows
a link: the directory is written by the engine in the container, whoever that runs as."""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from rigctl.host.unit import Unit
from rigctl.host.unitfile import UnitParseError
from rigctl.invocation import path_refusal
from rigctl.places import ENGINE_CACHE_SUBDIR, Scope, engine_cache_root

if TYPE_CHECKING:
    from rigctl.recipe.model import Recipe

WALK_MOST = 50_000  # entries a size or state walk looks at before it stops and says "at least"
DEPTH_MOST = 24


@dataclass(frozen=True)
class CacheSize:
    bytes: int
    files: int
    complete: bool  # False: the walk stopped at WALK_MOST entries (the figures are a floor)

    def to_dict(self) -> dict[str, object]:
        return {"bytes": self.bytes, "files": self.files, "complete": self.complete}


def cache_dir(recipe: Recipe, scope: Scope, manager_env: dict[str, str] | None = None) -> Path | None:
    """The host directory ``recipe``'s unit mounts as its engine cache; None when it keeps none."""
    from rigctl.render.units import engine_cache_key  # noqa: PLC0415 - the renderer's one rule for the key

    key = engine_cache_key(recipe)
    return None if key is None else engine_cache_root(scope, manager_env) / key


def _walk(root: Path, *, stop_at_file: bool) -> CacheSize:
    """Regular files under ``root`` (lstat: links are neither followed nor counted)."""
    total = files = seen = 0
    stack: list[tuple[str, int]] = [(str(root), 0)]
    while stack:
        path, depth = stack.pop()
        try:
            entries = os.scandir(path)
        except OSError:
            continue
        with entries:
            for entry in entries:
                seen += 1
                if seen > WALK_MOST:
                    return CacheSize(total, files, False)
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode) and depth < DEPTH_MOST:
                    stack.append((entry.path, depth + 1))
                elif stat.S_ISREG(st.st_mode):
                    files += 1
                    total += st.st_size
                    if stop_at_file:
                        return CacheSize(total, files, False)
    return CacheSize(total, files, True)


def warmth(path: Path | None) -> str | None:
    """"warm" when the cache holds a file already, "cold" when it is empty or not there yet; None without one."""
    if path is None:
        return None
    return "warm" if _walk(path, stop_at_file=True).files else "cold"


def size(path: Path) -> CacheSize | None:
    """The cache's size; None when it is not there (or not a directory)."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    return _walk(path, stop_at_file=False)


def remove(path: Path) -> str | None:
    """Remove a cache directory (a deployment's last user of it went); returns why not, or None. The root
    above it must pass the trust rule: root never deletes through a directory another user controls."""
    refused = path_refusal(str(path.parent))
    if refused is not None:
        return refused
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return f"{path}: not a directory"
    except FileNotFoundError:
        return None
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    errors: list[str] = []

    def failed(_fn: object, where: str, exc: object) -> None:
        errors.append(f"{where}: {exc[1] if isinstance(exc, tuple) else exc}")

    # shutil.rmtree opens each directory by descriptor on Linux: a link swapped in mid-walk is not followed
    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=failed)
    else:
        shutil.rmtree(path, onerror=failed)
    return "; ".join(errors[:3]) or None


def mounted_keys(units: Iterable[Unit]) -> set[str]:
    """The cache keys ``units`` mount (their ``CacheDirectory=rigctl/engine-cache/KEY``); a unit that cannot
    be read mounts none it could be credited with."""
    prefix = ENGINE_CACHE_SUBDIR + "/"
    keys: set[str] = set()
    for unit in units:
        try:
            entries = unit.merged.all("Service", "CacheDirectory")
        except UnitParseError:
            continue
        keys.update(e.value.strip().removeprefix(prefix) for e in entries if e.value.strip().startswith(prefix))
    return keys


def orphans(root: Path, used: set[str]) -> list[tuple[str, CacheSize | None]]:
    """The cache directories under ``root`` no unit names (``used``: the keys units mount), each with its
    size: only these are walked."""
    try:
        names = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=False))
    except OSError:
        return []
    return [(name, size(root / name)) for name in names[:1000] if name not in used]
