"""Deployment records: one small JSON file per deployed recipe, written atomically next to nothing secret.

The unit file says how to run the engine; the record says what rigctl knows beyond it: the endpoint,
the served name, the GPUs chosen, where the unit files are, and the last output of a failed warmup
(quadlet containers run with ``--rm``, so without a journal that output exists nowhere else).

A record is trusted for nothing it could point elsewhere with: ``down --remove`` deletes the unit files
it names, so its recipe, unit and file names are checked to be plain names of this deployment, and
its unit directory an absolute path. A record that fails is refused whole (exit 3), naming the file.
A name given on the command line is a record name or nothing: never a path.

Each operation on a deployment holds its lock while it runs (``deployment_lock``, the one lock rule; the
lock files live in ``places.lock_dir``).

Which scope a command looks in is decided here once (``search_scopes``), for verify, logs, down, swap and
status alike, and so is the lookup (``locate``) and what "not deployed" says (``not_deployed``).
"""

from __future__ import annotations

import contextlib
import contextvars
import errno
import fcntl
import hashlib
import json
import math
import os
import re
import stat
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rigctl.errors import DeploymentNotFoundError, InvalidInputError, LockHeldError
from rigctl.invocation import current
from rigctl.places import Dirs, Scope, lock_dir
from rigctl.recipe.defaults import HEALTH_PATH
from rigctl.recipe.names import recipe_name_problem
from rigctl.util import safefs
from rigctl.util.jsonfile import JsonFileError, parse_json
from rigctl.util.safefs import check_name, kind_of, open_error, own_dir, refuse
from rigctl.util.text import LINE_LIMIT, clip, printable

if TYPE_CHECKING:
    from rigctl.host.facts import HostFacts

RECORD_VERSION = 1
SUFFIX = ".json"

# The bounds of every number rigctl reads back from its records and histories: a file is damaged or hostile
# input, and a NaN, 10**400, a bool or a string where a number belongs must not reach arithmetic, a clock
# (``time.localtime`` raises on them) or the Prometheus text.
TIME_MAX = 253_402_300_799.0  # 9999-12-31: the last second ``time.strftime`` shows everywhere
SPAN_MAX = 10_000_000.0  # seconds a boot, a phase or a run may be said to have taken (about 116 days)
COUNT_MAX = 10**12  # runs, failures, restarts, exit statuses


