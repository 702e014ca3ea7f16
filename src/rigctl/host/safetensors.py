"""What a checkpoint on this machine says about its shape, read without touching its tensor data.

A safetensors file starts with an 8-byte little-endian header length, then that many bytes of JSON
naming every tensor (dtype, shape, byte offsets into the data that follows). Only those bytes are read:
the length is refused above ``HEADER_LIMIT`` or beyond the file's end (and never shown: it is whatever
the file's first 8 bytes are), the JSON must be an object of well-formed entries whose offsets stay
inside the file, so a hostile or damaged shard is an error naming the file, never a hang or a 100 GB read.

The checkpoint directory may be writable by other users while rigctl runs as root, so it is opened once
and every file in it relative to that descriptor (``_open_in``): only a regular file that is there is
opened, with O_NOFOLLOW, after an lstat; a FIFO, device, socket or directory is refused without being
opened, and a symbolic link is not followed, except the one shape a Hugging Face hub cache gives a snapshot
(``../../blobs/<hash>``), opened the same way inside that ``blobs`` directory.

``config.json`` beside the shards is read bounded too (``CONFIG_LIMIT``). Nothing here judges: preflight's
gpu-fit plans memory from what this returns.

What gpu-fit needs of a shard is four numbers (``WeightKinds``: its tensors, and their bytes split over tensor
parallel, replicated on every rank, and in routed experts), while its header is megabytes of JSON. A shard is
summarised through msgspec's typed decoder (``_fast_kinds``): it checks every entry's types in C as it parses and
builds one small struct per tensor instead of a dict, two lists and their ints, about three times faster than
``json.loads`` and the checks in Python; whatever it refuses (an odd ``__metadata__``, an unknown dtype, a damaged
header) goes through the exact reader (``json`` and ``_entries``), which decides and says why. Even so the headers
of a 163-shard checkpoint are tens of milliseconds of parsing, so each shard's four numbers are kept in
``$XDG_CACHE_HOME/rigctl/safetensors.json`` (``SummaryCache``), keyed by the shard's path and its file's
size, mtime, ctime, inode and device: a shard that changed in any way (rewritten, replaced, touched, moved
in) is read again, through the same bounded reader. A refused header is remembered the same way (its reason,
keyed by the same identity), so it is refused again on every run without being read again. A cache that
cannot be read or trusted counts as empty; one that cannot be written costs only time next run.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from rigctl.errors import InvalidInputError
from rigctl.invocation import current
from rigctl.util.jsonfile import load_cache_map, parse_json, save_cache_map
from rigctl.util.safefs import SafeDir, check_name, kind_of, refuse

MiB = 1024 * 1024
# A real shard's header is ~120 bytes per tensor: 100,000 bytes for the 852 tensors of a GLM-5 NVFP4 shard
# (huggingface/huggingface_hub#4602), a few hundred KiB for the largest MoE shards; 16 MiB holds ~140,000
# tensors, a whole MoE checkpoint in one file. Decoding it costs at most ~15x its size (msgspec's structs).
HEADER_LIMIT = 16 * MiB
# The exact reader (json into dicts and lists, up to ~25x the bytes) reads only a header this small; a larger
# one the typed decode refuses is refused without it.
EXACT_LIMIT = 1 * MiB
CONFIG_LIMIT = 4 * MiB  # a config.json is a few KiB
# Per shard: a header at the cap holds ~140,000 real entries. Each entry is an object, so a header with more
# ``{`` than this is refused before it is decoded: the decode's memory is then that of real entries.
MAX_TENSORS = 250_000

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


Entry = tuple[str, str, list[int], int]  # name, dtype, shape, stored bytes: a checked header entry


def _entries(path: Path, doc: dict[str, Any], data_size: int) -> Iterator[Entry]:
    """Every entry checked (dtype a short string, shape up to 16 sizes of 0 or more, offsets inside the data)
    with exact type tests, which a loop over 100,000 tensors can afford; ``_bad`` says what failed."""
    for name, value in doc.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = value["dtype"], value["shape"], value["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise _bad(path, name, value, data_size) from None
        if (type(dtype) is not str or len(dtype) > 32 or type(shape) is not list or len(shape) > 16
                or type(begin) is not int or type(end) is not int or not 0 <= begin <= end <= data_size):
            raise _bad(path, name, value, data_size)
        for d in shape:  # a plain loop: a generator per tensor costs more than the whole check
            if type(d) is not int or d < 0:
                raise _bad(path, name, value, data_size)
        yield name, dtype, shape, end - begin


def read_header(path: str | os.PathLike[str]) -> list[Tensor]:
    """The tensors a safetensors file declares: its first ``8 + length`` bytes, nothing after them."""
    p = Path(path)
    raw, st = _read_path(p)
    data_size = st.st_size - 8 - len(raw)
    if len(raw) > EXACT_LIMIT and _fast_kinds(raw, data_size) is None:
        raise _not_plain(p)
    entries = _entries(p, _parse(p, raw), data_size)
    return [Tensor(name, dtype, tuple(shape), nbytes) for name, dtype, shape, nbytes in entries]


class Refused(ValueError):
    """A file in the checkpoint that is not opened: why, without its path."""


_HUB_BLOB = re.compile(r"\.\./\.\./blobs/([0-9a-f]{40}|[0-9a-f]{64})")  # a hub cache snapshot's link


def _open_plain(dir_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """``name`` in ``dir_fd`` when it is a regular file (None: not there). Anything else is refused from its
    lstat, before an open; the open does not follow a link, and must reach the file the lstat saw."""
    try:
        first = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Refused(f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISREG(first.st_mode):
        raise Refused(f"{kind_of(first.st_mode)}, not a regular file; rigctl reads only regular files inside the "
                      "checkpoint directory")
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(f"cannot open: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (first.st_dev, first.st_ino):
        os.close(fd)
        raise Refused("replaced while being opened")
    return fd, st


def _open_in(dir_fd: int, name: str) -> tuple[int, os.stat_result] | None:
    """A regular file ``name`` of the checkpoint directory ``dir_fd``, open (None: not there). A symbolic link
    is refused unless it is a hub cache's ``../../blobs/<hash>``, whose blob is then opened as ``_open_plain``
    opens a file, walking ``..``, ``..`` and ``blobs`` from ``dir_fd`` without following links."""
    try:
        check_name(name)
        first = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except InvalidInputError:
        raise Refused("not a plain file name") from None
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise Refused(f"cannot read: {exc.strerror or exc}") from None
    if not stat.S_ISLNK(first.st_mode):
        return _open_plain(dir_fd, name)
    try:
        target = os.readlink(name, dir_fd=dir_fd)
    except OSError as exc:
        raise Refused(f"cannot read the link: {exc.strerror or exc}") from None
    blob = _HUB_BLOB.fullmatch(target)
    if blob is None:
        raise Refused("a symbolic link; rigctl does not follow links out of the checkpoint directory (a hub "
                      "cache's ../../blobs/ links excepted)")
    fds: list[int] = []
    try:
        for part in ("..", "..", "blobs"):
            fds.append(os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | os.O_NOFOLLOW,
                               dir_fd=fds[-1] if fds else dir_fd))
        got = _open_plain(fds[-1], blob[1])
    except Refused as exc:
        raise Refused(f"a hub cache link to a blob that is {exc}") from None
    except OSError as exc:
        raise Refused(f"a hub cache link, but its blobs directory cannot be opened: {exc.strerror or exc}") from None
    finally:
        for fd in fds:
            os.close(fd)
    return got


def _read_path(p: Path) -> tuple[bytes, os.stat_result]:
    """``_read_header`` of a shard named by its path: its directory opened, the shard opened in it."""
    try:
        with SafeDir.open(p.parent) as d:
            opened = _open_in(d.fd, p.name)
    except Refused as exc:
        raise HeaderError(p, str(exc)) from None
    except InvalidInputError as exc:
        raise HeaderError(p, exc.message) from None
    if opened is None:
        raise HeaderError(p, "no such file")
    fd, st = opened
    try:
        return _read_header(fd, st, p), st
    finally:
        os.close(fd)


def _read_header(fd: int, st: os.stat_result, p: Path) -> bytes:
    """The header's bytes of the open regular file ``fd`` (``st`` its fstat): the length checked against
    ``HEADER_LIMIT`` and the file's size before any is read."""
    try:
        head = os.pread(fd, 8, 0)
        if len(head) < 8:
            raise HeaderError(p, f"{st.st_size} bytes: shorter than the 8-byte header length")
        length = int.from_bytes(head, "little")
        if length > HEADER_LIMIT:
            raise HeaderError(p, f"its header length is more than the {HEADER_LIMIT // MiB} MiB rigctl reads (a real "
                                 "one is a few hundred KiB)")
        if length < 2 or 8 + length > st.st_size:
            raise HeaderError(p, f"its header length does not fit in the file's {st.st_size:,} bytes")
        buf = bytearray(length)
        view = memoryview(buf)
        got = 0
        while got < length:  # bounded: at most `length` bytes, each read makes progress or ends
            n = os.preadv(fd, [view[got:]], 8 + got)
            if not n:
                raise HeaderError(p, f"cut short: {got:,} of {length:,} header bytes")
            got += n
    except OSError as exc:
        raise HeaderError(p, f"cannot read: {exc.strerror or exc}") from None
    view.release()
    return bytes(buf)


