"""What a deployment learns over time, kept beside its record: each boot's phases and durations, and each
canary run's result. Both are bounded and rotated (the newest ``BOOTS_KEPT`` boots, ``RUNS_KEPT`` runs),
written atomically through the one safe writer, one file each in ``<state dir>/history/``:

- ``NAME.boots.json``: the boots of NAME, each with the recipe's digest (its rendered unit files) and the
  image it ran, the outcome (ready, stalled, died, ...), the total time and the time spent in each phase.
  ``up`` judges a stall against the ready boots of the same recipe and image once there are
  ``HISTORY_MIN`` of them (``budgets``).
- ``NAME.canary.json``: the canary's settings (written by ``rigctl canary``), its runs, the consecutive
  failures, whether this streak of failures already cost a restart, and counters for the metrics.

They are separate from the deployment record on purpose: ``up`` rewrites the record whole on every
deployment, and the canary's run writes its file while ``up`` may be writing the record.

Both are read as hostile input: every number goes through ``state.record_number`` (typed, finite, bounded) and
what fails it is left out, never passed on. A boot history that cannot be read counts as empty (it is advice,
never a reason to refuse). A canary record that cannot be read (damaged, too large, a link) is no "no canary":
it is a failing canary, said by every view, and its timer's run records a failure instead of running checks
it cannot know. Neither file is written larger than its reader accepts (``state.check_fits``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigctl.deploy.state import COUNT_MAX, SPAN_MAX, TIME_MAX, check_fits, check_record_name, record_number
from rigctl.errors import InvalidInputError
from rigctl.util import safefs
from rigctl.util.jsonfile import JsonFileError, parse_json

SUBDIR = "history"
BOOTS_KEPT = 20
RUNS_KEPT = 50
RESTARTS_KEPT = 10
STALE_INTERVALS = 2  # a canary whose last run is older than this many intervals (and a run's bound) is stale
HISTORY_MIN = 2  # ready boots of the same recipe and image before a stall is judged against them
PHASE_FACTOR = 3.0  # a phase may take this many times its longest ready boot before it is a stall
REASON_LIMIT = 300  # characters of a failing check's message kept per run
# the canary's settings as a record may hold them (``canary.check_settings`` refuses the rest at install)
EVERY_MAX_S = 7 * 24 * 3600
TIMEOUT_MAX_S = 3600
AFTER_MAX = 1000
LATENCY_MAX_MS = 1e9
NAME_LIMIT = 64  # characters of a check's id or status, a failing check's name, an action, a unit name
CHECKS_KEPT = 16  # checks per run and per canary (there are six)
PHASES_KEPT = 32
# Room a canary record keeps for its runs and restarts beyond its settings: the runs are bounded
# (RUNS_KEPT of them, each reason REASON_LIMIT characters, at most 6 bytes each as JSON writes them), so a
# record whose settings fit this margin never grows past what its reader accepts.
RUNS_RESERVE = 512 * 1024


def history_dir(state_dir: Path) -> Path:
    return state_dir / SUBDIR


def _file(state_dir: Path, deployment: str, kind: str) -> Path:
    return history_dir(state_dir) / f"{check_record_name(deployment)}.{kind}.json"


def _load(path: Path) -> tuple[dict[str, Any], str | None]:
    """The JSON object in ``path`` ({} when missing) and why it could not be read (None: it could)."""
    try:
        got = safefs.read_own(path, limit=safefs.RECORD_LIMIT, nofollow=True, missing_ok=True)
        if got is None:
            return {}, None
        data = parse_json(got.data, path)
    except JsonFileError as exc:
        return {}, exc.why
    except InvalidInputError as exc:
        return {}, exc.problems[0].removeprefix(f"{path}: ")
    except ValueError as exc:
        return {}, str(exc)
    if not isinstance(data, dict):
        return {}, "the top level is not a JSON object"
    return data, None


def _save(path: Path, data: Mapping[str, Any]) -> None:
    encoded = (json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n").encode()
    check_fits(path, encoded)  # measured as written: ensure_ascii's \uXXXX can make text six times longer
    with safefs.own_dir(path.parent) as d:
        d.write_atomic(path.name, encoded, mode=0o644)


def _remove(path: Path) -> bool:
    try:
        handle = safefs.SafeDir.at(path.parent)
    except InvalidInputError:
        return False
    with handle:
        return handle.remove(path.name)


def _time(value: Any) -> float | None:
    return record_number(value, high=TIME_MAX)


def _span(value: Any) -> float | None:
    return record_number(value, high=SPAN_MAX)


def _count(value: Any) -> int:
    return int(record_number(value, high=COUNT_MAX, integer=True) or 0)


def _text(value: Any, limit: int) -> str | None:
    """A string of the record, cut to ``limit`` characters; None for anything else."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= limit else value[:limit] + "..."


