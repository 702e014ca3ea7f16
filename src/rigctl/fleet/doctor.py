"""The doctor's pure core: audit serving units already on a box, and plan fixes for them.

``audit(units, host) -> list[UnitFinding]`` reads nothing from the host: unit files (with their
drop-ins) and host facts (driver version, CDI specs, local image digests) are gathered at the edge
(``rigctl.fleet.discover``) and handed in. A check is a small value with a stable kebab-case id; the
runner isolates checks (one that crashes is reported as a finding, the others still run).

Why these checks: every one is a failure seen in the field, most of them in the GLM-5.3-Flash story
(a ``Restart=on-failure`` unit left the default model down after vLLM's API server exited 0; podman
refused ``--shm-size`` with ``--ipc=host``; a TP2 warmup takes minutes).
"""

from __future__ import annotations

import difflib
import re
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from rigctl.fleet.serving import (
    ENGINE_AUTH_BY_DEFAULT,
    ENGINE_BINDS_ALL_BY_DEFAULT,
    ENGINE_HOST_OPTIONS,
    ServingSpec,
    UnitKind,
    describe,
)
from rigctl.fleet.units import (
    Entry,
    MergedUnit,
    UnitParseError,
    format_seconds,
    join_lines,
    lines_with_ends,
    one_line,
    option_pattern,
    parse,
    parse_timespan,
    remove_entries,
    remove_option,
    set_key,
)
from rigctl.recipe.model import PODMAN_IPC_SHM_ERROR

Severity = Literal["fail", "warn", "info"]
MANAGED_LABEL = "rigctl.managed"
WARMUP_FIX_S = 1800  # rigctl's default warmup budget (recipe service.warmup_budget_s)


# --- inputs ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DropIn:
    path: str
    text: str


@dataclass(frozen=True)
class UnitFile:
    """A unit file as found on a host, with the drop-ins that apply to it (in the order systemd
    applies them)."""

    path: str
    text: str
    dropins: tuple[DropIn, ...] = ()
    scope: Literal["system", "user", "path"] = "path"

    @property
    def kind(self) -> UnitKind:
        return "container" if self.path.endswith(".container") else "service"

    def texts(self) -> dict[str, str]:
        return {self.path: self.text, **{d.path: d.text for d in self.dropins}}

    def with_texts(self, texts: Mapping[str, str]) -> UnitFile:
        return UnitFile(
            self.path,
            texts.get(self.path, self.text),
            tuple(DropIn(d.path, texts.get(d.path, d.text)) for d in self.dropins),
            self.scope,
        )

    def merged(self) -> MergedUnit:
        return MergedUnit.of(parse(self.path, self.text), [parse(d.path, d.text) for d in self.dropins])


@dataclass(frozen=True)
class CdiSpec:
    path: str
    text: str


@dataclass(frozen=True)
class DoctorFacts:
    """What the doctor knows about the host beyond the unit files."""

    driver_version: str | None = None  # None: no NVIDIA driver seen; the CDI checks are skipped
    driver_source: str | None = None
    cdi_specs: tuple[CdiSpec, ...] = ()
    image_digests: Mapping[str, str] = field(default_factory=dict)  # image as written -> sha256:<hex>
    default_timeout_start_s: float = 90.0  # systemd's DefaultTimeoutStartSec
    min_warmup_s: float = 600.0  # a start timeout below this is too short for a large model's warmup


# --- outputs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class UnitFinding:
    unit: str
    id: str
    severity: Severity
    message: str
    fix: str
    where: str | None = None  # the file holding the offending line (the unit or one of its drop-ins)
    line: int | None = None  # 1-based
    managed: bool = False
    autofix: bool = False  # `doctor --fix` can rewrite this

    @property
    def fails(self) -> bool:
        return self.severity == "fail"

    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit, "id": self.id, "severity": self.severity, "message": self.message,
            "fix": self.fix, "where": self.where, "line": self.line, "managed": self.managed,
            "autofix": self.autofix,
        }


Edit = Callable[[dict[str, str]], None]  # mutates {path: text} for one unit's files


@dataclass(frozen=True)
class Hit:
    finding: UnitFinding
    edits: tuple[Edit, ...] = ()


