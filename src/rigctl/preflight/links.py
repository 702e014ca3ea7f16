"""What joins two GPUs, and the all_reduce bus bandwidth that link allows.

Pure functions over the GPU facts, shared by ``rigctl inventory``'s view, the ``gpu-p2p`` check and the
``gpu-allreduce`` deep check. All rates are GB/s in ONE direction: in an all_reduce over two GPUs each GPU
sends the whole buffer once and receives it once (NCCL's bus bandwidth is then the per-direction rate the
link carried), so a link's one-way rate is its ceiling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from rigctl.host.facts import NVLINK_VERSION_NAMES, P2P_STATUS_NAMES, Gpu, GpuInventory, GpuPair

# One link, one direction, by NVML_NVLINK_VERSION_*. 4.0 (Hopper) is what `nvidia-smi nvlink -s` printed for
# every link of the real H200 pair (26.562 GB/s: 25 GB/s of payload rate as NVIDIA quotes it, before
# encoding); the others are NVIDIA's published per-link rates (not measured here). An unknown version
# gives no expectation rather than a guess.
NVLINK_LINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 26.562, 7: 50.0}

# One PCIe lane, one direction, after line encoding: 8b/10b for Gen1-2, 128b/130b for Gen3-5, FLIT
# (242 of 256 bytes) for Gen6. Gen5 x16 is 63.0 GB/s raw; about 50 GB/s of it is reachable with P2P.
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# The share of the link's rate below which a measured all_reduce is "far below" and worth a warning.
# NVLink: the real H200 pair (18 links, 478 GB/s) measured 258 GB/s at 64 MiB (54%), 296 GB/s at the check's
# 256 MiB (62%) and 328 GB/s at 1 GiB (69%); with NCCL_P2P_DISABLE=1 it fell to 27 GB/s (6%), and a pair with
# half its links down would reach about 31%. 40% keeps a healthy pair clear with room for a busier run.
NVLINK_HEALTHY_SHARE = 0.40
# PCIe (estimate, no PCIe pair measured here): NCCL over P2P reaches about 65-80% of the raw rate (TLP
# overhead: ~50 of Gen5 x16's 63 GB/s); through host memory (P2P off, or an IOMMU/ACS detour through the
# root complex) it usually lands at 30-50%. Below half the raw rate, something in that path is wrong.
PCIE_HEALTHY_SHARE = 0.50

# nvidia-smi topo -m's words for NVML_TOPOLOGY_* (common ancestor)
TOPOLOGY_SHORT = {0: "same board", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


@dataclass(frozen=True)
class PairLink:
    """The link between GPUs ``a`` and ``b`` and what it allows, in words and in GB/s."""

    a: int
    b: int
    kind: Literal["nvlink", "pcie", "unknown"]
    name: str  # "NVLink 4.0, 18 links (NV18)", "PCIe Gen5 x16, PHB: same PCIe host bridge"
    p2p: str  # the driver's P2P READ status in words
    p2p_ok: bool | None
    ceiling_gbps: float | None  # what the link carries one way; None when it cannot be said
    basis: str = ""  # how the ceiling was reached, e.g. "18 links x 26.562 GB/s"
    notes: tuple[str, ...] = field(default=())  # facts beside the link, e.g. a GPU running below its PCIe max
    slow_lanes: tuple[str, ...] = field(default=())  # PCIe links now below what they can do (gen or width)

    @property
    def healthy_share(self) -> float:
        return NVLINK_HEALTHY_SHARE if self.kind == "nvlink" else PCIE_HEALTHY_SHARE

    @property
    def text(self) -> str:
        rate = f", {self.ceiling_gbps:.1f} GB/s each way" if self.ceiling_gbps else ""
        notes = "".join(f"; {n}" for n in self.notes)
        return f"GPU {self.a}<->{self.b}: {self.name}{rate}, P2P {self.p2p}{notes}"


def _gen(g: Gpu) -> int | None:
    return g.pcie_generation_max or g.pcie_generation


def _width(g: Gpu) -> int | None:
    return g.pcie_width_max or g.pcie_width


def _pcie_ceiling(g: Gpu) -> float | None:
    """The GPU's PCIe link at the best NVML says this device and slot can do (max, not current: many cards
    drop to Gen1 when idle, and an inventory is taken idle)."""
    gen, width = _gen(g), _width(g)
    rate = PCIE_LANE_GBPS.get(gen or 0)
    return None if rate is None or not width else rate * width


def _pcie_now(g: Gpu) -> str:
    gen = "?" if g.pcie_generation is None else g.pcie_generation
    width = "?" if g.pcie_width is None else g.pcie_width
    return f"Gen{gen} x{width}"


def _pcie_max(g: Gpu) -> str:
    return f"Gen{_gen(g) or '?'} x{_width(g) or '?'}"


def _below_max(g: Gpu) -> str | None:
    gen_down = g.pcie_generation is not None and g.pcie_generation_max is not None \
        and g.pcie_generation < g.pcie_generation_max
    narrow = g.pcie_width is not None and g.pcie_width_max is not None and g.pcie_width < g.pcie_width_max
    if not (gen_down or narrow):
        return None
    return f"GPU {g.index} at PCIe {_pcie_now(g)} (of {_pcie_max(g)})"


def _common_ancestor(pair: GpuPair) -> str:
    if pair.topology is None:
        return "common ancestor unknown"
    short = TOPOLOGY_SHORT.get(pair.topology)
    return (f"{short}: " if short and short != pair.topology_text else "") + pair.topology_text


def _pcie(pair: GpuPair, ga: Gpu | None, gb: Gpu | None, kind: Literal["pcie", "unknown"]) -> PairLink:
    gpus = [g for g in (ga, gb) if g is not None]
    now = {_pcie_now(g) for g in gpus}
    speeds = now.pop() if len(now) == 1 else "(" + ", ".join(f"GPU {g.index} {_pcie_now(g)}" for g in gpus) + ")"
    slow = tuple(s for g in gpus if (s := _below_max(g)))
    ceilings = [c for g in gpus if (c := _pcie_ceiling(g)) is not None]
    ceiling = min(ceilings) if len(ceilings) == len(gpus) == 2 else None
    slowest = min(gpus, key=lambda g: _pcie_ceiling(g) or 0.0) if gpus else None
    basis = ""
    if ceiling is not None and slowest is not None:
        basis = f"PCIe {_pcie_max(slowest)}: {_width(slowest)} lanes x {PCIE_LANE_GBPS[_gen(slowest) or 0]} GB/s"
    notes = tuple(f"{s}: idle cards lower the link speed, a link trained down stays low under load" for s in slow)
    if kind == "unknown":
        return PairLink(pair.a, pair.b, "unknown", f"link not recorded (an inventory from an older rigctl); "
                        f"{_common_ancestor(pair)}; PCIe {speeds}", pair.p2p_text, pair.p2p_ok, None, "", notes, slow)
    return PairLink(pair.a, pair.b, "pcie", f"PCIe {speeds}, {_common_ancestor(pair)}", pair.p2p_text,
                    pair.p2p_ok, ceiling, basis, notes, slow)


def describe_pair(inv: GpuInventory, pair: GpuPair) -> PairLink:
    """Name the link: NVLink with its link count and version, or PCIe with the common ancestor and the
    generation and width NVML reports now."""
    by_index = {g.index: g for g in inv.devices}
    ga, gb = by_index.get(pair.a), by_index.get(pair.b)
    if pair.link == "nvlink" and pair.nvlink_links:
        version = pair.nvlink_version
        words = "NVLink" + ("" if version is None else f" {NVLINK_VERSION_NAMES.get(version, f'version {version}')}")
        rate = NVLINK_LINK_GBPS.get(version or 0)
        down = [f"{g.nvlink.inactive} of {g.nvlink.active + g.nvlink.inactive} NVLinks down on GPU {g.index}"
                for g in (ga, gb) if g is not None and g.nvlink is not None and g.nvlink.inactive]
        return PairLink(pair.a, pair.b, "nvlink", f"{words}, {pair.nvlink_links} links (NV{pair.nvlink_links})",
                        pair.p2p_text, pair.p2p_ok, None if rate is None else rate * pair.nvlink_links,
                        "" if rate is None else f"{pair.nvlink_links} links x {rate} GB/s", tuple(down))
    if pair.link is None:
        return _pcie(pair, ga, gb, "unknown")
    link = _pcie(pair, ga, gb, "pcie")
    with_links = [g for g in (ga, gb) if g is not None and g.nvlink is not None and g.nvlink.active]
    if pair.p2p_nvlink is not None and len(with_links) == 2:  # linked, but not to each other
        status = P2P_STATUS_NAMES.get(pair.p2p_nvlink, f"status {pair.p2p_nvlink}")
        note = f"NVLinks are up on both GPUs but NVLink P2P between them is {status}"
        link = replace(link, notes=(*link.notes, note))
    return link


def chosen_links(inv: GpuInventory, indices: Sequence[int]) -> list[PairLink]:
    """Every pair among the chosen GPUs, described; pairs NVML never probed are left out."""
    out = []
    for i, a in enumerate(indices):
        for b in indices[i + 1 :]:
            pair = inv.pair(a, b)
            if pair is not None:
                out.append(describe_pair(inv, pair))
    return out


def slowest(links: Sequence[PairLink]) -> PairLink | None:
    """The pair that bounds an all_reduce over all of them (NCCL's ring is as fast as its slowest hop);
    None when any pair's ceiling is unknown (then there is no honest expectation)."""
    if not links or any(x.ceiling_gbps is None for x in links):
        return None
    return min(links, key=lambda x: x.ceiling_gbps or 0.0)