# --- boots ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Boot:
    at: float
    recipe_digest: str
    image: str
    status: str
    total_s: float
    phases: tuple[tuple[str, float], ...]  # (phase, seconds spent in it), in the order they came
    image_digest: str | None = None
    cache: str | None = None  # the engine cache at the start: "cold" (empty) or "warm"; None: no cache kept

    def to_dict(self) -> dict[str, Any]:  # a record on disk: the file format from_dict reads back
        return {"at": self.at, "recipe_digest": self.recipe_digest, "image": self.image,
                "image_digest": self.image_digest, "status": self.status, "total_s": round(self.total_s, 2),
                "phases": [{"phase": p, "s": round(s, 2)} for p, s in self.phases], "cache": self.cache}

    @classmethod
    def from_dict(cls, data: Any) -> Boot | None:
        if not isinstance(data, dict):
            return None
        at, total = _time(data.get("at")), _span(data.get("total_s"))
        phases = []
        raw = data.get("phases")
        for item in raw[:PHASES_KEPT] if isinstance(raw, list) else []:
            spent = _span(item.get("s")) if isinstance(item, dict) else None
            if spent is not None and isinstance(item.get("phase"), str):
                phases.append((item["phase"], spent))
        strings = [data.get(k) for k in ("recipe_digest", "image", "status")]
        if at is None or total is None or not all(isinstance(s, str) for s in strings):
            return None
        digest = data.get("image_digest")
        cache = data.get("cache") if data.get("cache") in ("cold", "warm") else None
        return cls(at, str(strings[0]), str(strings[1]), str(strings[2]), total, tuple(phases),
                   digest if isinstance(digest, str) else None, cache)


def boots(state_dir: Path, deployment: str) -> list[Boot]:
    """The recorded boots of ``deployment``, oldest first."""
    raw = _load(_file(state_dir, deployment, "boots"))[0].get("boots")
    found = [Boot.from_dict(b) for b in raw] if isinstance(raw, list) else []
    return [b for b in found if b is not None][-BOOTS_KEPT:]


def record_boot(state_dir: Path, deployment: str, boot: Boot) -> None:
    kept = [b.to_dict() for b in [*boots(state_dir, deployment), boot][-BOOTS_KEPT:]]
    _save(_file(state_dir, deployment, "boots"), {"version": 1, "deployment": deployment, "boots": kept})


def by_cache(found: list[Boot]) -> dict[str, dict[str, float]]:
    """The last ready boot that found the engine cache cold, and the last that found it warm: what a warm
    cache saves, per deployment (``status``)."""
    out: dict[str, dict[str, float]] = {}
    for boot in found:
        if boot.status == "ready" and boot.cache in ("cold", "warm"):
            out[boot.cache] = {"total_s": round(boot.total_s, 2), "at": boot.at}
    return out


def last_boot(state_dir: Path, deployment: str) -> Boot | None:
    found = boots(state_dir, deployment)
    return found[-1] if found else None


@dataclass(frozen=True)
class BootBudget:
    """How long each phase may take, learnt from earlier ready boots of the same recipe and image."""

    phase_s: Mapping[str, float]
    ready_s: tuple[float, float]  # the fastest and slowest of those boots
    count: int

    def allowance(self, phase: str, flat_s: float) -> float | None:
        """Seconds ``phase`` may last (never less than the flat stall budget); None: no boot saw it."""
        longest = self.phase_s.get(phase)
        return None if longest is None else max(flat_s, PHASE_FACTOR * longest)

    def stall_detail(self, phase: str, spent_s: float, allowed_s: float) -> str:
        low, high = self.ready_s
        return (f"the last {self.count} boots were ready in {low:.0f}-{high:.0f} s; {spent_s:.0f} s in {phase} "
                f"is a stall (allowed {allowed_s:.0f} s: {PHASE_FACTOR:g}x the longest it took before)")