def _not_plain(p: Path) -> HeaderError:
    return HeaderError(p, f"header is not plain safetensors entries (an object of tensors, each a dtype, a shape and "
                          f"data_offsets inside the file), and at more than {EXACT_LIMIT // MiB} MiB too large to "
                          "read more closely")


def _parse(p: Path, raw: bytes) -> dict[str, Any]:
    """The exact reader: the header as ``json`` reads it, refused unless it is an object of at most
    ``MAX_TENSORS`` entries (each then checked by ``_entries``)."""
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise HeaderError(p, f"header is not JSON: {str(exc)[:200]}") from None
    if not isinstance(doc, dict):
        raise HeaderError(p, "header is not a JSON object")
    if len(doc) > MAX_TENSORS:
        raise HeaderError(p, f"header names {len(doc):,} tensors; more than {MAX_TENSORS:,}")
    return doc


if TYPE_CHECKING:
    import msgspec


@cache
def _decoder() -> msgspec.json.Decoder[dict[str, Any]]:
    """msgspec's decoder for a header of well-formed entries (imported here, on the first header to parse: the
    warm path and every other command never load it). Each field is optional so that ``__metadata__`` (a map of
    strings) decodes too; an entry lacking one is left to the exact reader. A dtype is any short string, as the
    exact reader takes it: a large header of a dtype this rigctl does not know is still read."""
    import msgspec  # noqa: PLC0415 - 10 ms to import, only where a header is parsed

    size = Annotated[int, msgspec.Meta(ge=0)]  # msgspec refuses booleans and floats where an int is asked
    entry = msgspec.defstruct("Entry", [  # built, not declared: this module's annotations are strings
        ("dtype", Annotated[str, msgspec.Meta(max_length=32)] | None, None),
        ("shape", Annotated[tuple[size, ...], msgspec.Meta(max_length=16)] | None, None),
        ("data_offsets", tuple[size, size] | None, None),
    ], gc=False)

    return msgspec.json.Decoder(dict[str, entry])  # type: ignore[valid-type]