def record_number(value: object, *, high: float, low: float = 0.0, integer: bool = False) -> float | int | None:
    """``value`` when it is a number (not a bool, not a string) within [low, high], finite, and whole where
    ``integer`` asks; None otherwise. The one check for a number read from a record or a history."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if integer and not isinstance(value, int):
        return None
    if not low <= value <= high:  # an int past a float's range compares exactly: no OverflowError
        return None
    return int(value) if integer else float(value)


# the deployment record's numbers, checked before its types are (pydantic would take "12", true or "nan"):
# {field: (low, high, integer, may be null)}
_NUMBERS: dict[str, tuple[float, float, bool, bool]] = {
    "installed_at": (0.0, TIME_MAX, False, False), "stopped_at": (0.0, TIME_MAX, False, True),
    "warmup_budget_s": (1, SPAN_MAX, True, True), "version": (1, COUNT_MAX, True, False),
}

# podman's container-name rule; a unit is "<container>.service" and its files "<container>.<suffix>"
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")


def is_record_name(name: str) -> bool:
    """Whether ``name`` can name a deployment: the recipe-name rule (which makes it one plain file name)."""
    return recipe_name_problem(name) is None


def check_record_name(name: str) -> str:
    if (problem := recipe_name_problem(name)) is not None:
        raise InvalidInputError(
            [f"not a deployment name: {problem}"],
            fix="give the recipe's name (`rigctl status` lists deployments) or the path of its recipe YAML",
        )
    return name


def check_unit_name(unit: str) -> str:
    """A systemd service rigctl may stop: ``<container>.service``, the container a plain name."""
    stem = unit.removesuffix(".service")
    if stem == unit or not _PLAIN.fullmatch(stem):
        raise InvalidInputError([f"{clip(unit)}: not a rigctl service name (<container>.service)"])
    return unit


PLANNED_TEXT_MAX = 256  # each planned-on fact is a version or a digest: longer is a damaged record
PLANNED_LIST_MAX = 16


@dataclass
class PlannedHost:
    """The host facts a deployment was planned on, kept in its record so `doctor` and `status` can say when the
    host under a running engine changed (a driver upgraded, a CDI spec left for an older driver). None: the
    fact was unknown at planning."""

    driver_version: str | None = None
    cuda_version: str | None = None  # the driver's CUDA, "13.0"
    module_flavour: str | None = None  # open | proprietary
    module_version: str | None = None
    cdi_driver_versions: list[str] = field(default_factory=list)  # the versions the NVIDIA CDI specs name
    image_digest: str | None = None

    def problems(self) -> list[str]:
        texts = [v for v in (self.driver_version, self.cuda_version, self.module_flavour, self.module_version,
                             self.image_digest) if v is not None] + list(self.cdi_driver_versions)
        out = []
        if len(self.cdi_driver_versions) > PLANNED_LIST_MAX:
            out.append(f"planned_on.cdi_driver_versions: more than {PLANNED_LIST_MAX}")
        if any(len(t) > PLANNED_TEXT_MAX or not t.isprintable() for t in texts):
            out.append(f"planned_on: a value longer than {PLANNED_TEXT_MAX} characters or not printable")
        return out


def planned_host(facts: HostFacts, image_digest: str) -> PlannedHost:
    """What of ``facts`` a deployment keeps (``PlannedHost``)."""
    from rigctl.host.cdi import nvidia_specs  # noqa: PLC0415 - only when a deployment is recorded

    module = facts.stack.kernel_module
    versions = sorted({v for spec in nvidia_specs(facts.cdi) for v in spec.driver_versions if v})
    return PlannedHost(driver_version=facts.gpu.driver_version, cuda_version=facts.gpu.cuda_version,
                       module_flavour=module.flavour, module_version=module.version,
                       cdi_driver_versions=versions[:PLANNED_LIST_MAX], image_digest=image_digest or None)


def host_drift(planned: PlannedHost, now: PlannedHost) -> list[str]:
    """How the host ``now`` differs from what a deployment was planned on, one phrase each; a fact unknown on
    either side is no drift. The image digest is the record's own, compared by the caller where it matters."""
    out = []
    pairs = (("driver", planned.driver_version, now.driver_version), ("CUDA", planned.cuda_version, now.cuda_version),
             ("kernel module", planned.module_flavour, now.module_flavour),
             ("kernel module version", planned.module_version, now.module_version))
    for name, then, current_value in pairs:
        if then is not None and current_value is not None and then != current_value:
            out.append(f"{name} {then} when planned, {current_value} now")
    if now.driver_version and now.cdi_driver_versions and now.driver_version not in now.cdi_driver_versions:
        out.append(f"the CDI spec names driver {', '.join(now.cdi_driver_versions)}, the loaded one is "
                   f"{now.driver_version}")
    if planned.image_digest and now.image_digest and planned.image_digest != now.image_digest:
        out.append(f"image {planned.image_digest[:19]}... when planned, {now.image_digest[:19]}... now")
    return out


