"""Receipts: what engines booted on this host said about their memory, kept in
``$XDG_STATE_HOME/rigctl/receipts.json`` for the next memory plan of the same recipe settings, image and GPU.
A file that cannot be read counts as no receipts (the plan falls back to its estimate) and says why."""

from __future__ import annotations

import functools
import json
from pathlib import Path

from pydantic import TypeAdapter

from rigctl.host.facts import MemoryReceipt
from rigctl.host.stored import read_entries
from rigctl.invocation import current
from rigctl.util.safefs import write_own

KEPT = 64  # the newest receipts kept, over every recipe
KEPT_PER_KEY = 4  # of one recipe's settings, image and GPU product


@functools.cache
def _receipts() -> TypeAdapter[list[MemoryReceipt]]:
    return TypeAdapter(list[MemoryReceipt])


def store_path() -> Path:
    return current().state_home / "rigctl" / "receipts.json"


def read_receipts(path: Path | None = None) -> tuple[list[MemoryReceipt], str | None]:
    """(receipts, problem): a missing file is none; a damaged one is none plus why."""
    return read_entries(path or store_path(), _receipts(), "receipts", "a receipts file")


def record_receipt(receipt: MemoryReceipt, path: Path | None = None) -> None:
    """Adds ``receipt``, keeping the newest few of each recipe setting/image/GPU and the newest overall. A
    damaged file is replaced: receipts are a cache of measurements, not a record anyone relies on."""
    path = path or store_path()
    kept, _problem = read_receipts(path)
    kept.append(receipt)
    same = [r for r in kept if (r.recipe, r.key, r.image, r.gpu_product)
            == (receipt.recipe, receipt.key, receipt.image, receipt.gpu_product)]
    drop = {id(r) for r in same[:-KEPT_PER_KEY]}
    kept = [r for r in kept if id(r) not in drop][-KEPT:]
    body = json.dumps({"receipts": [r.model_dump(mode="json", exclude_none=True) for r in kept]}, indent=1,
                      allow_nan=False) + "\n"
    write_own(path, body, mode=0o644)