def _fast_kinds(raw: bytes, data_size: int) -> WeightKinds | None:
    """``summarize`` of the header's entries, from msgspec's typed decode, or None where that decode or a check
    refuses anything: the exact reader (``_parse``, ``_entries``) then reads it, and accepts or refuses it with
    its reason. So what this accepts is a subset of what the exact reader accepts, and it counts the same."""
    if not raw.isascii():  # msgspec skips the values of unknown fields unchecked; the exact reader checks UTF-8
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return None
    try:
        doc = _decoder().decode(raw)
    except (ValueError, RecursionError):  # msgspec.DecodeError and ValidationError are ValueErrors
        return None
    if len(doc) > MAX_TENSORS:
        return None
    doc.pop("__metadata__", None)
    split = replicated = experts = 0
    search = _REPLICATED_RE.search
    # the rules of ``summarize``, written out: a call or a tuple per tensor costs more than the loop itself
    for name, entry in doc.items():
        offsets, shape = entry.data_offsets, entry.shape
        if offsets is None or shape is None or entry.dtype is None:
            return None
        begin, end = offsets
        if begin > end or end > data_size:
            return None
        if ".experts." in name and "shared_expert" not in name:
            experts += end - begin
        elif len(shape) <= 1 or search(name):
            replicated += end - begin
        else:
            split += end - begin
    return WeightKinds(len(doc), split, replicated, experts)


