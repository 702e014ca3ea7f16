"""GPU checks: pure functions of (recipe, facts, chosen layout).

Each check judges the chosen GPUs; when the automatic layout found no set, it also judges the GPUs left
out for its own reason (``Choice.left_out``), so the cause of a failed gpu-count fails under its own id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rigctl.host.facts import P2P_STATUS_NAMES, Gpu
from rigctl.preflight.finding import Context, Severity, Verdict, fail, ok, skip, warn
from rigctl.preflight.layout import (
    BUSY_BYTES,
    CHECK_COMPUTE_CAPABILITY,
    CHECK_DRIVER,
    CHECK_MEMORY,
    CHECK_MIG,
    CHECK_MODEL,
    LeftOut,
    is_busy,
)

if TYPE_CHECKING:
    from rigctl.preflight.links import PairLink

NO_NVML_FIX = (
    "install the NVIDIA driver and check `nvidia-smi` works on the host; inside a container, run rigctl on the "
    "host or pass the GPUs in; or plan from a captured inventory with --inventory FILE"
)


def _chosen(ctx: Context) -> list[Gpu]:
    by_index = {g.index: g for g in ctx.facts.gpu.devices}
    return [by_index[i] for i in ctx.choice.indices if i in by_index]


def _left_out(ctx: Context, check: str) -> list[LeftOut]:
    """The GPUs the automatic layout left out for this check's reason, when no layout fits: they are why."""
    if ctx.choice.ok or ctx.choice.explicit:
        return []
    return [x for x in ctx.choice.left_out if x.check == check]


def _early_answer(ctx: Context, check: str) -> tuple[Verdict | None, list[LeftOut]]:
    """``_no_gpu_facts``'s early answer, unless GPUs were left out for this check's reason (they are then
    judged here, though none was chosen), and those left-out GPUs."""
    gone = _left_out(ctx, check)
    early = _no_gpu_facts(ctx)
    return (early if early and not gone else None), gone


def _left_out_text(ctx: Context, gone: list[LeftOut]) -> str:
    """The left-out GPUs, those with one name and one reason together, and what that cost."""
    groups: dict[tuple[str, str], list[int]] = {}
    for x in gone:
        groups.setdefault((x.name, x.why), []).append(x.index)
    return ("; ".join(f"GPU {', '.join(map(str, indices))} ({name}): {why}" for (name, why), indices in groups.items())
            + f"; left out, so no layout of {ctx.choice.wanted} GPU(s) fits (see gpu-count)")


def _indices(gone: list[LeftOut]) -> str:
    return ",".join(str(x.index) for x in gone)


def _no_gpu_facts(ctx: Context) -> Verdict | None:
    """Common early answers: the recipe needs no GPU, or there are no GPU facts to judge."""
    if ctx.recipe.gpus.count == 0:
        return skip("the recipe needs no GPU")
    if not ctx.facts.gpu.available:
        return skip(f"no GPU facts: NVML is unavailable ({ctx.facts.gpu.error}); see gpu-driver")
    if not ctx.choice.gpus:
        return skip("no GPUs chosen; see gpu-count")
    return None


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".") if x.isdigit())


def check_driver(ctx: Context) -> Verdict:
    inv = ctx.facts.gpu
    want = ctx.recipe.gpus
    if not inv.available:
        if want.count == 0:
            return ok(f"the recipe needs no GPU (NVML unavailable here: {inv.error})")
        return fail(f"the recipe needs {want.count} GPU(s) but NVML is unavailable: {inv.error}", NO_NVML_FIX)
    cuda = f", CUDA {inv.cuda_version}" if inv.cuda_version else ""
    if inv.driver_version is None:
        return warn(f"NVML works but did not report the driver version{cuda}",
                    "check `nvidia-smi`; the driver minimum cannot be verified")
    have = f"driver {inv.driver_version}{cuda}"
    if want.min_driver and _version_tuple(inv.driver_version) < _version_tuple(want.min_driver):
        return fail(f"{have} is older than the recipe's minimum {want.min_driver}",
                    f"install NVIDIA driver >= {want.min_driver} (CUDA 13.0 needs >= 580.65.06, 12.9 >= 575.51.03, "
                    "12.8 >= 570.26), reboot, then regenerate the CDI spec")
    gone = _left_out(ctx, CHECK_DRIVER)
    if gone:
        return fail(f"{have}; " + _left_out_text(ctx, gone),
                    f"look for Xid errors in `dmesg`; reset the GPU (`nvidia-smi -r -i {_indices(gone)}`) or reboot")
    return ok(have + (f" (>= {want.min_driver})" if want.min_driver else ""))


