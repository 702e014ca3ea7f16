"""Checks of the layer between the driver and the engine: the image's CUDA against the driver's, the kernel
module's flavour, the known-bad table (engine, GPU, NCCL), and the PCIe path between the chosen GPUs (link
width, ACS redirect on switch ports, IOMMU translation, Xid errors since boot). Pure functions of (recipe,
facts, chosen layout), like every check: the facts come from ``host.stack``, ``podman image inspect`` and, for
an image not pulled, its registry's config (``host.registry``); the recipe's ``image_declares`` comes last.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from itertools import combinations
from typing import Literal

from rigctl.host.facts import (
    IMAGE_CUDA_KEYS,
    IMAGE_NCCL_KEYS,
    Gpu,
    GpuPath,
    cuda_of,
    declared_in,
    leading_version,
    nccl_of,
)
from rigctl.preflight.finding import Context, Verdict, fail, ok, skip, warn
from rigctl.preflight.known_bad import match, rows_for

# The oldest driver of each CUDA release (facts.md): what a fix asks for when an image needs a newer CUDA.
DRIVER_FOR_CUDA: dict[tuple[int, ...], str] = {(13, 0): "580.65.06", (12, 9): "575.51.03", (12, 8): "570.26"}


def _chosen(ctx: Context) -> list[Gpu]:
    by_index = {g.index: g for g in ctx.facts.gpu.devices}
    return [by_index[i] for i in ctx.choice.indices if i in by_index]


def _no_gpus(ctx: Context) -> Verdict | None:
    if ctx.recipe.gpus.count == 0:
        return skip("the recipe needs no GPU")
    if not ctx.facts.gpu.available:
        return skip("no GPU facts (NVML unavailable); see gpu-driver")
    if not ctx.choice.gpus:
        return skip("no GPUs chosen; see gpu-count")
    return None


@dataclass(frozen=True)
class Declared:
    """What the image declares of one thing (its CUDA or its NCCL), and where that was read."""

    value: str  # "12.8" or "2.26.2"
    said: str  # what was read: "CUDA_VERSION=12.8.1", "image_declares.cuda: 12.8"
    source: str  # "the local image's Env", "the registry's config", "the recipe's image_declares"


def _declared(ctx: Context, what: Literal["cuda", "nccl"]) -> tuple[Declared | None, str]:
    """The image's CUDA or NCCL from the first source that says it: the local image's Env (podman image
    inspect), else its registry's config (read when it is not pulled), else the recipe's ``image_declares``.
    None, with why each source said nothing and the three ways to supply it, when none does."""
    keys = IMAGE_CUDA_KEYS if what == "cuda" else IMAGE_NCCL_KEYS
    version = cuda_of if what == "cuda" else nccl_of
    tried: list[str] = []
    img = ctx.facts.podman.image(ctx.recipe.image_digest)
    remote = ctx.facts.image_registry
    if remote is not None and remote.digest != ctx.recipe.image_digest:
        remote = None  # a replayed inventory of another recipe's image
    for source, env, why in (
        ("the local image's Env", None if img is None else img.env,
         "not pulled here" if img is None else "not inspected" if img.env is None else "declares none"),
        ("the registry's config" + (" (cached)" if remote is not None and remote.cached else ""),
         None if remote is None else remote.env,
         "not asked (the image is pulled, or an inventory of an older rigctl)" if remote is None
         else remote.error or "declares none"),
    ):
        found, value = declared_in(env, keys), version(env)
        if found is not None and value is not None:
            shown = value if isinstance(value, str) else _text(value[:2])
            return Declared(shown, f"{found[0]}={found[1]}", source), ""
        tried.append(f"{source}: {why}")
    given = ctx.recipe.image_declares
    field = None if given is None else given.cuda if what == "cuda" else given.nccl
    if field is not None:
        return Declared(field if what == "nccl" else _text(leading_version(field, 2) or ()),
                        f"image_declares.{what}: {field}", "the recipe's image_declares"), ""
    tried.append(f"the recipe's image_declares.{what}: unset")
    name = "CUDA" if what == "cuda" else "NCCL"
    return None, (f"the image's {name} version is not known ({'; '.join(tried)}): pull the image (see the "
                  "image check), let preflight read its registry's config (online, without RIGCTL_OFFLINE), or "
                  f"set image_declares.{what} in the recipe")


def _text(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def check_image_cuda(ctx: Context) -> Verdict:
    """An image built for a newer CUDA than the driver's fails at its first kernel (error 804, then a CPU
    fallback or a crash loop) while `nvidia-smi` works in the same container; forward compatibility
    (cuda-compat) needs the proprietary kernel module, which Blackwell cannot use."""
    if ctx.recipe.gpus.count == 0:
        return skip("the recipe needs no GPU")
    driver = ctx.facts.gpu.cuda_version
    if driver is None:
        return skip("NVML did not say the driver's CUDA version; see gpu-driver")
    declared, why = _declared(ctx, "cuda")
    wanted = None if declared is None else leading_version(declared.value, 2)
    if declared is None or wanted is None:
        return skip(f"{why}; the driver's CUDA is {driver}")
    have = ctx.facts.gpu.cuda_driver_version or 0
    have_v = (have // 1000, (have % 1000) // 10)
    said = f"{declared.said}, from {declared.source}"
    if wanted[:2] > have_v:
        need = DRIVER_FOR_CUDA.get(wanted[:2])
        return fail(f"the image is built for CUDA {_text(wanted[:2])} ({said}) but driver "
                    f"{ctx.facts.gpu.driver_version} supports CUDA {driver} at most: the engine fails at its "
                    "first kernel (CUDA error 804) though nvidia-smi works in the container",
                    f"install a driver for CUDA {_text(wanted[:2])}" + (f" (>= {need})" if need else "")
                    + ", reboot and regenerate the CDI spec; or pin an image built for CUDA "
                    f"{driver} or older (cuda-compat needs the proprietary module, which Blackwell cannot use)")
    return ok(f"the image's CUDA {_text(wanted[:2])} ({said}) is within the driver's {driver}")


def check_kernel_module(ctx: Context) -> Verdict:
    """Blackwell (compute capability 10 and up) runs only on NVIDIA's open kernel modules: with the
    proprietary one the driver loads and `nvidia-smi` finds no devices."""
    module = ctx.facts.stack.kernel_module
    wants = ctx.recipe.gpus.compute_capability or []
    needs_open = {g.index for g in _chosen(ctx) if _major(g.compute_capability) >= 10}
    recipe_blackwell = bool(wants) and all(_major(cc) >= 10 for cc in wants)
    if ctx.recipe.gpus.count == 0:
        return skip("the recipe needs no GPU")
    if module.flavour is None:
        return skip(f"the kernel module's flavour is unknown here ({module.error or 'not probed'})")
    shown = f"{module.flavour} kernel module {module.version or ''}".rstrip()
    fix = ("install the open kernel modules of the same driver (the -open package, e.g. nvidia-driver-580-open or "
           "nvidia-open), reboot, then regenerate the CDI spec")
    if module.flavour == "proprietary" and needs_open:
        return fail(f"the {shown} is loaded; GPU {', '.join(map(str, sorted(needs_open)))} (compute capability "
                    "10 or newer) need the open one", fix)
    if module.flavour == "proprietary" and recipe_blackwell and not ctx.choice.gpus:
        return fail(f"the {shown} is loaded and no GPU the recipe accepts is visible: the recipe's "
                    f"compute capability {', '.join(wants)} (Blackwell) needs the open module", fix)
    return ok(f"{shown} loaded")


def _major(cc: str | None) -> int:
    try:
        return int((cc or "0").split(".")[0])
    except ValueError:
        return 0


def check_known_bad(ctx: Context) -> Verdict:
    """The known-bad table (bundled, extended by the recipe's own combinations) against the recipe, the
    chosen GPUs' compute capability and the image's NCCL: a combination that holds here would fail the same
    way, after the whole boot."""
    rows = rows_for(ctx.recipe)
    host_ccs = {g.compute_capability for g in _chosen(ctx)}
    declared, why = _declared(ctx, "nccl")
    nccl = None if declared is None else declared.value
    judged = [match(row, ctx.recipe, host_ccs, nccl) for row in rows]
    held = [j for j in judged if j.holds]
    unknown = [j for j in judged if j.holds is None]
    note = f"; not judged: {', '.join(f'{j.row.id} ({j.why})' for j in unknown)}" if unknown else ""
    if declared is not None and any(j.row.nccl_versions is not None and j.holds is not None for j in judged):
        note += f"; NCCL {declared.value} as {declared.source} says ({declared.said})"
    elif unknown and declared is None and any(j.row.nccl_versions is not None for j in unknown):
        note += f"; {why}"
    if not held:
        return ok(f"none of {len(rows)} known-bad combination(s) holds here{note}")
    text = "; ".join(f"{j.row.id} ({j.why}): {j.row.problem}" + (f" [error: {j.row.error}]" if j.row.error else "")
                     + (f" <{j.row.source}>" if j.row.source else "") for j in held)
    fixes = " ".join(j.row.fix.rstrip(".") + "." for j in held)
    if any(j.row.severity == "fail" for j in held):
        return fail(text + note, f"{fixes} (to run it anyway, pass --force known-bad)")
    return warn(text + note, fixes)


def check_pcie_link(ctx: Context) -> Verdict:
    """A card in a slot wired narrower than the card (x4 of x16: a chipset slot, a riser, a bifurcated slot)
    moves tensor-parallel traffic at a quarter of the speed. The width is judged; the generation drops at
    idle to save power, so it is not."""
    if (early := _no_gpus(ctx)) is not None:
        return early
    narrow = [g for g in _chosen(ctx) if g.pcie_width is not None and g.pcie_width_max is not None
              and g.pcie_width < g.pcie_width_max]
    if narrow:
        return warn("; ".join(f"GPU {g.index} ({g.name}) runs its link at x{g.pcie_width} of x{g.pcie_width_max}"
                              for g in narrow),
                    "move the card to a slot wired x16 to the CPU, check the slot's bifurcation and lane sharing "
                    "(an M.2 drive may take lanes) in the firmware setup, reseat the card or its riser")
    widths = [f"{g.index}: x{g.pcie_width}" for g in _chosen(ctx) if g.pcie_width is not None]
    return ok("links at full width (" + ", ".join(widths) + ")" if widths else "link width not reported by NVML")


def _pcie_pairs(ctx: Context) -> list[tuple[GpuPath, GpuPath]] | None:
    """The chosen GPUs' paths, pair by pair, for pairs joined over PCIe; None when a path is unknown."""
    gpus = _chosen(ctx)
    pairs = []
    for a, b in combinations(gpus, 2):
        pair = ctx.facts.gpu.pair(a.index, b.index)
        if pair is not None and pair.link == "nvlink":
            continue
        pa, pb = ctx.facts.stack.path_of(a.index), ctx.facts.stack.path_of(b.index)
        if pa is None or pb is None:
            return None
        pairs.append((pa, pb))
    return pairs


def _peer_pairs(ctx: Context, read: str, alone: str) -> Verdict | list[tuple[GpuPath, GpuPath]]:
    """The chosen GPUs' PCIe pairs for a peer-to-peer check, or its verdict where there is nothing to judge:
    no GPUs, one GPU (``alone``: what there is none of), paths not read (``read``: what was not), every pair
    on NVLink."""
    if (early := _no_gpus(ctx)) is not None:
        return early
    if len(ctx.choice.gpus) < 2:
        return skip(f"one GPU: no peer-to-peer {alone}")
    pairs = _pcie_pairs(ctx)
    if pairs is None:
        return skip(f"the GPUs' {read} were not read (an inventory of an older rigctl, or no sysfs)")
    if not pairs:
        return ok("the chosen GPUs are joined by NVLink")
    return pairs


def check_pcie_acs(ctx: Context) -> Verdict:
    """ACS redirect on a PCIe switch port between two GPUs sends their peer-to-peer traffic up to the root
    complex: NCCL hangs in the first all-reduce or runs far slower (NVIDIA/nccl#2079, #1999)."""
    pairs = _peer_pairs(ctx, "PCIe paths", "path")
    if isinstance(pairs, Verdict):
        return pairs
    between = {}
    for pa, pb in pairs:
        above_a, above_b = {b.bdf: b for b in pa.bridges}, {b.bdf: b for b in pb.bridges}
        between.update({k: v for k, v in above_a.items() if k not in above_b})
        between.update({k: v for k, v in above_b.items() if k not in above_a})
    unread = [b for b in between.values() if b.error]
    redirecting = [b for b in between.values() if b.redirects and b.port_type == 6]  # switch downstream ports
    if redirecting:
        names = ", ".join(f"{b.bdf} ({b.port_text}, ACSCtl {b.acs_control:#06x})" for b in redirecting
                          if b.acs_control is not None)
        first = redirecting[0].bdf
        return fail(f"ACS redirect is on at {names}, between the chosen GPUs: their P2P traffic is sent to the "
                    "root complex, where NCCL hangs or crawls",
                    f"clear it for this boot (`sudo setpci -s {first} ECAP_ACS+6.w=0000`, for each port named), or "
                    "boot with pci=noacs; then run preflight --deep")
    if unread and len(unread) == len(between):
        return skip(f"the bridges' ACS settings are not readable here ({unread[0].error}); run as root to read them")
    at_roots = [b.bdf for b in between.values() if b.redirects]
    tail = f" (root ports with ACS redirect, where the traffic crosses the root complex anyway: {', '.join(at_roots)})"
    return ok(f"no ACS redirect on a switch port between the chosen GPUs ({len(between)} bridge(s) read)"
              + (tail if at_roots else ""))


def check_iommu(ctx: Context) -> Verdict:
    """With the IOMMU translating the GPUs' DMA, peer-to-peer transfers go through it: NCCL hangs on the first
    all-reduce on some boards, and is slower on the rest; passthrough (`iommu=pt`) keeps the IOMMU for other
    devices and lets the GPUs' traffic through."""
    pairs = _peer_pairs(ctx, "IOMMU groups", "traffic")
    if isinstance(pairs, Verdict):
        return pairs
    paths = {p.gpu: p for pair in pairs for p in pair}
    translated = {i: p.iommu_group_type for i, p in paths.items() if p.iommu_group_type in ("DMA", "DMA-FQ")}
    cmdline = " ".join(ctx.facts.stack.iommu_cmdline) or "no iommu option"
    if translated:
        shown = ", ".join(f"GPU {i}: {t}" for i, t in sorted(translated.items()))
        return warn(f"the IOMMU translates the chosen GPUs' DMA ({shown}; kernel command line: {cmdline})",
                    "boot with iommu=pt (add it to the kernel command line, e.g. GRUB_CMDLINE_LINUX, then reboot); "
                    "run preflight --deep to see whether NCCL's all-reduce finishes meanwhile")
    kinds = Counter(p.iommu_group_type or "no IOMMU group" for p in paths.values())
    return ok(", ".join(f"{n} GPU(s): {k}" for k, n in kinds.items()))


# Xids that say the card or its memory is failing, not that a program crashed on it (NVIDIA's Xid catalogue)
XID_HARDWARE = {48: "double-bit ECC error", 63: "row remapping pending", 64: "row remapping failed",
                74: "NVLink error", 79: "fallen off the bus", 92: "high single-bit ECC rate",
                94: "contained ECC error", 95: "uncontained ECC error", 119: "GSP timeout", 120: "GSP error"}


def check_gpu_xid(ctx: Context) -> Verdict:
    """Xid errors since boot on the chosen GPUs: a card that fell off the bus, has uncorrectable memory
    errors or a hung GSP fails again under the engine's load, minutes into the warmup."""
    if (early := _no_gpus(ctx)) is not None:
        return early
    log = ctx.facts.stack.xid
    if not log.read:
        return skip(f"the kernel log was not read ({log.error or 'not probed'})")
    found = {g.index: log.for_gpu(g.pci_bus_id) for g in _chosen(ctx)}
    found = {i: events for i, events in found.items() if events}
    if not found:
        return ok(f"no Xid on the chosen GPUs since boot ({len(log.events)} on the host)")
    parts = []
    hardware = False
    for index, events in sorted(found.items()):
        counts = Counter(e.xid for e in events)
        hardware |= any(x in XID_HARDWARE for x in counts)
        parts.append(f"GPU {index}: " + ", ".join(
            f"Xid {x}" + (f" ({XID_HARDWARE[x]})" if x in XID_HARDWARE else "") + (f" x{n}" if n > 1 else "")
            for x, n in sorted(counts.items())))
    message = "Xid errors since boot: " + "; ".join(parts)
    fix = ("read them (`sudo dmesg | grep -i xid`); for a hardware Xid reset the GPU (`nvidia-smi -r`) or reboot, "
           "and check power, seating and cooling; an application Xid (13, 31, 43, 45) names the process that caused it")
    return fail(message, fix) if hardware else warn(message, fix)