def read_kinds(path: str | os.PathLike[str]) -> tuple[WeightKinds, os.stat_result]:
    """A shard's ``summarize`` (its header only, as ``read_header`` reads it) and its file's ``fstat``."""
    p = Path(path)
    raw, st = _read_path(p)
    return _kinds(p, raw, st), st


def _kinds(p: Path, raw: bytes, st: os.stat_result) -> WeightKinds:
    """The typed decode's answer, else the exact reader's, for a header of at most ``EXACT_LIMIT``."""
    data_size = st.st_size - 8 - len(raw)
    if raw.count(b"{") > MAX_TENSORS + 2:
        raise HeaderError(p, f"header holds more than {MAX_TENSORS:,} JSON objects; a shard has fewer tensors")
    kinds = _fast_kinds(raw, data_size)
    if kinds is not None:
        return kinds
    if len(raw) > EXACT_LIMIT:
        raise _not_plain(p)
    return summarize(_entries(p, _parse(p, raw), data_size))


# --- what the weights of a shard come to -------------------------------------------------------------------

# Tensors every TP rank holds whole (vLLM ReplicatedLinear and the like): MLA's latent down-projections and
# their norms, MoE routers, the indexer's small projections. One-dimensional tensors (norms, biases, scales)
# are counted whole too: they are small, and most are replicated. Routed experts (``.experts.``, not a shared
# expert) are split by expert parallel where the engine has it, else by TP; everything else is split by TP.
REPLICATED = ("kv_a_proj_with_mqa", "q_a_proj", "kv_a_layernorm", "q_a_layernorm", ".mlp.gate.weight",
              "e_score_correction_bias", ".indexer.", "router.")
_REPLICATED_RE = re.compile("|".join(re.escape(key) for key in REPLICATED))
# Changes whenever the rules above do, so a cached summary made under other rules is never used.
RULES = hashlib.sha256(repr((REPLICATED, ".experts.", "shared_expert", "ndim<=1")).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class WeightKinds:
    """A shard's (or a checkpoint's) tensors and their stored bytes, by how tensor parallel lays them out."""

    tensors: int = 0
    split: int = 0  # split over TP
    replicated: int = 0  # whole on every rank
    experts: int = 0  # routed experts: split over EP, or TP

    def plus(self, other: WeightKinds) -> WeightKinds:
        return WeightKinds(self.tensors + other.tensors, self.split + other.split,
                           self.replicated + other.replicated, self.experts + other.experts)


def summarize(tensors: Iterable[Tensor | Entry]) -> WeightKinds:
    """The tensors' bytes by kind (the rules above)."""
    count = split = replicated = experts = 0
    search = _REPLICATED_RE.search
    for name, _dtype, shape, nbytes in tensors:
        count += 1
        if ".experts." in name and "shared_expert" not in name:
            experts += nbytes
        elif len(shape) <= 1 or search(name):
            replicated += nbytes
        else:
            split += nbytes
    return WeightKinds(count, split, replicated, experts)


# --- the cache of shard summaries --------------------------------------------------------------------------

CACHE_ENTRIES = 10_000  # shards remembered (about 200 bytes each); the oldest are let go first
_KEY_FIELDS = ("size", "mtime_ns", "ctime_ns", "ino", "dev")
_KIND_FIELDS = ("tensors", "split", "replicated", "experts")


def cache_path() -> Path:
    return current().cache_home / "rigctl" / "safetensors.json"


def _identity(st: os.stat_result) -> dict[str, int]:
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino,
            "dev": st.st_dev}


