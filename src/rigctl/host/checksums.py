"""sha256 of checkpoint shards at disk speed, with a cache.

Files are hashed in parallel threads: ``hashlib``'s update releases the GIL on large buffers, so N
threads keep N cores busy without the cost of processes (benchmarks/checksums.py measures both against
``sha256sum``). Each thread reads into one reused buffer, so memory stays flat whatever the checkpoint
size. Results are cached by (path, size, mtime_ns) in ``$XDG_CACHE_HOME/rigctl/sha256.json``: a re-check
of an unchanged 180 GB checkpoint costs a stat per shard.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK = 4 * 1024 * 1024  # large enough that the GIL is released for nearly all the work
Progress = Callable[[int], None]  # called with a number of bytes just hashed (from worker threads)


def cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rigctl" / "sha256.json"


def sha256_file(path: Path, progress: Progress | None = None, chunk: int = CHUNK) -> str:
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as fh:
        while True:
            n = fh.readinto(buf)
            if not n:
                break
            digest.update(view[:n])
            if progress is not None:
                progress(n)
    return digest.hexdigest()


@dataclass(frozen=True)
class Hashed:
    path: str
    sha256: str
    size: int
    cached: bool


class ChecksumCache:
    """A JSON map path -> {size, mtime_ns, sha256}. A damaged cache is treated as empty."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self._lock = threading.Lock()
        self._data: dict[str, dict[str, Any]] = {}
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            if isinstance(raw, dict) and isinstance(raw.get("files"), dict):
                self._data = raw["files"]
        except (OSError, ValueError):
            pass  # no cache yet, or unreadable: hash again

    def get(self, path: Path, st: os.stat_result) -> str | None:
        entry = self._data.get(str(path))
        if entry and entry.get("size") == st.st_size and entry.get("mtime_ns") == st.st_mtime_ns:
            value = entry.get("sha256")
            return value if isinstance(value, str) else None
        return None

    def put(self, path: Path, st: os.stat_result, sha: str) -> None:
        with self._lock:
            self._data[str(path)] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "sha256": sha}

    def save(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".sha256.", suffix=".json")
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "files": self._data}, fh)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a cache that cannot be written only costs time next run


def hash_files(
    paths: Sequence[Path],
    *,
    workers: int | None = None,
    cache: ChecksumCache | None = None,
    progress: Progress | None = None,
) -> list[Hashed]:
    """sha256 of each file, in input order. Largest files start first so the cores finish together."""
    stats = {p: p.stat() for p in paths}
    results: dict[Path, Hashed] = {}
    todo: list[Path] = []
    for p in paths:
        st = stats[p]
        hit = cache.get(p, st) if cache is not None else None
        if hit is not None:
            results[p] = Hashed(str(p), hit, st.st_size, cached=True)
            if progress is not None:
                progress(st.st_size)
        else:
            todo.append(p)
    todo.sort(key=lambda p: stats[p].st_size, reverse=True)
    n = max(1, min(workers or os.cpu_count() or 1, len(todo) or 1))

    def one(p: Path) -> Hashed:
        sha = sha256_file(p, progress)
        if cache is not None:
            cache.put(p, stats[p], sha)
        return Hashed(str(p), sha, stats[p].st_size, cached=False)

    if todo:
        with ThreadPoolExecutor(max_workers=n, thread_name_prefix="rigctl-sha256") as pool:
            for h in pool.map(one, todo):
                results[Path(h.path)] = h
        if cache is not None:
            cache.save()
    return [results[p] for p in paths]
