"""torch.cuda: one device per rank, nothing to wait for."""

from __future__ import annotations

current: int | None = None


class nccl:  # torch's spelling
    @staticmethod
    def version() -> tuple[int, int, int]:
        return (2, 0, 0)


def set_device(index: int) -> None:
    global current  # noqa: PLW0603 - a process has one current device, as in torch
    current = index


def synchronize() -> None:
    pass