def check_count(ctx: Context) -> Verdict:
    want = ctx.recipe.gpus.count
    inv = ctx.facts.gpu
    if want == 0:
        return ok("the recipe needs no GPU")
    if not inv.available:
        return fail(f"the recipe needs {want} GPU(s); none visible (NVML unavailable: {inv.error})", NO_NVML_FIX)
    choice = ctx.choice
    if choice.ok:
        how = "selected explicitly" if choice.explicit else "chosen"
        names = ", ".join(f"{g.index}:{g.name}" for g in choice.gpus)
        return ok(f"{want} GPU(s) {how} of {len(inv.devices)}: {names}")
    detail = "; ".join(choice.problems + [r for r in choice.reasons if "left out" in r])
    fix = ("pick GPUs with --gpus INDEX,... (or UUIDs), change recipe gpus.select, or run on a host with "
           f"{want} matching GPU(s)")
    return fail(detail or f"need {want} GPU(s)", fix)


def check_model(ctx: Context) -> Verdict:
    early, gone = _early_answer(ctx, CHECK_MODEL)
    if early:
        return early
    chosen = _chosen(ctx)
    want = ctx.recipe.gpus
    fix = ("choose other GPUs with --gpus, or add the product to gpus.products only if it is truly the "
           "same card (an RTX 6000D is NOT an RTX PRO 6000)")
    bad = [f"GPU {g.index} {g.name} ({g.pci_device_hex or 'device id unknown'}): product not accepted"
           for g in chosen if want.products and g.name not in want.products]
    if bad:
        return fail("; ".join(bad) + f"; the recipe accepts: {', '.join(want.products)}", fix)
    if gone:
        by_index = {g.index: g for g in ctx.facts.gpu.devices}
        pci = {x.index: by_index[x.index].pci_device_hex for x in gone if x.index in by_index}
        named = [x.model_copy(update={"name": f"{x.name} [{pci.get(x.index) or 'device id unknown'}]"}) for x in gone]
        mixed = any("allow_mixed" in x.why for x in gone)
        return fail(_left_out_text(ctx, named),
                    fix + ("; or set gpus.allow_mixed: true if the mix is validated" if mixed else ""))
    names = sorted({g.name for g in chosen})
    if len(names) > 1 and not want.allow_mixed:
        return fail(f"mixed products {names} but the recipe does not allow a mix",
                    "select GPUs of one product with --gpus, or set gpus.allow_mixed: true if the mix is validated")
    ids = ", ".join(sorted({f"{g.name} [{g.pci_device_hex}]" for g in chosen}))
    return ok(("mixed pair (allowed): " if len(names) > 1 else "") + ids)


def check_memory(ctx: Context) -> Verdict:
    early, gone = _early_answer(ctx, CHECK_MEMORY)
    if early:
        return early
    need = ctx.recipe.gpus.min_memory_mib
    rows = []
    short = []
    for g in _chosen(ctx):
        mib = g.memory_total_mib
        rows.append(f"GPU {g.index}: {'?' if mib is None else f'{mib:,}'} MiB")
        if need and (mib is None or mib < need):
            short.append(f"GPU {g.index} has {'unknown' if mib is None else f'{mib:,}'} MiB")
    if short or gone:
        return fail("; ".join([*short, *([_left_out_text(ctx, gone)] if gone else [])])
                    + f" (the recipe needs {need:,} MiB per GPU)",
                    "use GPUs with more memory (--gpus), or a smaller checkpoint/context")
    return ok(", ".join(rows) + (f" (>= {need:,} MiB)" if need else ""))