@dataclass
class DeploymentRecord:
    recipe: str
    scope: Scope
    unit: str  # the generated systemd service, e.g. rigctl-glm53-flash.service
    container: str
    unit_dir: str
    unit_files: list[str]
    endpoint: str
    served_name: str
    image: str
    health_path: str = HEALTH_PATH
    gpu_ids: list[str] = field(default_factory=list)
    recipe_source: str = ""
    installed_at: float = 0.0
    last_failure: dict[str, Any] | None = None
    engine_log: str = ""  # the engine's k8s-file log as its container named it (shared by the unit's containers)
    stopped_at: float | None = None  # when `rigctl down` stopped it (kept): a unit down since then is meant to be down
    # the recipe's warmup budget when it was deployed: `status` calls a unit active longer than this and still
    # not ready not-serving (None in records of an older rigctl: not judged by it)
    warmup_budget_s: int | None = None
    version: int = RECORD_VERSION
    # the recipe as deployed, so the canary, `verify NAME` and `swap` re-check it from any directory and after
    # its file moved: a digest of the file ``recipe_source`` names (absolute) as `up` read it, and the validated
    # recipe itself, overlays and --set applied (``Recipe.model_dump(mode="json")``); "" and None in records of
    # an older rigctl
    recipe_sha256: str = ""
    recipe_deployed: dict[str, Any] | None = None
    # the memory plan against the last ready boot's receipt (``deploy.memory.after_boot``); read through
    # ``deploy.memory.view``
    memory: dict[str, Any] | None = None
    # the host facts it was planned on (#34): doctor and status compare the host with them; None in records of
    # an older rigctl
    planned_on: PlannedHost | None = None
    # the engine cache's directory name under the manager's cache (``render.units.engine_cache_key``); "" when
    # the unit keeps none: `status` sizes it, `down --remove` removes it with its last user
    engine_cache: str = ""

    def to_json(self) -> str:
        data = asdict(self)
        data["scope"] = str(self.scope)
        return json.dumps(data, indent=2, allow_nan=False) + "\n"

    def problems(self) -> list[str]:
        """Why this record cannot be trusted to name what ``down --remove`` deletes (empty: it can)."""
        out = []
        if not is_record_name(self.recipe):
            out.append(f"recipe {clip(self.recipe)} is not a recipe name")
        stem = self.unit.removesuffix(".service")
        if stem == self.unit or not _PLAIN.fullmatch(stem):
            out.append(f"unit {clip(self.unit)} is not <container>.service")
        if not _PLAIN.fullmatch(self.container):
            out.append(f"container {clip(self.container)} is not a container name")
        for name in self.unit_files:
            if not _PLAIN.fullmatch(name) or not name.startswith(f"{stem}."):
                out.append(f"unit file {clip(name)} is not a file of {self.unit} (<container>.<suffix>, no directory)")
        if self.engine_log and not (os.path.isabs(self.engine_log) and self.engine_log.endswith(".log")
                                    and "\0" not in self.engine_log
                                    and os.path.normpath(self.engine_log) == self.engine_log):
            out.append(f"engine_log {clip(self.engine_log)} is not a plain absolute path of a .log file")
        if self.engine_cache and not _PLAIN.fullmatch(self.engine_cache):
            out.append(f"engine_cache {clip(self.engine_cache)} is not a directory name")
        plain = "\0" not in self.unit_dir and os.path.normpath(self.unit_dir) == self.unit_dir
        if not plain or not os.path.isabs(self.unit_dir):
            out.append(f"unit_dir {clip(self.unit_dir)} is not a plain absolute directory")
        if self.planned_on is not None:
            out += self.planned_on.problems()
        return out


def _from_data(data: Any) -> DeploymentRecord:
    # pydantic loads here, on the first record read: `status` with nothing deployed never pays for it.
    from pydantic import TypeAdapter, ValidationError  # noqa: PLC0415

    if not isinstance(data, dict):
        raise ValueError("the top level is not a JSON object")
    known = set(DeploymentRecord.__dataclass_fields__)
    for key, (low, high, integer, nullable) in _NUMBERS.items():
        if key in data and not (nullable and data[key] is None) \
                and record_number(data[key], low=low, high=high, integer=integer) is None:
            kind = "a whole number" if integer else "a number"
            raise ValueError(f"{key}: {clip(str(data[key])[:60])} is not {kind} from {low:g} to {high:g}")
    try:
        record = TypeAdapter(DeploymentRecord).validate_python({k: v for k, v in data.items() if k in known})
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        raise ValueError(f"{'.'.join(str(x) for x in first['loc']) or '(top level)'}: {first['msg']}") from None
    if problems := record.problems():
        raise ValueError("; ".join(problems))
    return record


