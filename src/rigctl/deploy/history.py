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
deployment, and the canary's run writes its file while ``up`` may be writing the record. A file that
cannot be read (damaged, a link, not ours) counts as empty: history is advice, never a reason to refuse.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigctl.deploy.state import check_record_name
from rigctl.errors import InvalidInputError
from rigctl.util import safefs
from rigctl.util.jsonfile import JsonFileError, parse_json

SUBDIR = "history"
BOOTS_KEPT = 20
RUNS_KEPT = 50
RESTARTS_KEPT = 10
HISTORY_MIN = 2  # ready boots of the same recipe and image before a stall is judged against them
PHASE_FACTOR = 3.0  # a phase may take this many times its longest ready boot before it is a stall
REASON_LIMIT = 300  # characters of a failing check's message kept per run


def history_dir(state_dir: Path) -> Path:
    return state_dir / SUBDIR


def _file(state_dir: Path, deployment: str, kind: str) -> Path:
    return history_dir(state_dir) / f"{check_record_name(deployment)}.{kind}.json"


def _load(path: Path) -> dict[str, Any]:
    try:
        got = safefs.read_file(path, limit=safefs.RECORD_LIMIT, nofollow=True, missing_ok=True)
        if got is None:
            return {}
        data = parse_json(got.data, path)
    except (JsonFileError, InvalidInputError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _save(path: Path, data: Mapping[str, Any]) -> None:
    with safefs.own_dir(path.parent) as d:
        d.write_atomic(path.name, (json.dumps(data, indent=1, sort_keys=True, allow_nan=False) + "\n").encode(),
                       mode=0o644)


def _remove(path: Path) -> bool:
    try:
        handle = safefs.SafeDir.at(path.parent)
    except InvalidInputError:
        return False
    with handle:
        return handle.remove(path.name)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


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

    def to_dict(self) -> dict[str, Any]:  # a record on disk: the file format from_dict reads back
        return {"at": self.at, "recipe_digest": self.recipe_digest, "image": self.image,
                "image_digest": self.image_digest, "status": self.status, "total_s": round(self.total_s, 2),
                "phases": [{"phase": p, "s": round(s, 2)} for p, s in self.phases]}

    @classmethod
    def from_dict(cls, data: Any) -> Boot | None:
        if not isinstance(data, dict):
            return None
        at, total = _num(data.get("at")), _num(data.get("total_s"))
        phases = []
        for item in data.get("phases") or []:
            if isinstance(item, dict) and isinstance(item.get("phase"), str) and (s := _num(item.get("s"))) is not None:
                phases.append((item["phase"], s))
        strings = [data.get(k) for k in ("recipe_digest", "image", "status")]
        if at is None or total is None or not all(isinstance(s, str) for s in strings):
            return None
        digest = data.get("image_digest")
        return cls(at, str(strings[0]), str(strings[1]), str(strings[2]), total, tuple(phases),
                   digest if isinstance(digest, str) else None)


def boots(state_dir: Path, deployment: str) -> list[Boot]:
    """The recorded boots of ``deployment``, oldest first."""
    raw = _load(_file(state_dir, deployment, "boots")).get("boots")
    found = [Boot.from_dict(b) for b in raw] if isinstance(raw, list) else []
    return [b for b in found if b is not None][-BOOTS_KEPT:]


def record_boot(state_dir: Path, deployment: str, boot: Boot) -> None:
    kept = [b.to_dict() for b in [*boots(state_dir, deployment), boot][-BOOTS_KEPT:]]
    _save(_file(state_dir, deployment, "boots"), {"version": 1, "deployment": deployment, "boots": kept})


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
        if not isinstance(data, dict):
            return None
        every, after, timeout = data.get("every_s"), data.get("after"), data.get("timeout_s")
        checks = data.get("checks")
        ints = all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (every, after, timeout))
        if not ints or not isinstance(checks, list) or not all(isinstance(c, str) for c in checks):
            return None
        if data.get("on_failure") not in ("restart", "none"):
            return None
        baseline = None
        if data.get("baseline") is not None:
            from rigctl.verify.export import Baseline  # noqa: PLC0415 - verify brings its HTTP client along

            parsed = Baseline.from_dict(data["baseline"])
            if parsed is None:  # a damaged baseline must not turn into a canary that compares nothing
                return None
            baseline = parsed.to_dict()
        return cls(int(str(every)), list(checks), str(data["on_failure"]), int(str(after)), int(str(timeout)),
                   _num(data.get("installed_at")) or 0.0, baseline)


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

    def summary(self) -> dict[str, Any] | None:
        """What `status` shows: interval, last run and result, consecutive failures, last failure's reason."""
        if self.config is None and not self.runs:
            return None
        last, failed = self.last, self.last_failure()
        return {
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
        }


def canary_state(state_dir: Path, deployment: str) -> CanaryState:
    data = _load(_file(state_dir, deployment, "canary"))
    state = CanaryState(config=CanaryConfig.from_dict(data.get("config")))
    if state.config is None and data.get("config") is not None:
        state.unreadable_config = data["config"]
    runs = data.get("runs")
    state.runs = [r for r in runs if isinstance(r, dict)][-RUNS_KEPT:] if isinstance(runs, list) else []
    failures = data.get("consecutive_failures")
    state.consecutive_failures = failures if isinstance(failures, int) and failures >= 0 else 0
    state.restarted_in_streak = data.get("restarted_in_streak") is True
    restarts = data.get("restarts")
    state.restarts = [r for r in restarts if isinstance(r, dict)][-RESTARTS_KEPT:] if isinstance(restarts, list) else []
    counts = data.get("counts")
    if isinstance(counts, dict):
        for key in state.counts:
            value = counts.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                state.counts[key] = value
    return state


def save_canary(state_dir: Path, deployment: str, state: CanaryState) -> None:
    _save(_file(state_dir, deployment, "canary"), state.to_dict(deployment))


def clip_reason(reason: str) -> str:
    return reason if len(reason) <= REASON_LIMIT else reason[:REASON_LIMIT] + "..."


def remove(state_dir: Path, deployment: str, *, boots_too: bool) -> list[str]:
    """Delete the canary's record (and the boot history with ``boots_too``); the paths removed."""
    kinds = ("canary", "boots") if boots_too else ("canary",)
    return [str(p) for p in (_file(state_dir, deployment, k) for k in kinds) if _remove(p)]
