"""`rigctl metrics`: every deployment's state as Prometheus text exposition (format 0.0.4), for a scrape
through node_exporter's textfile collector (``--textfile DIR`` writes ``DIR/rigctl.prom`` atomically) or any
other reader of that format.

Names follow Prometheus' conventions: the ``rigctl_`` prefix, base units in the name (``_seconds``,
``_bytes``), ``_total`` on counters, ``_timestamp_seconds`` for a Unix time, and one ``# HELP`` and
``# TYPE`` per family. Each series carries ``deployment``, ``scope`` and ``unit`` labels; the model and image
ride on ``rigctl_deployment_info`` (value 1) only, so they never split the other series. A figure rigctl
does not know (no NVML, no canary yet) is left out, never written as 0; a canary whose record cannot be read,
or that is stale (``rigctl_canary_stale`` 1: no run for two intervals, or its service failed), is a failing one
(``rigctl_canary_ok`` 0).

Label values come from records and engines: each goes through ``util.text.printable`` (no control character,
line separator or lone surrogate reaches a scraper, which reads lines split at any of them) and then the
format's own escaping; so does the HELP text.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rigctl.util.text import printable

MIB = 1 << 20
FILE_NAME = "rigctl.prom"


@dataclass
class MetricRow:
    """What the exposition needs of one deployment (from `status`, its canary record and boot history)."""

    deployment: str
    scope: str
    unit: str
    up: bool
    active: str
    restarts: int | None
    model: str | None = None
    image_digest: str | None = None
    gpu_used_mib: int | None = None
    gpu_planned_mib: int | None = None
    canary: Mapping[str, Any] | None = None  # history.CanaryState.summary()
    canary_counts: Mapping[str, int] | None = None
    last_ttft_ms: float | None = None
    last_itl_ms: float | None = None
    last_boot_s: float | None = None
    last_boot_at: float | None = None
    memory: Mapping[str, Any] | None = None  # deploy.memory.view: the plan against the boot's receipt


@dataclass
class _Family:
    name: str
    kind: str  # gauge | counter
    help: str
    samples: list[tuple[dict[str, str], float]] = field(default_factory=list)


def escape_label(value: str) -> str:
    """A label value as the text format carries it: shown escaped (``printable``), then backslash, double
    quote and line feed escaped as the format says."""
    return printable(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text as the format carries it: backslash and line feed escaped, after ``printable``."""
    return printable(text, None).replace("\\", "\\\\").replace("\n", "\\n")


def _value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


FAMILIES: tuple[tuple[str, str, str], ...] = (
    ("rigctl_deployment_info", "gauge", "A rigctl deployment: its served model and image digest (always 1)."),
    ("rigctl_up", "gauge", "1 when the service is active and its endpoint answers ready, else 0."),
    ("rigctl_service_restarts_total", "counter", "Restarts systemd counted (NRestarts) since the last start."),
    ("rigctl_gpu_memory_used_bytes", "gauge", "GPU memory the engine's processes use now (NVML)."),
    ("rigctl_gpu_memory_planned_bytes", "gauge", "GPU memory the recipe plans for (gpus.count x gpus.min_memory_mib)."),
    ("rigctl_kv_budget_planned_bytes", "gauge",
     "The KV cache per GPU the memory plan gave the engine; bound=low|high (pessimistic, optimistic)."),
    ("rigctl_kv_budget_receipt_bytes", "gauge", "The KV cache per GPU the engine said it had at its last ready boot."),
    ("rigctl_weights_planned_bytes", "gauge", "Weights per GPU as the memory plan had them (its high estimate)."),
    ("rigctl_weights_receipt_bytes", "gauge", "Weights per GPU as the engine said it loaded them."),
    ("rigctl_memory_plan_disagrees", "gauge", "1 when the boot's receipt is outside the memory plan's margin."),
    ("rigctl_canary_ok", "gauge",
     "1 when the canary's last run passed and it runs, 0 when it failed, is stale or its record is unreadable."),
    ("rigctl_canary_stale", "gauge",
     "1 when the canary no longer runs: its last run is older than two intervals, or its service is failed."),
    ("rigctl_canary_last_run_age_seconds", "gauge", "Seconds since the canary's last run began."),
    ("rigctl_canary_last_run_timestamp_seconds", "gauge", "Unix time of the canary's last run."),
    ("rigctl_canary_interval_seconds", "gauge", "How often the canary runs."),
    ("rigctl_canary_consecutive_failures", "gauge", "Canary runs failed in a row, up to the last one."),
    ("rigctl_canary_runs_total", "counter", "Canary runs recorded since the canary was installed."),
    ("rigctl_canary_failures_total", "counter", "Failed canary runs since the canary was installed."),
    ("rigctl_canary_restarts_total", "counter", "Restarts the canary made (--on-failure restart)."),
    ("rigctl_last_verify_ttft_seconds", "gauge", "Time to first token of the canary's last streamed probe."),
    ("rigctl_last_verify_itl_seconds", "gauge", "Mean inter-token latency of the canary's last streamed probe."),
    ("rigctl_last_boot_duration_seconds", "gauge", "How long the last recorded boot took until ready (or failed)."),
    ("rigctl_last_boot_timestamp_seconds", "gauge", "Unix time the last recorded boot ended."),
)