def budgets(history: Iterable[Boot], recipe_digest: str, image: str) -> BootBudget | None:
    """The budget the ready boots of this recipe and image give (the newest ``BOOTS_KEPT``); None while
    there are fewer than ``HISTORY_MIN``."""
    ready = [b for b in history if b.status == "ready" and b.recipe_digest == recipe_digest and b.image == image]
    if len(ready) < HISTORY_MIN:
        return None
    longest: dict[str, float] = {}
    for boot in ready:
        for phase, spent in boot.phases:
            longest[phase] = max(longest.get(phase, 0.0), spent)
    totals = [b.total_s for b in ready]
    return BootBudget(longest, (min(totals), max(totals)), len(ready))


# --- canary runs ------------------------------------------------------------------------------------


@dataclass
class CanaryConfig:
    every_s: int
    checks: list[str]
    on_failure: str  # restart | none
    after: int
    timeout_s: int
    installed_at: float = 0.0
    baseline: dict[str, Any] | None = None  # verify.export.Baseline.to_dict(): the answers each run compares with

    def baseline_summary(self) -> dict[str, Any] | None:
        """The baseline without its answers: where it came from and how many."""
        if self.baseline is None:
            return None
        return {**{k: v for k, v in self.baseline.items() if k != "answers"}, "answers": len(self.baseline["answers"])}

    def shown(self) -> dict[str, Any]:
        """The settings as commands report them (the baseline summarised)."""
        return {**vars(self), "baseline": self.baseline_summary()}

    @classmethod
    def from_dict(cls, data: Any) -> CanaryConfig | None:
        try:
            return cls.read(data)
        except ValueError:
            return None

    @classmethod
    def read(cls, data: Any) -> CanaryConfig:
        """The settings in a record; ValueError says why they cannot be used (a canary must never run with
        less than it was told to: a damaged baseline is no baseline-less canary)."""
        if not isinstance(data, dict):
            raise ValueError("the settings are not a JSON object")
        if "unreadable" in data:  # a run found the record unreadable and said so here
            raise ValueError(f"the record could not be read: {_text(data['unreadable'], REASON_LIMIT)}")
        every = record_number(data.get("every_s"), low=1, high=EVERY_MAX_S, integer=True)
        after = record_number(data.get("after"), low=1, high=AFTER_MAX, integer=True)
        timeout = record_number(data.get("timeout_s"), low=1, high=TIMEOUT_MAX_S, integer=True)
        if every is None or after is None or timeout is None:
            raise ValueError(f"every_s, after or timeout_s is not a whole number within its bounds (every_s 1 to "
                             f"{EVERY_MAX_S}, after 1 to {AFTER_MAX}, timeout_s 1 to {TIMEOUT_MAX_S})")
        checks = data.get("checks")
        if not isinstance(checks, list) or not 1 <= len(checks) <= CHECKS_KEPT or not all(
                isinstance(c, str) and len(c) <= NAME_LIMIT for c in checks):
            raise ValueError("checks is not a list of check names")
        if data.get("on_failure") not in ("restart", "none"):
            raise ValueError("on_failure is neither restart nor none")
        baseline = None
        if data.get("baseline") is not None:
            from rigctl.verify.export import Baseline  # noqa: PLC0415 - verify brings its HTTP client along

            parsed = Baseline.from_dict(data["baseline"])
            if parsed is None:
                raise ValueError("its baseline is damaged")
            baseline = parsed.to_dict()
        return cls(int(every), list(checks), str(data["on_failure"]), int(after), int(timeout),
                   _time(data.get("installed_at")) or 0.0, baseline)


def read_run(data: Any) -> dict[str, Any] | None:
    """One run of a canary record, each field typed and bounded (a field that is not: None); None for an
    entry that is no run (not an object, or no true/false verdict)."""
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        return None
    raw = data.get("checks")
    checks = [{"id": str(_text(c.get("id"), NAME_LIMIT)), "status": str(_text(c.get("status"), NAME_LIMIT))}
              for c in (raw[:CHECKS_KEPT] if isinstance(raw, list) else [])
              if isinstance(c, dict) and isinstance(c.get("id"), str) and isinstance(c.get("status"), str)]
    return {"at": _time(data.get("at")), "ok": data["ok"], "duration_s": _span(data.get("duration_s")),
            "checks": checks, "failed_check": _text(data.get("failed_check"), NAME_LIMIT),
            "reason": _text(data.get("reason"), REASON_LIMIT),
            "ttft_ms": record_number(data.get("ttft_ms"), high=LATENCY_MAX_MS),
            "itl_ms": record_number(data.get("itl_ms"), high=LATENCY_MAX_MS),
            "action": _text(data.get("action"), NAME_LIMIT)}


