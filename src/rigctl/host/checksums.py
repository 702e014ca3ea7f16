"""sha256 of checkpoint shards at disk speed, with a cache.

Files are hashed in parallel threads: ``hashlib``'s update releases the GIL on large buffers, so N
threads keep N cores busy without the cost of processes (benchmarks/checksums.py measures both against
``sha256sum``). Each thread reads into one reused buffer, so memory stays flat whatever the checkpoint
size. Results are cached by (path, size, mtime_ns) in ``$XDG_CACHE_HOME/rigctl/sha256.json``: a re-check
of an unchanged 180 GB checkpoint costs a stat per shard.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import stat
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rigctl.errors import InvalidInputError
from rigctl.invocation import current
from rigctl.util.jsonfile import load_json
from rigctl.util.safefs import RECORD_LIMIT, kind_of, open_error, refuse, write_own

CHUNK = 4 * 1024 * 1024  # large enough that the GIL is released for nearly all the work
HashProgress = Callable[[int], None]  # called with a number of bytes just hashed (from worker threads)


def cache_path() -> Path:
    return current().cache_home / "rigctl" / "sha256.json"


def sha256_file(path: Path, progress: HashProgress | None = None, chunk: int = CHUNK) -> str:
    """sha256 of a regular file (links followed: HF caches link shards into blobs/). Anything else — a
    FIFO would block forever, a device never ends — is refused without reading it."""
    digest = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise open_error(path, exc, nofollow=False) from None
    with open(fd, "rb", buffering=0) as fh:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise refuse(path, f"{kind_of(mode)}, not a regular file; rigctl hashes only regular files")
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


_SHA256 = re.compile(r"[0-9a-f]{64}")


def _entries(raw: Any) -> dict[str, dict[str, Any]]:
    """The well-formed entries of a cache document; anything else in it is dropped (hashed again)."""
    files = raw.get("files") if isinstance(raw, dict) else None
    if not isinstance(files, dict):
        return {}
    return {
        path: entry for path, entry in files.items()
        if isinstance(entry, dict) and type(entry.get("size")) is int and type(entry.get("mtime_ns")) is int
        and isinstance(entry.get("sha256"), str) and _SHA256.fullmatch(entry["sha256"])
    }


class ChecksumCache:
    """A JSON map path -> {size, mtime_ns, sha256}. A damaged cache — unreadable, a FIFO, too big, not
    UTF-8, not JSON, too deeply nested, the wrong types — counts as empty: it only costs hashing again."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self._lock = threading.Lock()
        try:
            raw = load_json(self.path, limit=RECORD_LIMIT, missing_ok=True, own=True)
        except InvalidInputError:
            raw = None
        self._data: dict[str, dict[str, Any]] = _entries(raw)

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
        with contextlib.suppress(OSError, InvalidInputError):  # an unwritable cache only costs time next run
            write_own(self.path, json.dumps({"version": 1, "files": self._data}, allow_nan=False), mode=0o644)


def hash_files(
    paths: Sequence[Path],
    *,
    workers: int | None = None,
    cache: ChecksumCache | None = None,
    progress: HashProgress | None = None,
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