def exposition(rows: Iterable[MetricRow]) -> str:
    families = {name: _Family(name, kind, text) for name, kind, text in FAMILIES}

    def add(name: str, labels: dict[str, str], value: float | None) -> None:
        if value is not None:
            families[name].samples.append((labels, float(value)))

    for row in rows:
        base = {"deployment": row.deployment, "scope": row.scope, "unit": row.unit}
        add("rigctl_deployment_info", {**base, "model": row.model or "", "image_digest": row.image_digest or ""}, 1)
        add("rigctl_up", base, 1 if row.up else 0)
        add("rigctl_service_restarts_total", base, row.restarts)
        add("rigctl_gpu_memory_used_bytes", base, None if row.gpu_used_mib is None else row.gpu_used_mib * MIB)
        add("rigctl_gpu_memory_planned_bytes", base,
            row.gpu_planned_mib * MIB if row.gpu_planned_mib else None)
        if row.memory is not None:
            planned = row.memory.get("planned") or {}
            got = row.memory.get("receipt") or {}
            add("rigctl_kv_budget_planned_bytes", {**base, "bound": "low"}, _number(planned.get("kv_budget_low_bytes")))
            add("rigctl_kv_budget_planned_bytes", {**base, "bound": "high"},
                _number(planned.get("kv_budget_high_bytes")))
            add("rigctl_kv_budget_receipt_bytes", base, _number(got.get("kv_available_bytes")))
            add("rigctl_weights_planned_bytes", base, _number(planned.get("weights_high_bytes")))
            add("rigctl_weights_receipt_bytes", base, _number(got.get("weights_bytes")))
            if planned and got:
                add("rigctl_memory_plan_disagrees", base, 1 if row.memory.get("disagrees") else 0)
        canary = row.canary or {}
        result = "fail" if canary.get("unreadable") or canary.get("failing") else canary.get("last_result")
        add("rigctl_canary_ok", base, None if result is None else (1 if result == "pass" else 0))
        if row.canary is not None:
            add("rigctl_canary_stale", base, 1 if canary.get("stale") else 0)
        add("rigctl_canary_last_run_age_seconds", base, _number(canary.get("last_run_age_s")))
        add("rigctl_canary_last_run_timestamp_seconds", base, _number(canary.get("last_run_at")))
        add("rigctl_canary_interval_seconds", base, _number(canary.get("interval_s")))
        if row.canary is not None:
            add("rigctl_canary_consecutive_failures", base, _number(canary.get("consecutive_failures")))
        counts = row.canary_counts or {}
        for key, name in (("runs", "rigctl_canary_runs_total"), ("failures", "rigctl_canary_failures_total"),
                          ("restarts", "rigctl_canary_restarts_total")):
            if row.canary is not None:
                add(name, base, _number(counts.get(key, 0)))
        add("rigctl_last_verify_ttft_seconds", base, None if row.last_ttft_ms is None else row.last_ttft_ms / 1000)
        add("rigctl_last_verify_itl_seconds", base, None if row.last_itl_ms is None else row.last_itl_ms / 1000)
        add("rigctl_last_boot_duration_seconds", base, row.last_boot_s)
        add("rigctl_last_boot_timestamp_seconds", base, row.last_boot_at)
    return render_families(families.values())


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def render_families(families: Iterable[_Family]) -> str:
    lines: list[str] = []
    for family in families:
        if not family.samples:
            continue
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels.items())
            lines.append(f"{family.name}{{{inner}}} {_value(value)}")
    return "\n".join(lines) + ("\n" if lines else "")


def names(rows: Sequence[MetricRow]) -> list[str]:
    """The family names the exposition of ``rows`` holds (for the view's summary line)."""
    text = exposition(rows)
    return [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]


def row_of(status: Any, planned_mib: int | None = None) -> MetricRow:
    """A metrics row from one ``deploy.status.ServiceStatus``."""
    canary = status.canary
    boot = status.last_boot or {}
    total = _number(boot.get("total_s"))
    return MetricRow(
        deployment=status.recipe or status.unit.removesuffix(".service"), scope=str(status.scope), unit=status.unit,
        up=status.active == "active" and status.health == "ready", active=status.active, restarts=status.restarts,
        model=status.model, image_digest=status.image_digest, gpu_used_mib=status.gpu_memory_mib,
        gpu_planned_mib=planned_mib, canary=canary, canary_counts=(canary or {}).get("counts"),
        last_ttft_ms=_number((canary or {}).get("last_ttft_ms")),
        last_itl_ms=_number((canary or {}).get("last_itl_ms")),
        last_boot_s=total, last_boot_at=_number(boot.get("at")), memory=getattr(status, "memory", None),
    )