def read_restart(data: Any) -> dict[str, Any] | None:
    """One restart the canary made, typed and bounded as ``read_run``'s fields are."""
    if not isinstance(data, dict):
        return None
    return {"at": _time(data.get("at")), "unit": _text(data.get("unit"), NAME_LIMIT + 16),
            "after_failures": record_number(data.get("after_failures"), high=COUNT_MAX, integer=True),
            "reason": _text(data.get("reason"), REASON_LIMIT)}


@dataclass
class CanaryState:
    config: CanaryConfig | None = None
    runs: list[dict[str, Any]] = field(default_factory=list)
    consecutive_failures: int = 0
    restarted_in_streak: bool = False
    restarts: list[dict[str, Any]] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=lambda: {"runs": 0, "failures": 0, "restarts": 0})
    # the record's settings as found when they could not be read (kept as they are, written back untouched)
    unreadable_config: Any = None
    # why the record, or its settings, cannot be read: a failing canary (None: it could be read)
    unreadable: str | None = None

    def to_dict(self, deployment: str) -> dict[str, Any]:  # the canary record on disk (read back by its loader)
        return {"version": 1, "deployment": deployment,
                "config": self.unreadable_config if self.config is None else vars(self.config),
                "runs": self.runs[-RUNS_KEPT:], "consecutive_failures": self.consecutive_failures,
                "restarted_in_streak": self.restarted_in_streak, "restarts": self.restarts[-RESTARTS_KEPT:],
                "counts": self.counts}

    @property
    def last(self) -> dict[str, Any] | None:
        return self.runs[-1] if self.runs else None

    def last_failure(self) -> dict[str, Any] | None:
        return next((r for r in reversed(self.runs) if not r.get("ok")), None)

    def staleness(self, now: float, service: str | None) -> str | None:
        """Why the canary has stopped running (None: it runs): its service is failed (a run that could not
        start: an interpreter gone, a recipe that does not load), or its last run, or its install when it never
        ran, is older than ``STALE_INTERVALS`` intervals and a run's bound. ``service``: the canary service's
        ActiveState as systemd said it (None: not asked)."""
        if service == "failed":
            return ("its service is failed: the last run could not run to its end (`journalctl` of the canary "
                    "service says why)")
        if self.config is None:
            return None
        allowed = STALE_INTERVALS * self.config.every_s + self.config.timeout_s
        last = self.last.get("at") if self.last else None
        if last is not None:
            age = now - last
            return None if age <= allowed else (f"its last run was {age:.0f} s ago, more than {STALE_INTERVALS} "
                                                f"intervals of {self.config.every_s} s: its runs do not happen")
        since = self.config.installed_at
        if since and now - since > allowed:
            return (f"it never ran since it was installed {now - since:.0f} s ago, more than {STALE_INTERVALS} "
                    f"intervals of {self.config.every_s} s: its runs do not happen")
        return None

    def summary(self, *, now: float | None = None, service: str | None = None,
                paused_by: str | None = None) -> dict[str, Any] | None:
        """What `status` shows: interval, last run and result, consecutive failures, the last failure (its
        reason and time, and whether it is the last run), the restarts it made, whether it is stale, and
        whether it fails its deployment (unreadable, its last run failed, or stale). ``now``: the wall clock
        (default: now); ``service``: the canary service's ActiveState (None: not asked); ``paused_by``: the
        rigctl command that holds the deployment's lock now (`up`, `swap` pause the canary while they work):
        a canary paused on purpose is not stale."""
        if self.config is None and not self.runs and self.unreadable is None:
            return None
        last, failed = self.last, self.last_failure()
        now = time.time() if now is None else now
        stale = self.staleness(now, service)
        if stale is not None and paused_by is not None and service != "failed":
            stale = None
        last_at = last.get("at") if last else None
        return {
            "unreadable": self.unreadable,
            "interval_s": self.config.every_s if self.config else None,
            "checks": self.config.checks if self.config else [],
            "on_failure": self.config.on_failure if self.config else None,
            "baseline": self.config.baseline_summary() if self.config else None,
            "last_run_at": last.get("at") if last else None,
            "last_result": None if last is None else ("pass" if last.get("ok") else "fail"),
            "last_ttft_ms": last.get("ttft_ms") if last else None,
            "last_itl_ms": last.get("itl_ms") if last else None,
            "consecutive_failures": self.consecutive_failures,
            "last_failure_reason": failed.get("reason") if failed else None,
            "last_failure_at": failed.get("at") if failed else None,
            "restarts": len(self.restarts), "last_restart": self.restarts[-1] if self.restarts else None,
            "counts": dict(self.counts),
            # whether the last failure is the last run (False: a run passed since; it is past)
            "last_failure_current": failed is not None and failed is last,
            "service": service, "stale": stale is not None, "stale_reason": stale, "paused_by": paused_by,
            "last_run_age_s": None if last_at is None else round(max(0.0, now - last_at), 1),
            "failing": self.unreadable is not None or stale is not None or (last is not None and not last.get("ok")),
        }


