"""Deep check ``gpu-allreduce`` (opt-in, ``rigctl preflight RECIPE --deep``).

``nvidia-smi topo -p2p r`` can say OK while NCCL hangs on the first all_reduce (IOMMU/ACS on two
RTX PRO 6000s; NVIDIA/nccl#1999). A TP2 engine then hangs in warmup for its whole budget. This check
runs a real all_reduce, one rank per chosen GPU, under a timeout: inside the recipe's own image with the
chosen GPUs passed by CDI (what the engine will see), or with a host Python that has torch. The
outcome is classified: ok, wrong result, hang, or error; and a finished all_reduce is judged against what
the link allows (``rigctl.preflight.links``): a pair whose P2P is silently off still runs, at a tenth of
its bandwidth on NVLink, and that is a warning naming the likely cause.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rigctl.host.allreduce_launch import RESULT_TAG, TIMEOUT_S, Launch, launch_gpus, nccl_env
from rigctl.preflight.finding import Severity, Verdict, fail
from rigctl.preflight.links import PairLink, slowest

if TYPE_CHECKING:
    from rigctl.util.proc import Completed

HANG_FIX = (
    "NCCL hung: P2P through the PCIe root is blocked (typically IOMMU/ACS). Workaround: set NCCL_P2P_DISABLE=1 "
    "in container.env and add --disable-custom-all-reduce to engine.args (slower all-reduce, but it runs). "
    "Fix: boot with iommu=pt (amd_iommu=pt / intel_iommu=pt) or turn ACS off in the BIOS, then run --deep again"
)


_RANK = re.compile(r"^\[rank (\d+)\]$", re.MULTILINE)
# the line a traceback ends with ("torch.distributed.DistBackendError: ..."); torch follows an NCCL error
# with NCCL's own result name ("ncclSystemError: ...") and "Last error:", which are details of it
_RAISED = re.compile(r"^(?!nccl)[A-Za-z_][\w.]*(?:Error|Exception): \S.*$")
_DETAIL_ENDS = ("[W", "[E", "Exception raised from", "frame #", "Traceback", "File ")
ERROR_CLIP = 400


def why_failed(stderr: str) -> str:
    """What the ranks said when they failed: for each rank (the launcher relays each one's stderr under
    ``[rank N]``) the exception it ended with, and NCCL's own "Last error:" line after it; the last lines
    as they are where no exception is named (podman's own errors, a killed rank). Rank 0 first: a rank
    that could not reach another says so, the cause is usually in the one it waited for."""
    parts = _RANK.split(stderr.strip())
    sections = [("", parts[0]), *zip(parts[1::2], parts[2::2], strict=True)]  # before the first rank: podman's
    said = []
    for rank, text in sections:
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        raised = [i for i, line in enumerate(lines) if _RAISED.match(line)]
        if raised:
            i = raised[-1]
            what = _cut(lines[i])
            details = []
            for line in lines[i + 1:i + 12]:
                if line.startswith(_DETAIL_ENDS):
                    break
                details.append(line)
            if "Last error:" in details[:-1]:
                what += f"; NCCL's last error: {_cut(details[details.index('Last error:') + 1])}"
        else:
            what = _cut(" / ".join(lines[-3:]))
        if what:
            said.append(f"rank {rank}: {what}" if rank else what)
    return " | ".join(said)


def _cut(line: str) -> str:
    return line if len(line) <= ERROR_CLIP else f"{line[:ERROR_CLIP]}... ({len(line):,} characters)"


def classify(done: Completed, launch: Launch, timeout_s: float = TIMEOUT_S, *, links: Sequence[PairLink] = (),
             env: Mapping[str, str] | None = None) -> Verdict:
    """The program's outcome; with ``links`` (the chosen pairs) the bandwidth is judged too. ``env``: the
    NCCL settings it ran with (``nccl_env``), by default the launch's own."""
    where = "inside the recipe's image" if launch.where == "image" else "with the host's torch"
    tail = why_failed(done.stderr or done.stdout)
    hung = any(line.startswith(RESULT_TAG) and '"hang": true' in line for line in done.stdout.splitlines())
    if done.rc == 124 or hung:
        return fail(f"all_reduce over {len(launch_gpus(launch))} GPU(s) {where} did not finish in {timeout_s:g} s: "
                    f"NCCL hang{f' ({tail})' if tail else ''}", HANG_FIX)
    result = None
    for line in done.stdout.splitlines():
        if line.startswith(RESULT_TAG):
            try:
                result = json.loads(line[len(RESULT_TAG):])
            except ValueError:
                result = None
    if result is None or "error" in result:
        why = (result or {}).get("error") or f"exit {done.rc}"
        return Verdict(Severity.ERROR, f"all_reduce {where} could not run ({why}): {tail or 'no output'}",
                       "read the NCCL/CUDA error above; run again with NCCL_DEBUG=INFO")
    if not result.get("ok"):
        return fail(f"all_reduce {where} returned WRONG RESULTS: {result.get('bad_elements')} element(s) differ, "
                    f"got {result.get('got')} where {result.get('expected')} was expected",
                    "data is corrupted between GPUs: set NCCL_P2P_DISABLE=1 and --disable-custom-all-reduce, "
                    "and check IOMMU/ACS (iommu=pt, ACS off)")
    built = ", ".join(f"{k} {result[k.lower()]}" for k in ("torch", "NCCL") if result.get(k.lower()))
    head = f"all_reduce of {result['bytes'] // 2**20} MiB over {result['world']} GPU(s) {where}"
    figures: dict[str, Any] = {"bytes": result["bytes"], "world": result["world"],
                               "busbw_gbps": round(float(result["busbw_gbps"]), 1)}
    return judge(head, float(result["busbw_gbps"]), links, env=nccl_env(launch) if env is None else env,
                 figures=figures, built=f" ({built})" if built else "")


def judge(head: str, busbw: float, links: Sequence[PairLink], *, env: Mapping[str, str], figures: dict[str, Any],
          built: str = "") -> Verdict:
    """Measured bus bandwidth against what the slowest chosen link allows, side by side."""
    bound = slowest(links)
    if bound is None or not bound.ceiling_gbps:
        unknown = next((x for x in links if x.ceiling_gbps is None), None)
        why = ("no link facts for the chosen GPUs" if unknown is None
               else f"what GPU {unknown.a}<->{unknown.b} ({unknown.name}) carries is not known")
        figures["expected_gbps"] = None
        return Verdict(Severity.OK, f"{head}: bus bandwidth {busbw:.1f} GB/s{built}; not judged: {why}", None,
                       figures)
    expected = bound.ceiling_gbps
    floor = expected * bound.healthy_share
    figures.update({"expected_gbps": round(expected, 1), "healthy_from_gbps": round(floor, 1),
                    "share": round(busbw / expected, 3), "link": bound.kind, "link_name": bound.name,
                    "link_basis": bound.basis, "pair": [bound.a, bound.b]})
    side = (f"bus bandwidth {busbw:.1f} GB/s measured, {expected:.1f} GB/s expected from the link (GPU {bound.a}"
            f"<->{bound.b}: {bound.name}, {bound.basis}), {busbw / expected:.0%} of it")
    if busbw >= floor:
        return Verdict(Severity.OK, f"{head}: {side}; healthy from {bound.healthy_share:.0%} ({floor:.0f} GB/s)"
                       f"{built}", None, figures)
    cause, fix = likely_cause(bound, links, env)
    figures["likely_cause"] = cause
    return Verdict(Severity.WARN, f"{head}: {side}, far below the {bound.healthy_share:.0%} ({floor:.0f} GB/s) a "
                   f"healthy link reaches; likely cause: {cause}{built}", fix, figures)


_P2P_OFF_HINT = ("run --deep again with NCCL_DEBUG=INFO: 'via P2P' (or NVLS) is the direct path, 'via SHM' means "
                 "NCCL copies through host memory")


def likely_cause(bound: PairLink, links: Sequence[PairLink], env: Mapping[str, str]) -> tuple[str, str]:
    """The most likely reason an all_reduce runs far below its link, and what to do, most certain first."""
    over = "NVLink" if bound.kind == "nvlink" else "PCIe P2P"
    disabled = env.get("NCCL_P2P_DISABLE", "").strip()
    if disabled not in ("", "0"):
        return (f"NCCL_P2P_DISABLE={disabled} is set, so NCCL copies through host memory instead of going over "
                f"{over}",
                "remove NCCL_P2P_DISABLE (from container.env, engine.env or this shell) and "
                "--disable-custom-all-reduce from engine.args, unless they work around an all_reduce hang on this "
                "box; then run --deep again")
    level = env.get("NCCL_P2P_LEVEL", "").strip()
    if level:
        return (f"NCCL_P2P_LEVEL={level} keeps NCCL from using P2P across this path",
                "remove NCCL_P2P_LEVEL (from container.env, engine.env or this shell), then run --deep again")
    refused = [x for x in links if x.p2p_ok is False]
    if refused:
        x = refused[0]
        return (f"the driver reports P2P {x.p2p} between GPU {x.a} and {x.b}, so NCCL goes through host memory",
                "P2P is blocked by the platform or not supported by these GPUs: boot with iommu=pt (amd_iommu=pt / "
                "intel_iommu=pt) and turn ACS off in the BIOS, check `nvidia-smi topo -p2p r`; "
                "GeForce cards may have no P2P at all")
    if bound.kind == "nvlink" and bound.notes:
        return ("; ".join(bound.notes), "check `nvidia-smi nvlink -s` and `nvidia-smi nvlink -e`; reseat the "
                "NVLink bridge or, on an NVSwitch system, check that nvidia-fabricmanager runs")
    slow = [s for x in links for s in x.slow_lanes]
    if bound.kind == "pcie" and slow:
        return (f"{'; '.join(slow)}: a card on a narrow or gen-down link",
                "confirm under load with `nvidia-smi -q -d PCIE`; move the card to a full x16 slot, reseat it "
                "or its riser, and check the BIOS PCIe speed setting")
    if bound.kind == "nvlink":
        return ("P2P is silently off: NCCL did not use the NVLinks (IOMMU/ACS, a container that cannot map "
                "the other GPU's memory, or NCCL picked another transport)",
                f"{_P2P_OFF_HINT}; boot with iommu=pt and ACS off; check `nvidia-smi topo -p2p n`")
    return ("P2P is silently off or detoured: IOMMU/ACS sends GPU-to-GPU traffic through the CPU root "
            "complex, or the GPUs do not support P2P",
            f"{_P2P_OFF_HINT}; boot with iommu=pt (amd_iommu=pt / intel_iommu=pt) and turn ACS off in the BIOS")
