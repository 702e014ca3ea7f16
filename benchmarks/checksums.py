"""Checksum throughput: rigctl's parallel hashing against `sha256sum` run over the same files one after
another (target: >= 1.8x on a 2-core machine). Also measures processes instead of threads, and a cached
re-check.

Generates N files of SIZE MiB of random data in a temporary directory (checking free space first),
reads them once so every contender sees the same warm page cache, then times each contender.
Usage: python benchmarks/checksums.py [--files 6] [--mib 512] [--dir /var/tmp]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rigctl.host.checksums import ChecksumCache, hash_files, sha256_file


def _make(directory: Path, files: int, mib: int) -> list[Path]:
    block = os.urandom(1024 * 1024)
    out = []
    for i in range(files):
        p = directory / f"model-{i + 1:05d}-of-{files:05d}.safetensors"
        with p.open("wb") as fh:
            for j in range(mib):
                fh.write(block[j % 7 :] + block[: j % 7])  # not one repeated block: no dedup shortcuts
        out.append(p)
    return out


def _timed(label: str, total: int, fn: object) -> float:
    t0 = time.perf_counter()
    fn()  # type: ignore[operator]
    dt = time.perf_counter() - t0
    print(f"{label:<34} {dt:7.2f} s  {total / dt / 1e9:6.2f} GB/s")
    return dt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=6)
    parser.add_argument("--mib", type=int, default=512)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    need = args.files * args.mib * 1024 * 1024
    free = shutil.disk_usage(args.dir).free
    if free < 3 * need:
        raise SystemExit(f"only {free / 1e9:.1f} GB free in {args.dir}; need {3 * need / 1e9:.1f} GB of headroom")
    print(f"{os.cpu_count()} cores, {args.files} files x {args.mib} MiB = {need / 1e9:.2f} GB in {args.dir}")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="rigctl-bench-") as tmp:
        files = _make(Path(tmp), args.files, args.mib)
        subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)  # warm the page cache
        base = _timed("sha256sum, one file after another", need,
                      lambda: [subprocess.run(["sha256sum", str(f)], capture_output=True, check=True) for f in files])
        threads = _timed(f"rigctl threads ({os.cpu_count()})", need, lambda: hash_files(files))
        with ProcessPoolExecutor() as pool:
            procs = _timed(f"processes ({os.cpu_count()})", need, lambda: list(pool.map(sha256_file, files)))
        _timed("rigctl single thread", need, lambda: hash_files(files, workers=1))
        cache = ChecksumCache(Path(tmp) / "cache.json")
        hash_files(files, cache=cache)
        t0 = time.perf_counter()
        hash_files(files, cache=ChecksumCache(Path(tmp) / "cache.json"))
        print(f"{'cached re-check':<34} {(time.perf_counter() - t0) * 1000:7.1f} ms")
        print(f"speed-up over sha256sum: threads {base / threads:.2f}x, processes {base / procs:.2f}x (target 1.8x)")


if __name__ == "__main__":
    main()