@dataclass(frozen=True)
class Context:
    unit: UnitFile
    merged: MergedUnit
    spec: ServingSpec
    facts: DoctorFacts
    managed: bool  # see ``is_managed``

    def finding(
        self, check: Check, message: str, fix: str, *, entry: Entry | None = None,
        severity: Severity | None = None, autofix: bool = False,
    ) -> UnitFinding:
        return UnitFinding(
            unit=self.unit.path, id=check.id, severity=severity or check.severity, message=message, fix=fix,
            where=entry.file if entry else None, line=entry.first + 1 if entry else None,
            managed=self.managed, autofix=autofix,
        )

    @property
    def run_keys(self) -> tuple[str, str]:
        """Where container options live: quadlet PodmanArgs=, or the service's ExecStart=."""
        return ("Container", "PodmanArgs") if self.unit.kind == "container" else ("Service", "ExecStart")


@dataclass(frozen=True)
class Check:
    id: str
    severity: Severity
    summary: str
    run: Callable[[Context], list[Hit]]


# --- edits -------------------------------------------------------------------------------------------


def _set(path: str, section: str, key: str, value: str, after: str | None = None) -> Edit:
    def apply(texts: dict[str, str]) -> None:
        texts[path] = set_key(texts[path], path, section, key, value, after=after)
    return apply


def _remove_key(section: str, key: str) -> Edit:
    def apply(texts: dict[str, str]) -> None:
        for path, text in list(texts.items()):
            texts[path] = remove_entries(text, path, section, key)
    return apply


def _remove_option(section: str, key: str, option: str) -> Edit:
    def apply(texts: dict[str, str]) -> None:
        for path, text in list(texts.items()):
            texts[path] = remove_option(text, path, section, [key], option)
    return apply


def _replace_word(entry: Entry, old: str, new: str) -> Edit:
    """Replace one whole word inside an assignment (re-parsed, so earlier edits don't shift it)."""
    # word edges are systemd's WHITESPACE, never \s (which also matches U+2028, U+3000 ...)
    pattern = re.compile(r"(?<![^ \t\n\r=\"'])" + re.escape(old) + r"(?![^ \t\n\r\"'\\])")
    replacement = one_line(new)

    def apply(texts: dict[str, str]) -> None:
        text = texts[entry.file]
        parsed = parse(entry.file, text)
        for current in parsed.entries:
            if current.section == entry.section and current.key == entry.key and old in current.value:
                lines = list(parsed.lines)  # split at "\n" only, like every reader of the unit
                raw = "\n".join(lines[current.first : current.last + 1])
                key, eq, rest = raw.partition("=")
                rest = pattern.sub(lambda _: replacement, rest, count=1)  # taken literally, no \1 escapes
                lines[current.first : current.last + 1] = (key + eq + rest).split("\n")
                texts[entry.file] = join_lines(lines)
                return
    return apply


def _last_raw(merged: MergedUnit, section: str, key: str) -> Entry | None:
    """The last assignment of a key, empty ones included (an empty one is where a fix must go)."""
    found = [e for e in merged.entries if e.section == section and e.key == key]
    return found[-1] if found else None


# --- checks ------------------------------------------------------------------------------------------

def _restart(ctx: Context) -> list[Hit]:
    entry = ctx.merged.last("Service", "Restart")
    value = entry.value if entry else None
    if value == "always":
        return []
    why = (
        "vLLM's API server exits 0 when its EngineCore dies (vllm-project/vllm#48966), and systemd only "
        "restarts a clean exit under Restart=always, so the model stays down without a word"
    )
    if value is None:
        if ctx.unit.kind == "container":
            head = "no Restart= in [Service]: quadlet writes none, so systemd's default Restart=no applies"
        else:
            head = "no Restart= in [Service]: systemd's default is Restart=no"
    else:
        head = f"Restart={value} is weaker than Restart=always"
    target = _last_raw(ctx.merged, "Service", "Restart")
    path = target.file if target else ctx.unit.path
    edits = [_set(path, "Service", "Restart", "always")]
    if ctx.merged.last("Service", "RestartSec") is None:
        edits.append(_set(path, "Service", "RestartSec", "10", after="Restart"))
    return [Hit(
        ctx.finding(
            RESTART, f"{head}; {why}",
            "set Restart=always (and RestartSec=10) in [Service]; `systemctl stop` still stops the unit, "
            "only exits systemd did not ask for bring it back",
            entry=target, autofix=True,
        ),
        tuple(edits),
    )]