REFUSAL_LIMIT = 1000  # characters of a remembered refusal's reason


def _sound(entry: Any) -> bool:
    if not (isinstance(entry, dict) and entry.get("rules") == RULES
            and all(type(entry.get(k)) is int and entry[k] >= 0 for k in _KEY_FIELDS)):
        return False
    if "refused" in entry:
        return type(entry["refused"]) is str and 0 < len(entry["refused"]) <= REFUSAL_LIMIT
    return all(type(entry.get(k)) is int and entry[k] >= 0 for k in _KIND_FIELDS)


class SummaryCache:
    """A JSON map shard path -> {size, mtime_ns, ctime_ns, ino, dev, rules, and either tensors, split,
    replicated, experts or refused: why}, read bounded through ``load_json``; damaged entries (or a damaged
    file) count as absent."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or cache_path()
        self._data: dict[str, dict[str, Any]] = load_cache_map(self.path, "shards", _sound)
        self.changed = False

    def _entry(self, shard: str, st: os.stat_result) -> dict[str, Any] | None:
        entry = self._data.get(shard)
        if entry is None or any(entry[k] != v for k, v in _identity(st).items()):
            return None
        return entry

    def get(self, shard: str, st: os.stat_result) -> WeightKinds | None:
        entry = self._entry(shard, st)
        if entry is None or "refused" in entry:
            return None
        return WeightKinds(*(entry[k] for k in _KIND_FIELDS))

    def refusal(self, shard: str, st: os.stat_result) -> str | None:
        """Why the shard's header was refused, while its file is unchanged."""
        entry = self._entry(shard, st)
        return None if entry is None else entry.get("refused")

    def put(self, shard: str, st: os.stat_result, kinds: WeightKinds) -> None:
        self._store(shard, {**_identity(st), "rules": RULES, "tensors": kinds.tensors, "split": kinds.split,
                            "replicated": kinds.replicated, "experts": kinds.experts})

    def put_refusal(self, shard: str, st: os.stat_result, why: str) -> None:
        self._store(shard, {**_identity(st), "rules": RULES, "refused": why[:REFUSAL_LIMIT]})

    def _store(self, shard: str, entry: dict[str, Any]) -> None:
        self._data.pop(shard, None)  # re-inserted last: the newest
        self._data[shard] = entry
        while len(self._data) > CACHE_ENTRIES:
            del self._data[next(iter(self._data))]
        self.changed = True

    def save(self) -> None:
        if not self.changed:
            return
        save_cache_map(self.path, "shards", self._data)  # unwritable: the headers are read again next run
        self.changed = False


@dataclass(frozen=True)
class LocalCheckpoint:
    """What this machine holds of a checkpoint: its shards' weights by kind (or why not) and its config.json."""

    path: str
    weights: WeightKinds = field(default_factory=WeightKinds)  # the shards read (or cached), together
    shards_read: int = 0  # of which...
    shards_cached: int = 0  # ...came from the cache, their files unchanged since they were read
    missing: list[str] = field(default_factory=list)  # shard names not here
    problems: list[str] = field(default_factory=list)  # headers or config refused, one line each
    config: dict[str, Any] | None = None


