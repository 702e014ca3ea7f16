"""GPU layout: which of the host's GPUs a recipe runs on.

Automatic choice keeps the GPUs that match the recipe (product name, memory, compute capability, not in
MIG mode), keeps one product unless the recipe allows a mix, and among the sets of the right size
prefers idle GPUs, then GPUs that can reach each other by P2P under the closest common PCIe ancestor,
then low indices. An explicit selection (``gpus.select`` in the recipe, ``--gpus`` on the command line)
wins; it is resolved and its mismatches are reported by the checks, not silently corrected.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from rigctl.host.facts import MIB, Gpu, HostFacts
from rigctl.recipe.model import Recipe

BUSY_BYTES = 1024 * MIB  # a GPU with more than this in use is treated as busy (a desktop uses a few hundred MiB)
MAX_EXHAUSTIVE = 12  # candidates beyond this are chosen greedily; combinations explode


class ChosenGpu(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    uuid: str
    name: str


class Choice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    wanted: int
    gpus: list[ChosenGpu] = Field(default_factory=list)
    explicit: bool = False
    reasons: list[str] = Field(default_factory=list, description="why these GPUs, why others were left out")
    problems: list[str] = Field(default_factory=list, description="why no valid layout could be made")

    @property
    def ok(self) -> bool:
        return not self.problems and len(self.gpus) == self.wanted

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self.gpus]


def is_busy(gpu: Gpu) -> bool:
    return bool(gpu.processes) or (gpu.memory_used_bytes or 0) > BUSY_BYTES


def mismatches(recipe: Recipe, gpu: Gpu) -> list[str]:
    """Why ``gpu`` does not fit the recipe (empty: it fits)."""
    want = recipe.gpus
    out = []
    if want.products and gpu.name not in want.products:
        out.append(f"product {gpu.name!r} is not one of the recipe's ({', '.join(want.products)})")
    mib = gpu.memory_total_mib
    if want.min_memory_mib and (mib is None or mib < want.min_memory_mib):
        out.append(f"{'unknown' if mib is None else f'{mib:,}'} MiB < {want.min_memory_mib:,} MiB required")
    if want.compute_capability and gpu.compute_capability not in want.compute_capability:
        out.append(f"compute capability {gpu.compute_capability or 'unknown'} not in "
                   f"{', '.join(want.compute_capability)}")
    if gpu.mig_enabled:
        out.append("MIG mode is on (whole-GPU serving needs it off)")
    return out


def _resolve(token: str, devices: Sequence[Gpu]) -> Gpu | str:
    token = token.strip()
    if token.isdigit():
        found = next((g for g in devices if g.index == int(token)), None)
        return found or f"no GPU with index {token} (this host has {len(devices)})"
    exact = [g for g in devices if g.uuid == token]
    if exact:
        return exact[0]
    prefixed = [g for g in devices if g.uuid and g.uuid.startswith(token)]
    if len(prefixed) == 1:
        return prefixed[0]
    if prefixed:
        return f"{token!r} matches several GPUs; give more of the UUID"
    return f"no GPU with UUID {token!r}"


def _chosen(gpu: Gpu) -> ChosenGpu:
    return ChosenGpu(index=gpu.index, uuid=gpu.uuid, name=gpu.name)


def _score(combo: Sequence[Gpu], facts: HostFacts) -> tuple[int, int, int, int]:
    busy = sum(1 for g in combo if is_busy(g))
    no_p2p = 0
    distance = 0
    for a, b in itertools.combinations(combo, 2):
        pair = facts.gpu.pair(a.index, b.index)
        if pair is None or pair.p2p_ok is not True:
            no_p2p += 1
        distance += 60 if pair is None or pair.topology is None else pair.topology
    return busy, no_p2p, distance, sum(g.index for g in combo)


def choose_gpus(recipe: Recipe, facts: HostFacts, explicit: Sequence[str] | None = None) -> Choice:
    want = recipe.gpus.count
    if want == 0:
        return Choice(wanted=0, reasons=["the recipe needs no GPU"])
    inv = facts.gpu
    if not inv.available:
        return Choice(wanted=want, problems=[f"no GPU facts: NVML is unavailable ({inv.error})"])
    devices = inv.devices
    selection = list(explicit) if explicit else (list(recipe.gpus.select) if recipe.gpus.select else None)
    if selection is not None:
        return _explicit(recipe, devices, selection, from_cli=bool(explicit))

    reasons: list[str] = []
    candidates: list[Gpu] = []
    for gpu in devices:
        why = mismatches(recipe, gpu)
        if why:
            reasons.append(f"GPU {gpu.index} ({gpu.name}) left out: {'; '.join(why)}")
        else:
            candidates.append(gpu)
    groups: list[list[Gpu]]
    if recipe.gpus.allow_mixed:
        groups = [candidates]
    else:
        by_name: dict[str, list[Gpu]] = {}
        for gpu in candidates:
            by_name.setdefault(gpu.name, []).append(gpu)
        groups = list(by_name.values())
    best: tuple[tuple[int, int, int, int], list[Gpu]] | None = None
    for group in groups:
        if len(group) < want:
            continue
        if len(group) <= MAX_EXHAUSTIVE:
            combos: list[list[Gpu]] = [list(c) for c in itertools.combinations(group, want)]
        else:
            combos = [sorted(group, key=lambda g: (is_busy(g), g.index))[:want]]
        for combo in combos:
            score = _score(combo, facts)
            if best is None or score < best[0]:
                best = (score, combo)
    if best is None:
        largest = max((len(g) for g in groups), default=0)
        mixed_note = "" if recipe.gpus.allow_mixed or len(groups) <= 1 else " of one product (allow_mixed is off)"
        return Choice(wanted=want, gpus=[_chosen(g) for g in (max(groups, key=len) if groups else [])],
                      reasons=reasons,
                      problems=[f"need {want} matching GPU(s){mixed_note}, found {largest} "
                                f"among {len(devices)} on this host"])
    (busy, no_p2p, _dist, _), combo = best
    names = ", ".join(f"{g.index} ({g.name})" for g in combo)
    reasons.insert(0, f"chose GPU {names}")
    if busy:
        reasons.append(f"{busy} of the chosen GPUs are busy: no idle matching set was available")
    if want > 1 and no_p2p:
        reasons.append("no matching set had P2P between every pair")
    return Choice(wanted=want, gpus=[_chosen(g) for g in combo], reasons=reasons)


def _explicit(recipe: Recipe, devices: Sequence[Gpu], selection: list[str], *, from_cli: bool) -> Choice:
    where = "--gpus" if from_cli else "recipe gpus.select"
    want = recipe.gpus.count
    chosen: list[Gpu] = []
    problems: list[str] = []
    for token in selection:
        found = _resolve(token, devices)
        if isinstance(found, str):
            problems.append(f"{where}: {found}")
        elif found in chosen:
            problems.append(f"{where}: GPU {found.index} is selected twice")
        else:
            chosen.append(found)
    if len(selection) != want:
        problems.append(f"{where} names {len(selection)} GPU(s) but the recipe needs {want}")
    reasons = [f"explicit selection from {where}: " + ", ".join(f"{g.index} ({g.name})" for g in chosen)]
    return Choice(wanted=want, gpus=[_chosen(g) for g in chosen], explicit=True, reasons=reasons,
                  problems=problems)