def _ipc_shm(ctx: Context) -> list[Hit]:
    spec = ctx.spec
    if spec.ipc != "host" or not spec.shm_size:
        return []
    section, key = ctx.run_keys
    entry = ctx.merged.last("Container", "ShmSize") if "ShmSize=" in spec.shm_sources else None
    entry = entry or _entry_with(ctx.merged, section, key, "--shm-size")
    sources = " and ".join(spec.shm_sources)
    return [Hit(
        ctx.finding(
            IPC_SHM,
            f"--ipc=host together with an explicit shm size ({sources} {spec.shm_size}): podman refuses to "
            f"start it: {PODMAN_IPC_SHM_ERROR!r}",
            "drop the shm size: host IPC already shares the host's /dev/shm",
            entry=entry, autofix=True,
        ),
        (_remove_key("Container", "ShmSize"), _remove_option(section, key, "--shm-size")),
    )]


def _notify_timeout(ctx: Context) -> list[Hit]:
    if not ctx.spec.notify_healthy:
        return []
    entry = ctx.merged.last("Service", "TimeoutStartSec") or ctx.merged.last("Service", "TimeoutSec")
    seconds = parse_timespan(entry.value) if entry else None
    if seconds is None:
        seconds = ctx.facts.default_timeout_start_s
        told = f"no TimeoutStartSec, so systemd's default {format_seconds(seconds)} applies"
    else:
        told = f"TimeoutStartSec={entry.value if entry else ''}"
    if seconds >= ctx.facts.min_warmup_s:
        return []
    what = "Notify=healthy" if ctx.unit.kind == "container" else "--sdnotify=healthy"
    target = _last_raw(ctx.merged, "Service", "TimeoutStartSec")
    path = target.file if target else ctx.unit.path
    return [Hit(
        ctx.finding(
            NOTIFY_TIMEOUT,
            f"{what} makes systemd wait for the first passing health check, and {told}: a warmup longer "
            f"than that is killed and retried forever (containers/podman#27290); large models take minutes "
            f"to load and warm up",
            f"set TimeoutStartSec={WARMUP_FIX_S} (or the model's measured warmup plus margin) in [Service]",
            entry=entry or ctx.merged.last("Container", "Notify") or ctx.spec.run_entry, autofix=True,
        ),
        (_set(path, "Service", "TimeoutStartSec", str(WARMUP_FIX_S)),),
    )]


def _podman_restart(ctx: Context) -> list[Hit]:
    policy = ctx.spec.podman_restart
    if policy is None:
        return []
    section, key = ctx.run_keys
    entry = _entry_with(ctx.merged, section, key, "--restart")
    if ctx.unit.kind == "container" or ctx.spec.removes_container:
        message = (
            f"podman's own --restart={policy} conflicts with the --rm "
            f"{'quadlet always adds' if ctx.unit.kind == 'container' else 'on this command line'}, "
            "and fights systemd, which owns restarts"
        )
        severity: Severity = "fail"
    else:
        message = f"podman's own --restart={policy} competes with systemd's Restart= for the same container"
        severity = "warn"
    return [Hit(
        ctx.finding(PODMAN_RESTART, message, "remove --restart and set Restart=always in [Service]",
                    entry=entry, severity=severity, autofix=True),
        (_remove_option(section, key, "--restart"),),
    )]


_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def _image_pinned(ctx: Context) -> list[Hit]:
    image = ctx.spec.image
    if not image or _DIGEST.search(image) or image.endswith((".image", ".build")):
        return []  # quadlet .image/.build references are audited as their own files
    digest = ctx.facts.image_digests.get(image)
    edits: tuple[Edit, ...] = ()
    if digest and ctx.spec.image_entry is not None:
        base = image.split("@", 1)[0]
        edits = (_replace_word(ctx.spec.image_entry, image, f"{base}@{digest}"),)
        fix = f"pin it: {base}@{digest} (the digest of the image present on this host)"
    else:
        fix = (
            "pin it as NAME[:TAG]@sha256:<digest>; find the digest with "
            f"`podman image inspect --format '{{{{.Digest}}}}' {image}`"
        )
    return [Hit(
        ctx.finding(
            IMAGE_PINNED,
            f"image {image} is not pinned by digest: a re-pull or a pull on another box can bring a "
            "different engine build under the same name",
            fix, entry=ctx.spec.image_entry, autofix=bool(edits),
        ),
        edits,
    )]