def file_sha256(path: str) -> str:
    """The hex SHA-256 of the recipe file at ``path`` as it is now; "" when it cannot be read (gone, a
    directory, larger than a recipe may be)."""
    try:
        got = safefs.read_file(path, limit=safefs.RECORD_LIMIT, missing_ok=True)
    except InvalidInputError:
        return ""
    return "" if got is None else hashlib.sha256(got.data).hexdigest()


def deployed_recipe(record: DeploymentRecord) -> tuple[Any, str | None]:
    """(the recipe the record keeps as deployed, a note for the reader), or (None, why not) for a record of an
    older rigctl or one whose copy no longer validates (the caller falls back to the file). The note names a
    recipe file that is gone or changed since: what runs is the deployed recipe, the file's change is not
    silently taken up."""
    if record.recipe_deployed is None:
        return None, None
    from rigctl.recipe.load import validate_data  # noqa: PLC0415 - pydantic and the recipe model, on use only

    try:
        recipe = validate_data(record.recipe_deployed, f"the deployment record of {record.recipe}")
    except InvalidInputError as exc:
        return None, f"the recipe kept in {record.recipe}'s record does not validate: {exc.problems[0]}"
    source = record.recipe_source
    shown = printable(source, LINE_LIMIT)
    note = None
    if source and record.recipe_sha256:
        now = file_sha256(source)
        if not now:
            note = (f"{shown} is gone (or cannot be read); {record.recipe} is checked with its recipe as "
                    "deployed, which its record keeps")
        elif now != record.recipe_sha256:
            note = (f"{shown} changed since {record.recipe} was deployed; checked with the recipe as "
                    f"deployed (`rigctl up {shown}` deploys the change)")
    return recipe, note


def _damaged(path: Path, why: str) -> InvalidInputError:
    return InvalidInputError(
        [f"{path}: not a sound deployment record: {why}"],
        fix=f"move {path} aside (rigctl then knows the deployment only from its recipe), or restore it from a backup",
    )


def record_path(directory: Path, recipe: str) -> Path:
    return directory / f"{check_record_name(recipe)}{SUFFIX}"


def save(directory: Path, record: DeploymentRecord) -> None:
    if problems := record.problems():
        raise InvalidInputError([f"deployment record of {clip(record.recipe)}: {p}" for p in problems])
    data = record.to_json().encode()
    check_fits(directory / f"{record.recipe}{SUFFIX}", data)
    with safefs.own_dir(directory) as d:
        d.write_atomic(f"{record.recipe}{SUFFIX}", data, mode=0o644)


def check_fits(path: Path, data: bytes) -> None:
    """Refuse to write ``data`` to ``path`` when its reader would refuse it back (past ``RECORD_LIMIT``): a
    record written but unreadable is a record lost."""
    if len(data) > safefs.RECORD_LIMIT:
        raise InvalidInputError(
            [f"{path}: not written: the record would be too large ({len(data):,} bytes; rigctl reads at most "
             f"{safefs.RECORD_LIMIT:,})"])


def _read(path: Path, expect: str) -> DeploymentRecord | None:
    """The record at ``path`` (None when missing); a link, FIFO, huge, non-UTF-8, deep or unsound file
    is refused with the file named."""
    try:
        got = safefs.read_own(path, limit=safefs.RECORD_LIMIT, nofollow=True, missing_ok=True)
        if got is None:
            return None
        data = parse_json(got.data, path)
        record = _from_data(data)
    except JsonFileError as exc:
        raise _damaged(path, exc.why) from None
    except InvalidInputError as exc:
        raise _damaged(path, exc.problems[0].removeprefix(f"{path}: ")) from None
    except ValueError as exc:
        raise _damaged(path, str(exc)) from None
    if record.recipe != expect:
        raise _damaged(path, f"it names recipe {clip(record.recipe)}, but it is the record of {expect!r}")
    return record


