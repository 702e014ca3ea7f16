"""What a checkpoint on this machine says about its shape, read without touching its tensor data.

A safetensors file starts with an 8-byte little-endian header length, then that many bytes of JSON
naming every tensor (dtype, shape, byte offsets into the data that follows). Only those bytes are read:
the length is refused above ``HEADER_LIMIT`` or beyond the file's end, the JSON must be an object of
well-formed entries whose offsets stay inside the file, and a FIFO or device is refused before a read,
so a hostile or damaged shard is an error naming the file, never a hang or a 100 GB read.

``config.json`` beside the shards is read bounded too (``CONFIG_LIMIT``). Nothing here judges: preflight's
gpu-fit plans memory from what this returns.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from rigctl.errors import InvalidInputError
from rigctl.util.jsonfile import load_json

MiB = 1024 * 1024
HEADER_LIMIT = 100 * MiB  # the largest real headers (thousands of tensors) are a few MiB
CONFIG_LIMIT = 4 * MiB  # a config.json is a few KiB
MAX_TENSORS = 1_000_000  # per shard

# The dtype names safetensors writes, and their bytes per element (sub-byte types packed: F4 is half a byte)
DTYPE_BITS = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E8M0": 8, "E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
    "F64": 64, "F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}


class HeaderError(InvalidInputError):
    """A shard whose header cannot be trusted: too long, cut short, not JSON, entries out of bounds."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        self.path = os.fspath(path)
        self.why = why
        super().__init__([f"{self.path}: {why}"],
                         fix="check the shard's size and sha256 against the checkpoint's manifest "
                             "(`rigctl preflight RECIPE --checksums`); download it again if it differs")


class Tensor(NamedTuple):
    """One tensor a header declares (a tuple: a checkpoint has ~100,000 of them, built in a loop)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int  # as stored (the data_offsets span): a packed 4-bit tensor counts its real bytes


def _bad(path: Path, name: str, value: Any, data_size: int) -> HeaderError:
    """Why one entry was refused (the slow path, only once an entry fails the fast checks)."""
    if not isinstance(value, dict):
        return HeaderError(path, f"tensor {name[:80]!r}: its entry is not an object")
    dtype, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    if not isinstance(dtype, str) or len(dtype) > 32:
        return HeaderError(path, f"tensor {name[:80]!r}: dtype is not a short string")
    if not isinstance(shape, list) or len(shape) > 16 or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        return HeaderError(path, f"tensor {name[:80]!r}: shape is not a list of at most 16 sizes")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)):
        return HeaderError(path, f"tensor {name[:80]!r}: data_offsets is not [begin, end]")
    return HeaderError(path, f"tensor {name[:80]!r}: data_offsets {offsets} fall outside the {data_size:,} bytes "
                             "of data the file holds")


def _entries(path: Path, doc: dict[str, Any], data_size: int) -> list[Tensor]:
    """Every entry checked (dtype a short string, shape up to 16 sizes of 0 or more, offsets inside the data)
    with exact type tests, which a loop over 100,000 tensors can afford; ``_bad`` says what failed."""
    out: list[Tensor] = []
    append = out.append
    for name, value in doc.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = value["dtype"], value["shape"], value["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise _bad(path, name, value, data_size) from None
        if (type(dtype) is not str or len(dtype) > 32 or type(shape) is not list or len(shape) > 16
                or type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= data_size
                or any(type(d) is not int or d < 0 for d in shape)):
            raise _bad(path, name, value, data_size)
        append(Tensor(name, dtype, tuple(shape), end - begin))
    return out


def read_header(path: str | os.PathLike[str]) -> list[Tensor]:
    """The tensors a safetensors file declares: its first ``8 + length`` bytes, nothing after them."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise HeaderError(p, f"cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HeaderError(p, "not a regular file")
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise HeaderError(p, f"{st.st_size} bytes: shorter than the 8-byte header length")
        length = int.from_bytes(head, "little")
        if length > HEADER_LIMIT:
            raise HeaderError(p, f"header length {length:,} bytes is more than the {HEADER_LIMIT // MiB} MiB "
                                 "rigctl reads (a real one is a few MiB)")
        if length < 2 or 8 + length > st.st_size:
            raise HeaderError(p, f"header length {length:,} does not fit in the file's {st.st_size:,} bytes")
        chunks: list[bytes] = []
        got = 0
        while got < length:  # bounded: at most `length` bytes, each read makes progress or ends
            chunk = os.pread(fd, min(length - got, 8 * MiB), 8 + got)
            if not chunk:
                raise HeaderError(p, f"cut short: {got:,} of {length:,} header bytes")
            chunks.append(chunk)
            got += len(chunk)
    finally:
        os.close(fd)
    try:
        doc = json.loads(b"".join(chunks).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HeaderError(p, f"header is not JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise HeaderError(p, "header is not a JSON object")
    if len(doc) > MAX_TENSORS:
        raise HeaderError(p, f"header names {len(doc):,} tensors; more than {MAX_TENSORS:,}")
    return _entries(p, doc, st.st_size - 8 - length)


@dataclass(frozen=True)
class LocalCheckpoint:
    """What this machine holds of a checkpoint: every shard's tensors (or why not) and its config.json."""

    path: str
    tensors: list[Tensor] = field(default_factory=list)
    shards_read: int = 0
    missing: list[str] = field(default_factory=list)  # shard names not here
    problems: list[str] = field(default_factory=list)  # headers or config refused, one line each
    config: dict[str, Any] | None = None


def read_checkpoint(path: str, shard_names: list[str]) -> LocalCheckpoint:
    """The headers of ``shard_names`` under ``path`` and its ``config.json``; every problem is recorded,
    none raised (a missing directory gives an empty answer)."""
    base = Path(path)
    if not base.is_dir():
        return LocalCheckpoint(path, missing=list(shard_names))
    tensors: list[Tensor] = []
    missing: list[str] = []
    problems: list[str] = []
    read = 0
    for name in shard_names:
        shard = base / name
        if not shard.is_file():
            missing.append(name)
            continue
        try:
            tensors.extend(read_header(shard))
            read += 1
        except InvalidInputError as exc:
            problems.append(exc.problems[0] if exc.problems else str(exc))
    config: dict[str, Any] | None = None
    try:
        got = load_json(base / "config.json", limit=CONFIG_LIMIT, missing_ok=True)
    except InvalidInputError as exc:
        problems.append(exc.problems[0] if exc.problems else str(exc))
    else:
        if isinstance(got, dict):
            config = got
        elif got is not None:
            problems.append(f"{base / 'config.json'}: not a JSON object")
    return LocalCheckpoint(path, tensors, read, missing, problems, config)