def canary_state(state_dir: Path, deployment: str) -> CanaryState:
    """The canary's record; one that cannot be read is a state with ``unreadable`` said, never an empty one."""
    path = _file(state_dir, deployment, "canary")
    data, why = _load(path)
    if why is not None:
        # the run writes its failure in place of the file: the settings say why, so the canary stays failing
        # until `rigctl canary NAME --every ...` writes them again
        return CanaryState(unreadable=f"{path}: {why}", unreadable_config={"unreadable": why})
    state = CanaryState()
    if data.get("config") is not None:
        try:
            state.config = CanaryConfig.read(data["config"])
        except ValueError as exc:
            state.unreadable_config = data["config"]
            state.unreadable = f"{path}: its settings: {exc}"
    runs, restarts = data.get("runs"), data.get("restarts")
    found_runs = [read_run(r) for r in runs[-RUNS_KEPT:]] if isinstance(runs, list) else []
    state.runs = [r for r in found_runs if r is not None]
    found_restarts = [read_restart(r) for r in restarts[-RESTARTS_KEPT:]] if isinstance(restarts, list) else []
    state.restarts = [r for r in found_restarts if r is not None]
    state.consecutive_failures = _count(data.get("consecutive_failures"))
    state.restarted_in_streak = data.get("restarted_in_streak") is True
    counts = data.get("counts")
    if isinstance(counts, dict):
        for key in state.counts:
            state.counts[key] = _count(counts.get(key))
    return state


def check_canary_fits(state_dir: Path, deployment: str, state: CanaryState) -> None:
    """Refuse settings whose record, with room for its runs (``RUNS_RESERVE``), would be larger than its
    reader accepts: before anything is installed, not at the first run."""
    path = _file(state_dir, deployment, "canary")
    encoded = (json.dumps(state.to_dict(deployment), indent=1, sort_keys=True, allow_nan=False) + "\n").encode()
    if len(encoded) + RUNS_RESERVE > safefs.RECORD_LIMIT:
        raise InvalidInputError(
            [f"{path}: the canary's record would be too large ({len(encoded):,} bytes as written, with its "
             f"baseline; rigctl reads at most {safefs.RECORD_LIMIT - RUNS_RESERVE:,} of settings)"],
            fix="export fewer or shorter answers (`rigctl verify NAME --checks smoke --export FILE`), or run the "
                "canary without --baseline")


def save_canary(state_dir: Path, deployment: str, state: CanaryState) -> None:
    _save(_file(state_dir, deployment, "canary"), state.to_dict(deployment))


def clip_reason(reason: str) -> str:
    return reason if len(reason) <= REASON_LIMIT else reason[:REASON_LIMIT] + "..."


def remove(state_dir: Path, deployment: str, *, boots_too: bool) -> list[str]:
    """Delete the canary's record (and the boot history with ``boots_too``); the paths removed."""
    kinds = ("canary", "boots") if boots_too else ("canary",)
    return [str(p) for p in (_file(state_dir, deployment, k) for k in kinds) if _remove(p)]