def load_record(directory: Path, recipe: str) -> DeploymentRecord | None:
    """The record of deployment ``recipe``; None when there is none — and for anything that is not a
    deployment name (a recipe path, say), which no record can have."""
    if not is_record_name(recipe):
        return None
    return _read(record_path(directory, recipe), recipe)


def all_records(directory: Path, unreadable: list[tuple[str, str]] | None = None) -> list[DeploymentRecord]:
    """Every sound record; a damaged one must not hide the others, so it is left out here and, given
    ``unreadable``, added to it as (path, why) for the caller to show (commands on that one deployment name it)."""
    if not directory.is_dir():
        return []
    records = []
    for name in sorted(os.listdir(directory)):
        recipe = name.removesuffix(SUFFIX)
        if recipe == name or not is_record_name(recipe):
            continue
        try:
            record = _read(directory / name, recipe)
        except InvalidInputError as exc:
            if unreadable is not None:
                why = exc.problems[0] if exc.problems else exc.message
                unreadable.append((str(directory / name), why.removeprefix(f"{directory / name}: ")))
            continue
        if record is not None:
            records.append(record)
    return records


def delete(directory: Path, recipe: str) -> bool:
    """Unlink the record in its directory (a link there is removed, never followed)."""
    name = f"{check_record_name(recipe)}{SUFFIX}"
    try:
        handle = safefs.SafeDir.at(directory)
    except InvalidInputError:
        if not directory.exists():
            return False
        raise
    with handle:
        return handle.remove(name)


# --- the deployment's lock ----------------------------------------------------------------------------


class ServiceLock:
    """An exclusive ``flock`` on ``<lock dir>/<service>.lock``, held for a whole command. The kernel
    drops it when the process dies, so a crashed rigctl never leaves a stale lock behind. The file
    carries the holder's pid and command, for the message the next contender sees.

    ``service`` is one plain file name and the file is opened inside the opened lock directory without
    following a link: the lock is truncated and written, so a planted link must never lead elsewhere."""

    def __init__(self, service: str, command: str, directory: Path | None = None) -> None:
        self.name = f"{check_name(service)}.lock"
        self.directory = directory or lock_dir()
        self.path = self.directory / self.name
        self.command = command
        self._fd: int | None = None

    def _open(self) -> int:
        with own_dir(self.directory) as d:
            flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
            try:
                fd = os.open(self.name, flags, 0o644, dir_fd=d.fd)
            except OSError as exc:
                raise open_error(self.path, exc, nofollow=True) from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise refuse(self.path, f"{kind_of(st.st_mode)}, not a lock file", fix=f"remove {self.path}")
        return fd

    def acquire(self) -> None:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES):
                raise LockHeldError(
                    f"another rigctl command is working on this service ({holder}); lock {self.path}",
                    fix="wait for it to finish, or stop it; two commands on one service never interleave",
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}: rigctl {self.command}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __enter__(self) -> ServiceLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def lock_holder(service: str, directory: Path | None = None) -> str | None:
    """Who holds ``service``'s lock now, as its holder wrote it ("pid N: rigctl up NAME"), when that process
    still runs; None otherwise. Read, never locked: a look must not make a real `up` find the lock taken."""
    path = (directory or lock_dir()) / f"{check_name(service)}.lock"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        text = os.pread(fd, 200, 0).decode(errors="replace").strip()
    finally:
        os.close(fd)
    match = re.match(r"pid (\d{1,9}): ", text)
    if match is None:
        return None
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return None  # a holder that died without releasing: its flock went with it
    except PermissionError:
        pass  # alive, another user's
    return printable(text[:120])