def check_compute_capability(ctx: Context) -> Verdict:
    early, gone = _early_answer(ctx, CHECK_COMPUTE_CAPABILITY)
    if early:
        return early
    allowed = ctx.recipe.gpus.compute_capability
    ccs = {g.index: g.compute_capability for g in _chosen(ctx)}
    bad = {i: cc for i, cc in ccs.items() if allowed and cc not in allowed}
    if bad or gone:
        listing = "; ".join([*(f"GPU {i}: {cc or 'unknown'}" for i, cc in bad.items()),
                             *([_left_out_text(ctx, gone)] if gone else [])])
        return fail(f"{listing}; the recipe's kernels are built for {', '.join(allowed)}",
                    "use GPUs of a supported compute capability, or a recipe/image built for this one")
    return ok(", ".join(f"GPU {i}: sm_{(cc or '?').replace('.', '')}" for i, cc in ccs.items()))


def check_busy(ctx: Context) -> Verdict:
    early = _no_gpu_facts(ctx)
    if early:
        return early
    busy = []
    for g in _chosen(ctx):
        if not is_busy(g):
            continue
        procs = ", ".join(
            f"PID {p.pid} {p.name or '(name not visible)'}"
            + (f" {p.used_memory_bytes // (1024 * 1024):,} MiB" if p.used_memory_bytes else "")
            for p in g.processes
        )
        used = g.memory_used_mib
        busy.append(f"GPU {g.index}: {used if used is not None else '?':,} MiB in use"
                    + (f" by {procs}" if procs else " (no process visible: another container or PID namespace?)"))
    if busy:
        pids = sorted({p.pid for g in _chosen(ctx) for p in g.processes})
        fix = (f"stop them (e.g. `kill {' '.join(map(str, pids))}` or stop the serving unit that owns them), "
               "or pick idle GPUs with --gpus")
        if not pids:
            fix = "find the owner with `nvidia-smi` on the host, stop it, or pick idle GPUs with --gpus"
        return fail("; ".join(busy) + "; an engine sized by gpu-memory-utilization will not fit beside them", fix)
    return ok(f"chosen GPUs are idle (< {BUSY_BYTES // (1024 * 1024)} MiB used, no processes)")


def check_mig(ctx: Context) -> Verdict:
    early, gone = _early_answer(ctx, CHECK_MIG)
    if early:
        return early
    chosen = _chosen(ctx)
    on = [g.index for g in chosen if g.mig_enabled]
    pending = [g.index for g in chosen if not g.mig_enabled and g.mig_pending]
    if on or gone:
        every = sorted({*on, *(x.index for x in gone)})
        return fail("; ".join([*([f"MIG mode is on for GPU {', '.join(map(str, on))}"] if on else []),
                               *([_left_out_text(ctx, gone)] if gone else [])]) + "; the engine needs whole GPUs",
                    f"`nvidia-smi -i {','.join(map(str, every))} -mig 0` (then reset the GPU or reboot)")
    if pending:
        return warn(f"MIG mode will turn on at the next reset for GPU {', '.join(map(str, pending))}",
                    f"`nvidia-smi -i {','.join(map(str, pending))} -mig 0` before the next reset")
    unknown = [g.index for g in chosen if g.mig_enabled is None]
    if unknown:
        return ok(f"MIG not supported on GPU {', '.join(map(str, unknown))} (whole GPUs)")
    return ok("MIG off")


def _link_figures(link: PairLink) -> dict[str, Any]:
    return {"a": link.a, "b": link.b, "link": link.kind, "name": link.name, "p2p": link.p2p,
            "gbps_each_way": None if link.ceiling_gbps is None else round(link.ceiling_gbps, 1)}