def _read_shards(base: Path, d: SafeDir, shard_names: list[str], cache: SummaryCache | None,
                 ) -> tuple[WeightKinds, int, int, list[str], list[str]]:
    """(weights, shards read, of which cached, missing names, problems) of ``read_checkpoint``."""
    weights = WeightKinds()
    missing: list[str] = []
    problems: list[str] = []
    read = cached = 0
    for name in shard_names:
        shard = base / name
        try:
            opened = _open_in(d.fd, name)
        except Refused as exc:
            problems.append(HeaderError(shard, str(exc)).problems[0])
            continue
        if opened is None:
            missing.append(name)
            continue
        fd, st = opened
        try:
            key = os.path.abspath(shard)
            hit = cache.get(key, st) if cache is not None else None
            refused = cache.refusal(key, st) if cache is not None and hit is None else None
            if hit is not None:
                weights, read, cached = weights.plus(hit), read + 1, cached + 1
                continue
            if refused is not None:
                problems.append(HeaderError(shard, refused).problems[0])
                continue
            try:
                kinds = _kinds(shard, _read_header(fd, st, shard), st)
            except HeaderError as exc:
                problems.append(exc.problems[0])
                if cache is not None:
                    cache.put_refusal(key, st, exc.why)
                continue
        finally:
            os.close(fd)
        weights, read = weights.plus(kinds), read + 1
        if cache is not None:
            cache.put(key, st, kinds)
    return weights, read, cached, missing, problems


def _read_config(base: Path, d: SafeDir) -> dict[str, Any] | None:
    """config.json of the open checkpoint directory ``d``, as ``_open_in`` opens a shard, read bounded."""
    where = base / "config.json"
    try:
        opened = _open_in(d.fd, "config.json")
    except Refused as exc:
        raise refuse(where, str(exc)) from None
    if opened is None:
        return None
    fd, st = opened
    try:
        if st.st_size > CONFIG_LIMIT:
            raise refuse(where, f"more than the {CONFIG_LIMIT // MiB} MiB rigctl reads from a config.json")
        data = os.pread(fd, CONFIG_LIMIT + 1, 0)
    except OSError as exc:
        raise refuse(where, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > CONFIG_LIMIT:
        raise refuse(where, f"more than the {CONFIG_LIMIT // MiB} MiB rigctl reads from a config.json")
    got = parse_json(data, where)
    if not isinstance(got, dict):
        raise refuse(where, "not a JSON object")
    return got


def read_checkpoint(path: str, shard_names: list[str], *, cache: SummaryCache | None = None) -> LocalCheckpoint:
    """The weights by kind of ``shard_names`` under ``path`` (from ``cache`` where a shard's file is
    unchanged, else its header, then cached) and its ``config.json``; every problem is recorded, none
    raised (a missing directory gives an empty answer). The directory is opened once; every file is
    opened relative to it (``_open_in``)."""
    base = Path(path)
    try:
        d = SafeDir.open(base)
    except InvalidInputError:
        return LocalCheckpoint(path, missing=list(shard_names))
    with d:
        # The headers parse into ~100,000 small objects, every one freed by its reference count; the cyclic
        # collector would only walk them (10-30% of the time with the exact reader). Off for the loop.
        collecting = gc.isenabled()
        gc.disable()
        try:
            weights, read, cached, missing, problems = _read_shards(base, d, shard_names, cache)
        finally:
            if collecting:
                gc.enable()
        if cache is not None:
            cache.save()
        config: dict[str, Any] | None = None
        try:
            config = _read_config(base, d)
        except InvalidInputError as exc:
            problems.append(exc.problems[0] if exc.problems else str(exc))
    return LocalCheckpoint(path, weights, read, cached, missing, problems, config)
