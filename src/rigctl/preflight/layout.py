"""GPU layout: which of the host's GPUs a recipe runs on.

Automatic choice keeps the GPUs that match the recipe (product name, memory, compute capability, not in
MIG mode), keeps one product unless the recipe allows a mix, and among the sets of the right size
prefers idle GPUs, then GPUs that can reach each other by P2P under the closest common PCIe ancestor,
then low indices. An explicit selection (``gpus.select`` in the recipe, ``--gpus`` on the command line)
wins; it is resolved and its mismatches are reported by the checks, not silently corrected.

Every GPU the automatic choice leaves out carries its reason and the id of the check that owns that
reason (``LeftOut``): when no layout fits, that check fails and names the GPUs, so a script keyed on
``gpu-mig`` hears about the MIG card that made the layout impossible. ``Choice.unit_ids`` is the one
place a choice becomes the device names a unit gets (``render`` and ``up`` both go through it).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from rigctl.host.facts import MIB, Gpu, HostFacts
from rigctl.recipe.model import Recipe
from rigctl.util.fields import empty_list

BUSY_BYTES = 1024 * MIB  # a GPU with more than this in use is treated as busy (a desktop uses a few hundred MiB)
MAX_EXHAUSTIVE = 12  # candidates beyond this are chosen greedily; combinations explode


class ChosenGpu(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    uuid: str
    name: str


# The checks that own each reason a GPU can be left out (ids as in preflight.registry.CHECKS). A busy GPU is
# never left out, only ranked last: when no layout fits it is among the chosen, and gpu-busy names it there.
CHECK_DRIVER = "gpu-driver"
CHECK_MODEL = "gpu-model"
CHECK_MEMORY = "gpu-memory"
CHECK_COMPUTE_CAPABILITY = "gpu-compute-capability"
CHECK_MIG = "gpu-mig"
LEFT_OUT_CHECKS = (CHECK_DRIVER, CHECK_MODEL, CHECK_MEMORY, CHECK_COMPUTE_CAPABILITY, CHECK_MIG)


class LeftOut(BaseModel):
    """One reason one GPU was not a candidate, under the id of the check that judges that reason."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    index: int
    name: str
    check: str
    why: str


class Choice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    wanted: int
    gpus: list[ChosenGpu] = Field(default_factory=empty_list)
    explicit: bool = False
    reasons: list[str] = Field(default_factory=empty_list, description="why these GPUs, why others were left out")
    problems: list[str] = Field(default_factory=empty_list, description="why no valid layout could be made")
    left_out: list[LeftOut] = Field(default_factory=empty_list, description="each GPU left out, each reason, its check")

    @property
    def ok(self) -> bool:
        return not self.problems and len(self.gpus) == self.wanted

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]

    @property
    def uuids(self) -> list[str]:
        return [g.uuid for g in self.gpus]

    @property
    def unit_ids(self) -> list[str]:
        """The CDI device names a unit gets for this choice: the chosen GPUs' UUIDs (the index only for a GPU
        NVML gave no UUID), so the unit keeps its GPUs when enumeration order changes; ``[]`` when the recipe
        needs no GPU. A choice that is not ``ok`` gives what it has (possibly too few): rendering refuses a
        wrong count rather than guess, and callers decide whether to go that far."""
        return [g.uuid or str(g.index) for g in self.gpus]


def is_busy(gpu: Gpu) -> bool:
    return bool(gpu.processes) or (gpu.memory_used_bytes or 0) > BUSY_BYTES


def unreachable(gpu: Gpu) -> str | None:
    """Why the driver cannot talk to ``gpu`` (it fell off the bus, needs a reset), or None."""
    lost = next((u for u in gpu.unsupported if u.call == "nvmlDeviceGetHandleByIndex"), None)
    if lost is None:
        return None
    return f"the driver cannot reach it ({lost.error}{': ' + lost.message if lost.message else ''})"


def left_out(recipe: Recipe, gpu: Gpu) -> list[LeftOut]:
    """Why ``gpu`` does not fit the recipe, each reason under its check's id (empty: it fits)."""
    want = recipe.gpus

    def out(check: str, why: str) -> LeftOut:
        return LeftOut(index=gpu.index, name=gpu.name, check=check, why=why)

    lost = unreachable(gpu)
    if lost is not None:  # nothing else about it is known: its name and memory are NVML's blanks
        return [out(CHECK_DRIVER, lost)]
    found = []
    if want.products and gpu.name not in want.products:
        found.append(out(CHECK_MODEL, f"product {gpu.name!r} is not one of the recipe's ({', '.join(want.products)})"))
    mib = gpu.memory_total_mib
    if want.min_memory_mib and (mib is None or mib < want.min_memory_mib):
        found.append(out(CHECK_MEMORY,
                         f"{'unknown' if mib is None else f'{mib:,}'} MiB < {want.min_memory_mib:,} MiB required"))
    if want.compute_capability and gpu.compute_capability not in want.compute_capability:
        found.append(out(CHECK_COMPUTE_CAPABILITY, f"compute capability {gpu.compute_capability or 'unknown'} not in "
                                                   f"{', '.join(want.compute_capability)}"))
    if gpu.mig_enabled:
        found.append(out(CHECK_MIG, "MIG mode is on (whole-GPU serving needs it off)"))
    return found


def mismatches(recipe: Recipe, gpu: Gpu) -> list[str]:
    """Why ``gpu`` does not fit the recipe (empty: it fits)."""
    return [x.why for x in left_out(recipe, gpu)]


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
    excluded: list[LeftOut] = []
    candidates: list[Gpu] = []
    for gpu in devices:
        why = left_out(recipe, gpu)
        if why:
            reasons.append(f"GPU {gpu.index} ({gpu.name}) left out: {'; '.join(x.why for x in why)}")
            excluded.extend(why)
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
        kept = max(groups, key=len) if groups else []
        for group in groups:  # the other products' GPUs: left out because the recipe takes one product
            if group is not kept:
                excluded.extend(LeftOut(index=g.index, name=g.name, check=CHECK_MODEL,
                                        why=f"another product than GPU {kept[0].index} ({kept[0].name}) and "
                                            "the recipe does not allow a mix (gpus.allow_mixed: false)")
                                for g in group)
        return Choice(wanted=want, gpus=[_chosen(g) for g in kept], reasons=reasons, left_out=excluded,
                      problems=[f"need {want} matching GPU(s){mixed_note}, found {largest} "
                                f"among {len(devices)} on this host"])
    (busy, no_p2p, _dist, _), combo = best
    names = ", ".join(f"{g.index} ({g.name})" for g in combo)
    reasons.insert(0, f"chose GPU {names}")
    if busy:
        reasons.append(f"{busy} of the chosen GPUs are busy: no idle matching set was available")
    if want > 1 and no_p2p:
        reasons.append("no matching set had P2P between every pair")
    return Choice(wanted=want, gpus=[_chosen(g) for g in combo], reasons=reasons, left_out=excluded)


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