def check_p2p(ctx: Context) -> Verdict:
    """Name the link between each chosen pair (NVLink with its links, or PCIe with its common ancestor and
    speed) and warn where the driver says P2P will not work or the pair crosses CPU sockets."""
    from rigctl.preflight.links import describe_pair  # noqa: PLC0415 - only multi-GPU layouts need it

    early = _no_gpu_facts(ctx)
    if early:
        return early
    chosen = _chosen(ctx)
    if len(chosen) < 2:
        return skip("one GPU: no peer-to-peer traffic")
    bad = []
    rows = []
    far = []
    detour = []
    links = []
    for i, a in enumerate(chosen):
        for b in chosen[i + 1 :]:
            pair = ctx.facts.gpu.pair(a.index, b.index)
            if pair is None:
                bad.append(f"GPU {a.index}<->{b.index}: not probed")
                continue
            link = describe_pair(ctx.facts.gpu, pair)
            links.append(link)
            rows.append(link.text)
            if pair.p2p_ok is not True:
                bad.append(f"GPU {a.index}<->{b.index}: P2P read {pair.p2p_text} ({link.name})")
            elif link.kind != "nvlink" and pair.p2p_nvlink not in (None, 0):
                detour.append(f"GPU {a.index}<->{b.index}: NVLinks are up but NVLink P2P between them is "
                              f"{P2P_STATUS_NAMES.get(pair.p2p_nvlink, pair.p2p_nvlink)}; traffic takes PCIe")
            if link.kind != "nvlink" and pair.topology is not None and pair.topology >= 50:
                far.append(f"GPU {a.index}<->{b.index}")
    figures = {"pairs": [_link_figures(x) for x in links]}
    tail = " Note: P2P OK from the driver is not enough: NCCL can still hang on the first all_reduce under " \
           "IOMMU/ACS; `rigctl preflight RECIPE --deep` runs a real one."
    if bad:
        return Verdict(Severity.WARN, "; ".join(bad) + "; NCCL falls back to copies through host memory (slower "
                       "all-reduce)",
                       "check BIOS ACS/IOMMU settings (iommu=pt, ACS off), `nvidia-smi topo -p2p r` and, for "
                       "NVLink, `nvidia-smi nvlink -s`; if NCCL hangs, set NCCL_P2P_DISABLE=1 and "
                       "--disable-custom-all-reduce", figures)
    if detour:
        return Verdict(Severity.WARN, "; ".join(detour),
                       "check `nvidia-smi topo -m` and `nvidia-smi nvlink -s`: the NVLink bridge may join other GPUs "
                       "than these (choose a linked pair with --gpus), or the links are not trained", figures)
    if far:
        return Verdict(Severity.WARN, "; ".join(rows) + f"; {', '.join(far)} cross NUMA nodes",
                       "prefer GPUs under one CPU socket", figures)
    return Verdict(Severity.OK, "; ".join(rows) + "." + tail, None, figures)


def _watts(mw: int | None) -> str:
    return "?" if mw is None else f"{mw / 1000:g} W"


def check_power(ctx: Context) -> Verdict:
    early = _no_gpu_facts(ctx)
    if early:
        return early
    chosen = _chosen(ctx)
    rows = [f"GPU {g.index} {g.name}: limit {_watts(g.power.current_mw)} (default {_watts(g.power.default_mw)}, "
            f"max {_watts(g.power.max_mw)})" for g in chosen]
    limits = {g.power.current_mw for g in chosen if g.power.current_mw is not None}
    capped = [g for g in chosen if g.power.current_mw is not None and g.power.default_mw is not None
              and g.power.current_mw < g.power.default_mw]
    if len(limits) > 1:
        slow = min(chosen, key=lambda g: g.power.current_mw or 0)
        return warn("different power limits: " + "; ".join(rows)
                    + f"; the slower card (GPU {slow.index}, {_watts(slow.power.current_mw)}) paces the pair",
                    "expected for a Max-Q + Workstation pair; to match them, cap the faster card with "
                    "`nvidia-smi -i N -pl WATTS` (or accept the slower pace)")
    if capped:
        return warn("power capped below default: " + "; ".join(rows),
                    "restore with `nvidia-smi -i N -pl DEFAULT_WATTS` if the cap is not intended")
    return ok("; ".join(rows) if rows else "no power facts")

