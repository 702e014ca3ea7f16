"""A stand-in for torch with CUDA and NCCL, for running the gpu-allreduce program (rigctl/host/programs/allreduce.py)
on a machine without GPUs. Only the calls that program makes exist. Put ``tests/support/fake_torch`` first
on the PYTHONPATH of the process that runs it.

Ranks are real processes and meet for real: each ``all_reduce`` writes the rank's tensor into the directory
``FAKE_TORCH_DIR`` and waits for every other rank's, then sums, so a launcher that starts the wrong ranks or
world size hangs or computes the wrong sum here as it would on GPUs. A tensor is held as one value in every
element plus how many elements are off by one. ``FAKE_TORCH_MODE`` breaks it the ways GPUs break:
``wrong`` (the sum comes back one too high in the first 12 elements), ``hang`` (all_reduce never returns), ``crash`` (NCCL
fails in init_process_group), ``one-crashes`` (only in rank 1 and up: rank 0 then waits for them forever),
``teardown-hangs`` (rank 1 and up never leave destroy_process_group). ``FAKE_TORCH_NOISE`` lines of
warnings go to stderr first. ``FAKE_TORCH_GBPS`` makes each all_reduce last at least as long as on a link of
that speed, so the bandwidth the program measures is at most that. Each rank records what it was started
with in ``rank-N.json`` there.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

from torch import cuda, distributed  # noqa: F401 - `import torch` gives torch.cuda and torch.distributed

__version__ = "0.0+fake"
float32 = "float32"


@dataclass(frozen=True)
class device:  # torch's spelling
    type: str
    index: int = 0


@dataclass
class Scalar:
    value: float

    def item(self) -> float:
        return self.value


@dataclass
class Tensor:
    """``size`` elements; the first ``off`` of them hold ``value + 1``, the rest ``value``."""

    size: int
    value: float
    off: int = 0

    def __ne__(self, other: object) -> Tensor:  # type: ignore[override]  # elementwise, as torch's
        assert isinstance(other, int | float)
        wrong = (self.size - self.off) * (self.value != other) + self.off * (self.value + 1 != other)
        return Tensor(self.size, 0.0, wrong)  # a mask: the count of True elements is what .sum() gives

    def sum(self) -> Scalar:
        return Scalar(self.value * (self.size - self.off) + (self.value + 1) * self.off)

    def __getitem__(self, index: int) -> Scalar:
        return Scalar(self.value + 1 if index < self.off else self.value)


def full(shape: tuple[int, ...], fill: float, *, device: str, dtype: str) -> Tensor:
    assert device == "cuda" and dtype == float32 and len(shape) == 1, (shape, device, dtype)
    return Tensor(shape[0], float(fill))


def record(rank: int, **facts: object) -> None:
    path = os.path.join(os.environ["FAKE_TORCH_DIR"], f"rank-{rank}.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"pid": os.getpid(), **facts}, f)