_AUTH_ENV = re.compile(r"(^|_)API_(KEY|KEYS|TOKEN|TOKENS)$")
_AUTH_ARGS = ("--api-key", "--api-keys", "--api-key-file", "--api-token")


def _is_loopback(address: str) -> bool:
    host = address.strip("[]")
    return host.startswith("127.") or host in ("::1", "localhost")


def _split_publish(spec: str) -> tuple[str | None, str, str, str]:
    """``[[ip:][hostPort]:]containerPort[/proto]`` -> (ip or None, host port, container port, /proto)."""
    body, slash, proto = spec.partition("/")
    suffix = slash + proto
    if body.startswith("["):
        ip, _, rest = body[1:].partition("]")
        host_port, _, container_port = rest.lstrip(":").rpartition(":")
        return f"[{ip}]", host_port, container_port, suffix
    parts = body.split(":")
    if len(parts) == 1:
        return None, "", parts[0], suffix
    if len(parts) == 2:
        return None, parts[0], parts[1], suffix
    return ":".join(parts[:-2]), parts[-2], parts[-1], suffix


def _engine_host(args: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in ENGINE_HOST_OPTIONS:
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def _has_auth(spec: ServingSpec) -> bool:
    if spec.engine in ENGINE_AUTH_BY_DEFAULT and "--disable-auth" not in spec.engine_args:
        return True
    if any(a.split("=", 1)[0] in _AUTH_ARGS for a in spec.engine_args):
        return True
    return any(_AUTH_ENV.search(name) for name in spec.env_names)


def _published(ctx: Context) -> list[Hit]:
    spec = ctx.spec
    exposed: list[str] = []
    edits: list[Edit] = []
    for publish in spec.publish:
        ip, host_port, container_port, suffix = _split_publish(publish)
        if ip is not None and _is_loopback(ip):
            continue
        exposed.append(f"port {publish} is published on {ip or 'every address'}")
        local = f"127.0.0.1:{host_port}:{container_port}{suffix}"
        entry = _entry_with(ctx.merged, "Container", "PublishPort", publish) or _entry_with(
            ctx.merged, *ctx.run_keys, publish
        )
        if entry is not None:
            edits.append(_replace_word(entry, publish, local))
    host_net = any(n == "host" for n in spec.network)
    if spec.runner == "engine" or host_net:
        bind = _engine_host(spec.engine_args)
        default_all = bind is None and spec.engine in ENGINE_BINDS_ALL_BY_DEFAULT
        if (bind is not None and not _is_loopback(bind)) or default_all:
            where = "the host network" if host_net else "the host"
            exposed.append(
                f"{spec.engine or 'the engine'} listens on {bind or 'every address (its default)'} on {where}"
            )
    if not exposed or _has_auth(spec):
        return []
    severity: Severity = "fail"
    note = ""
    if spec.env_files:
        severity = "warn"
        note = f" (an API key may come from EnvironmentFile {', '.join(spec.env_files)}, which doctor does not read)"
    auto = bool(edits) and len(edits) == len(exposed)
    if spec.runner == "engine" or host_net:
        fix = (
            f"bind {spec.engine or 'the engine'} to loopback (--host 127.0.0.1) behind an authenticating proxy, "
            "or give it a key (--api-key, or VLLM_API_KEY from a secret)"
        )
    else:
        fix = (
            "publish on loopback (PublishPort=127.0.0.1:PORT:PORT, or -p 127.0.0.1:PORT:PORT) behind an "
            "authenticating proxy, or give the engine a key (vLLM: Secret=NAME,type=env,target=VLLM_API_KEY)"
        )
    first = _entry_with(ctx.merged, "Container", "PublishPort", "") if spec.runner == "quadlet" else None
    return [Hit(
        ctx.finding(
            PUBLISHED,
            f"{'; '.join(exposed)}, and no authentication is configured (no --api-key, no *_API_KEY "
            f"environment or secret){note}: anyone on the network can use the model",
            fix, entry=first or spec.run_entry, severity=severity, autofix=auto,
        ),
        tuple(edits) if auto else (),
    )]


def _entry_with(merged: MergedUnit, section: str, key: str, needle: str) -> Entry | None:
    for entry in reversed(merged.all(section, key)):
        if needle in entry.value:
            return entry
    return None


RESTART = Check("restart-not-always", "fail", "Restart= weaker than always", _restart)
IPC_SHM = Check("ipc-host-with-shm-size", "fail", "--ipc=host with an explicit shm size", _ipc_shm)
NOTIFY_TIMEOUT = Check(
    "notify-healthy-short-timeout", "fail", "Notify=healthy with a start timeout shorter than a warmup", _notify_timeout
)
PODMAN_RESTART = Check("podman-restart-policy", "fail", "podman's own --restart inside a systemd unit", _podman_restart)
IMAGE_PINNED = Check("image-not-pinned", "fail", "image not pinned by digest", _image_pinned)
PUBLISHED = Check("published-without-auth", "fail", "published on a non-loopback address without auth", _published)

UNIT_CHECKS: tuple[Check, ...] = (RESTART, IPC_SHM, NOTIFY_TIMEOUT, PODMAN_RESTART, IMAGE_PINNED, PUBLISHED)


# --- host-level: CDI against the driver ---------------------------------------------------------------

_SO_VERSION = re.compile(
    r"lib(?:cuda|nvidia-[a-z0-9-]+|GLX_nvidia|EGL_nvidia|GLESv[12]_CM_nvidia)\.so\.(\d+\.\d+(?:\.\d+)?)"
)
CDI_STALE_ID = "cdi-spec-stale"
CDI_MISSING_ID = "cdi-spec-missing"


def cdi_spec_driver(text: str) -> str | None:
    """The driver version a CDI spec was generated for, read from the versioned libraries it mounts."""
    counts: dict[str, int] = {}
    for match in _SO_VERSION.finditer(text):
        counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    if not counts:
        return None
    return max(counts, key=lambda v: counts[v])


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


def _cdi(contexts: Sequence[Context], facts: DoctorFacts) -> list[UnitFinding]:
    if facts.driver_version is None:
        return []
    gpu_units = [c.unit.path for c in contexts if any("nvidia.com/gpu" in d for d in c.spec.devices)]
    users = f"; units using CDI GPUs: {', '.join(gpu_units)}" if gpu_units else ""
    found: list[UnitFinding] = []
    nvidia_specs = [s for s in facts.cdi_specs if "nvidia.com" in s.text]
    for spec in nvidia_specs:
        version = cdi_spec_driver(spec.text)
        if version is None or version == facts.driver_version:
            continue
        older = _version_key(version) < _version_key(facts.driver_version)
        found.append(UnitFinding(
            unit=spec.path, id=CDI_STALE_ID, severity="fail",
            message=(
                f"CDI spec was generated for driver {version} but the loaded driver is {facts.driver_version} "
                f"({'older than' if older else 'does not match'} the driver): containers fail to start with "
                f"`cannot stat` on the old libraries{users}"
            ),
            fix=f"regenerate it: `nvidia-ctk cdi generate --output={spec.path}`",
        ))
    if not nvidia_specs:
        for path in gpu_units:
            found.append(UnitFinding(
                unit=path, id=CDI_MISSING_ID, severity="fail",
                message=f"uses nvidia.com/gpu CDI devices but there is no NVIDIA CDI spec in /etc/cdi or /var/run/cdi "
                        f"(driver {facts.driver_version})",
                fix="generate one: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`",
            ))
    return found


# --- runner ------------------------------------------------------------------------------------------


def _contexts(units: Sequence[UnitFile], facts: DoctorFacts) -> tuple[list[Context], list[UnitFinding]]:
    contexts: list[Context] = []
    broken: list[UnitFinding] = []
    for unit in units:
        try:
            merged = unit.merged()
            spec = describe(unit.kind, merged)
        except UnitParseError as exc:  # its readers disagree on it or refuse it: reported, never guessed
            broken.append(UnitFinding(
                unit=unit.path, id="unit-unreadable", severity="fail", message=str(exc),
                fix="rewrite the file with one assignment per line and plain spaces and tabs",
            ))
            continue
        except Exception as exc:  # a unit doctor cannot read is reported, never hides the others
            broken.append(_crash(unit.path, "parse", exc))
            continue
        if spec is not None:
            contexts.append(Context(unit, merged, spec, facts, is_managed(unit)))
    return contexts, broken


def is_managed(unit: UnitFile) -> bool:
    """rigctl's label, read from the unit file alone: a drop-in (anyone's, from any directory that
    applies to the unit) cannot make a unit rigctl's and so open it to ``--fix``."""
    own = describe(unit.kind, MergedUnit.of(parse(unit.path, unit.text)))
    return own is not None and own.labels.get(MANAGED_LABEL, "").lower() == "true"


def _crash(unit: str, what: str, exc: BaseException) -> UnitFinding:
    where = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
    at = f" at {where[0].filename}:{where[0].lineno}" if where else ""
    return UnitFinding(
        unit=unit, id="doctor-internal-error", severity="fail",
        message=f"check {what} crashed on this unit: {type(exc).__name__}: {exc}{at} (a bug in rigctl)",
        fix="report it with the unit file attached",
    )


def _hits(ctx: Context) -> list[Hit]:
    hits: list[Hit] = []
    for check in UNIT_CHECKS:
        try:
            hits.extend(check.run(ctx))
        except Exception as exc:  # the runner owns isolation: one broken check, the others still run
            hits.append(Hit(_crash(ctx.unit.path, check.id, exc)))
    return hits


def serving_units(units: Sequence[UnitFile]) -> list[UnitFile]:
    """The units doctor recognizes as serving something (every .container; .service files that run a
    container or a known engine), and those it cannot read: audit() reports them, they never vanish."""
    contexts, broken = _contexts(units, DoctorFacts())
    keep = {c.unit.path for c in contexts} | {f.unit for f in broken}
    return [u for u in units if u.path in keep]


def audit(units: Sequence[UnitFile], host: DoctorFacts) -> list[UnitFinding]:
    contexts, findings = _contexts(units, host)
    for ctx in contexts:
        findings.extend(h.finding for h in _hits(ctx))
    findings.extend(_cdi(contexts, host))
    return findings


# --- fixes -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileChange:
    path: str
    before: str
    after: str

    def diff(self) -> str:
        return "".join(difflib.unified_diff(
            lines_with_ends(self.before), lines_with_ends(self.after),  # "\n" only, never splitlines()
            fromfile=f"a{self.path}" if self.path.startswith("/") else f"a/{self.path}",
            tofile=f"b{self.path}" if self.path.startswith("/") else f"b/{self.path}",
        ))


@dataclass(frozen=True)
class FixPlan:
    unit: UnitFile
    managed: bool
    fixed: tuple[str, ...]  # finding ids the changes address
    changes: tuple[FileChange, ...]

    def patch(self) -> str:
        return "".join(c.diff() for c in self.changes)

    def fixed_unit(self) -> UnitFile:
        return self.unit.with_texts({c.path: c.after for c in self.changes})


def plan_fixes(units: Sequence[UnitFile], host: DoctorFacts) -> list[FixPlan]:
    """For every unit with auto-fixable findings: the rewritten files. Nothing is written here."""
    contexts, _ = _contexts(units, host)
    plans: list[FixPlan] = []
    for ctx in contexts:
        texts = ctx.unit.texts()
        fixed: list[str] = []
        for hit in _hits(ctx):
            if not hit.edits:
                continue
            for edit in hit.edits:
                edit(texts)
            fixed.append(hit.finding.id)
        before = ctx.unit.texts()
        changes = tuple(FileChange(p, before[p], texts[p]) for p in before if texts[p] != before[p])
        if changes:
            plans.append(FixPlan(ctx.unit, ctx.managed, tuple(fixed), changes))
    return plans


def option_present(text: str, option: str) -> bool:
    """Whether a raw command line carries ``option`` (used by tests and the fix verification)."""
    return bool(option_pattern(option).search(text) or option_pattern(option, takes_value=False).search(text))
