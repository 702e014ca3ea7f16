"""torch.distributed over files: see the package's docstring."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import torch

_group: dict[str, int] = {}


def init_process_group(backend: str, *, rank: int, world_size: int, device_id: torch.device) -> None:
    env = {k: os.environ.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "NCCL_DEBUG")}
    torch.record(rank, backend=backend, world_size=world_size, device=[device_id.type, device_id.index],
                 current_device=torch.cuda.current, env=env)
    if not (env["MASTER_ADDR"] and env["MASTER_PORT"]):
        raise ValueError("Error initializing torch.distributed using env:// rendezvous: MASTER_ADDR is not set")
    noise = int(os.environ.get("FAKE_TORCH_NOISE", "0"))  # lines of warnings before anything else
    for i in range(noise):
        print(f"[W rank {rank}] warning {i:06d} " + "." * 60, file=sys.stderr)
    if os.environ.get("FAKE_TORCH_MODE") == "crash" or (os.environ.get("FAKE_TORCH_MODE") == "one-crashes" and rank):
        raise RuntimeError("NCCL error: unhandled system error (run with NCCL_DEBUG=INFO for details)")
    _group.update(rank=rank, world=world_size, calls=0)


def _meet(payload: str) -> list[str]:
    """Every rank's payload for this collective call, in rank order, once all of them have written theirs."""
    call, rank, world = _group["calls"], _group["rank"], _group["world"]
    _group["calls"] = call + 1
    folder = Path(os.environ["FAKE_TORCH_DIR"])
    mine = folder / f"call-{call}-rank-{rank}"
    (folder / f"{mine.name}.tmp").write_text(payload, encoding="utf-8")
    (folder / f"{mine.name}.tmp").rename(mine)
    names = [folder / f"call-{call}-rank-{r}" for r in range(world)]
    while not all(p.exists() for p in names):
        time.sleep(0.002)
    return [p.read_text(encoding="utf-8") for p in names]


def all_reduce(x: torch.Tensor) -> None:
    if os.environ.get("FAKE_TORCH_MODE") == "hang":
        while True:
            time.sleep(1)
    started = time.perf_counter()
    values = [float(v) for v in _meet(repr(x.value))]
    x.value = sum(values)
    pace = float(os.environ.get("FAKE_TORCH_GBPS", "0"))  # a link this fast at most, so the figure is known
    if pace:
        time.sleep(max(0.0, x.size * 4 / (pace * 1e9) - (time.perf_counter() - started)))
    if os.environ.get("FAKE_TORCH_MODE") == "wrong":
        x.off = 12


def barrier() -> None:
    _meet("")


def destroy_process_group() -> None:
    if os.environ.get("FAKE_TORCH_MODE") == "teardown-hangs" and _group.get("rank"):
        while True:
            time.sleep(1)
    _group.clear()