@contextlib.contextmanager
def locked(service: str, command: str, directory: Path | None = None) -> Iterator[ServiceLock]:
    """``service``'s lock taken now (LockHeldError when anyone holds it, this process included)."""
    with ServiceLock(service, command, directory) as lock:
        yield lock


# The locks the operations running in this context hold (``deployment_lock``): a thread starts with none.
_HELD: contextvars.ContextVar[tuple[ServiceLock, ...]] = contextvars.ContextVar("rigctl_held_locks", default=())


@contextlib.contextmanager
def deployment_lock(service: str, command: str, directory: Path | None = None) -> Iterator[ServiceLock]:
    """The one lock rule: each core operation on a deployment (``deploy.up.up``, ``deploy.down.down``,
    ``deploy.swap.swap``, a canary's install, removal and restart) holds the deployment's lock while it runs,
    so that a library caller is locked as the CLI is. An operation that runs inside another one holding that
    lock, in the same thread (swap's up and down, down's removal of the canary), goes on under the held lock:
    a second flock of this process would be refused by its own first. Anyone else holding it, another
    thread or a plain ``locked`` included, refuses the operation with LockHeldError."""
    held = _HELD.get()
    mine = next((lock for lock in held if lock.name == f"{check_name(service)}.lock"), None)
    if mine is not None:
        yield mine
        return
    with ServiceLock(service, command, directory) as lock:
        token = _HELD.set((*held, lock))
        try:
            yield lock
        finally:
            _HELD.reset(token)


# --- which deployment a name means -------------------------------------------------------------------


def search_scopes(choice: Scope | None) -> tuple[Scope, ...]:
    """The scopes a command looks in: the one chosen with --user/--system; neither: every scope this user
    manages, the one `up` deploys to without a flag first (root: system, then user; anyone else: user).
    `status` lists exactly these, so what it shows is what verify, logs, down and swap find."""
    if choice is not None:
        return (choice,)
    return (Scope.SYSTEM, Scope.USER) if current().is_root else (Scope.USER,)


def locate(name: str, choice: Scope | None) -> tuple[DeploymentRecord, Scope] | None:
    """The record of deployment ``name`` and its scope, the first of ``search_scopes(choice)`` that has
    one; None when no scope has it. Only in a scope that was not searched (``--user`` while it is
    deployed in the system scope) is it refused: "not deployed" would be wrong there, and `down` would
    answer "nothing to do" for a service that runs."""
    searched = search_scopes(choice)
    for scope in searched:
        record = load_record(Dirs.of(scope).state, name)
        if record is not None:
            return record, scope
    elsewhere = [s for s in Scope if s not in searched and _has_record(s, name)]
    if elsewhere:
        there = elsewhere[0]
        as_root = " (as root)" if there is Scope.SYSTEM and not current().is_root else ""
        raise DeploymentNotFoundError(
            f"{clip(name)} is not deployed in the {_scopes(searched)} scope; it is deployed in the {there} scope",
            fix=f"add --{there}{as_root}",
        )
    return None


def not_deployed(name: str, searched: Iterable[Scope], *, recipe_too: bool = False) -> DeploymentNotFoundError:
    """The one "no such deployment" error (exit 5)."""
    also = "; no recipe has that name either" if recipe_too else ""
    return DeploymentNotFoundError(
        f"{clip(name)} is not deployed (no rigctl record in the {_scopes(searched)} scope){also}",
        fix="`rigctl status` lists the deployments; `rigctl up RECIPE` makes one",
    )


def _has_record(scope: Scope, name: str) -> bool:
    try:
        return load_record(Dirs.of(scope).state, name) is not None
    except InvalidInputError:  # one that cannot be read (damaged, a link) still says "deployed there"
        return os.path.lexists(record_path(Dirs.of(scope).state, name))


def _scopes(scopes: Iterable[Scope]) -> str:
    return " or ".join(str(s) for s in scopes)
