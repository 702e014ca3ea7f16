"""The memory plan against the boot's receipt: after `up` or `swap`, what gpu-fit planned per GPU beside
what the engine said at start-up (``deploy.receipt``), kept in the deployment's record for `status` and
`metrics`, and kept for the host's next plan of the same recipe settings, image and GPU product
(``host.receipts``). A receipt outside the plan's margin is said: the estimate was wrong somewhere."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from rigctl.deploy.receipt import Receipt
from rigctl.deploy.state import record_number
from rigctl.preflight.finding import Finding
from rigctl.util.text import printable

GIB = 1 << 30
TOLERANCE = 0.03  # beyond the plan's own low and high: the engine rounds what it prints to 0.01 GiB
PLANNED_KEYS = ("kv_budget_low_bytes", "kv_budget_high_bytes", "weights_low_bytes", "weights_high_bytes",
                "kv_bytes_per_sequence", "gpu_memory_bytes")
RECEIPT_KEYS = ("weights_bytes", "kv_available_bytes", "kv_tokens", "graphs_bytes", "max_concurrency")


def planned_from(findings: Sequence[Finding]) -> dict[str, Any] | None:
    """The gpu-fit plan of a preflight, in the terms a receipt can be held against; None when it planned
    nothing (no GPUs, no model shape) or planned for cards that are not here."""
    fit = next((f for f in findings if f.id == "gpu-fit"), None)
    fig = fit.figures if fit is not None else None
    if not fig or "verdict" not in fig or "assumed_gpus" in fig:
        return None
    basis = fig.get("basis") or {}
    terms = {t.get("name"): t for t in basis.get("terms") or [] if isinstance(t, Mapping)}
    weights = terms.get("weights") or {}
    return {
        "verdict": fig["verdict"], "kv_budget_low_bytes": fig.get("kv_budget_bytes_per_gpu"),
        "kv_budget_high_bytes": fig.get("kv_budget_bytes_per_gpu_optimistic"),
        "weights_low_bytes": weights.get("low_bytes"), "weights_high_bytes": weights.get("high_bytes"),
        "kv_bytes_per_sequence": fig.get("kv_bytes_per_sequence"), "gpu_memory_bytes": basis.get("gpu_memory_bytes"),
        "gpu_product": basis.get("gpu_product", ""), "receipt_key": basis.get("receipt_key", ""),
        "from_receipt": "receipt" in basis,
    }


def disagreement(planned: Mapping[str, Any], receipt: Receipt) -> str | None:
    """Where the receipt falls outside the plan's margin (KV budget, weights), said with both figures."""
    said = []
    for what, got, low, high in (
            ("KV budget", receipt.kv_available_bytes, planned.get("kv_budget_low_bytes"),
             planned.get("kv_budget_high_bytes")),
            ("weights", receipt.weights_bytes, planned.get("weights_low_bytes"), planned.get("weights_high_bytes"))):
        if got is None or not isinstance(low, int) or not isinstance(high, int):
            continue
        slack = TOLERANCE * max(abs(low), abs(high), GIB)
        if got < low - slack or got > high + slack:
            band = f"{low / GIB:.2f} GiB" if low == high else f"{low / GIB:.2f}-{high / GIB:.2f} GiB"
            said.append(f"{what} {got / GIB:.2f} GiB per GPU, planned {band}")
    return "; ".join(said) or None


def after_boot(findings: Sequence[Finding], receipt: Receipt | None, *, at: float) -> dict[str, Any] | None:
    """What the record keeps: the plan, the receipt, and where they disagree; None when neither says
    anything (no plan and no memory lines)."""
    planned = planned_from(findings)
    if (receipt is None or receipt.empty) and planned is None:
        return None
    got = receipt if receipt is not None and not receipt.empty else None
    return {
        "at": round(at, 3), "planned": planned, "receipt": got.to_dict() if got is not None else None,
        "disagrees": disagreement(planned, got) if planned is not None and got is not None else None,
    }


def view(memory: Any) -> dict[str, Any] | None:
    """A record's memory entry as `status` shows it, every figure bounded (a record is read back from disk:
    whatever is not a figure of the right kind is left out)."""
    if not isinstance(memory, Mapping):
        return None
    raw = memory.get("planned")
    planned_in: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    planned: dict[str, Any] = {}
    for key in PLANNED_KEYS:
        value = record_number(planned_in.get(key), low=-(1 << 50), high=1 << 50, integer=True)
        if value is not None:
            planned[key] = int(value)
    if planned_in.get("verdict") in ("fits", "tight", "does-not-fit"):
        planned["verdict"] = planned_in["verdict"]
    if isinstance(planned_in.get("from_receipt"), bool):
        planned["from_receipt"] = planned_in["from_receipt"]
    receipt = Receipt.from_dict(memory.get("receipt"))
    actual = {k: getattr(receipt, k) for k in RECEIPT_KEYS if getattr(receipt, k) is not None}
    disagrees = memory.get("disagrees")
    at = record_number(memory.get("at"), low=0, high=1e11, integer=False)
    return {
        "at": None if at is None else dt.datetime.fromtimestamp(at, dt.UTC).isoformat(timespec="seconds"),
        "planned": planned or None, "receipt": actual or None,
        "engine": receipt.engine, "engine_version": receipt.engine_version,
        "disagrees": printable(disagrees[:400]) if isinstance(disagrees, str) else None,
    }
