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
import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rigctl.host.facts import HostFacts
from rigctl.preflight.finding import Severity, Verdict, fail, skip
from rigctl.preflight.layout import Choice
from rigctl.preflight.links import PairLink, chosen_links, slowest
from rigctl.recipe.model import Recipe
from rigctl.util.proc import Completed, run

TIMEOUT_S = 150.0  # NCCL init plus a few all_reduces takes seconds; a hang never ends
OUTER_SLACK_S = 45.0  # the program kills its own ranks at TIMEOUT_S; this bounds the launcher itself
RESULT_TAG = "RIGCTL-ALLREDUCE "

# Runs as `python3 -c PROGRAM WORLD MIB ITERS`: the launcher starts one `python3 -c PROGRAM ... RANK` per GPU
# (a program given by -c cannot be pickled into multiprocessing children), NCCL over the visible GPUs in
# order. Rank r contributes r+1 everywhere, so every element must come back as W(W+1)/2.
PROGRAM = r'''
import json, os, subprocess, sys, tempfile, time
world, mib, iters = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
TAG = "RIGCTL-ALLREDUCE "
if len(sys.argv) == 4:
    def scratch():
        try:
            return tempfile.TemporaryFile()
        except OSError:  # no writable temporary directory (a read-only image): the ranks' own streams
            return None
    def relay(errs):
        # each rank's own stderr, whole lines, in rank order: ranks failing together must not interleave
        for r, f in enumerate(errs):
            if f is None:
                continue
            size = f.seek(0, 2)
            f.seek(max(0, size - 16384))
            text = f.read().decode("utf-8", "replace")
            if size > 16384 and "\n" in text:
                text = text.partition("\n")[2]
            if text.strip():
                sys.stderr.write(f"[rank {r}]\n{text.strip()}\n")
        sys.stderr.flush()
    def stop(procs):
        for p in procs:
            if p.poll() is None:
                p.kill()  # ranks stuck in NCCL must not keep holding the GPUs
        end = time.monotonic() + 10
        for p in procs:
            try:
                p.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass  # stuck in the driver: say what the others said, and go
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("RIGCTL_PORT", "29533"))
    errs = [scratch() for _ in range(world)]
    out = scratch()
    # rank 0's result line is read from a file once it is done (NCCL_DEBUG=INFO can write more to stdout
    # than a pipe holds); without one it writes to ours, and its line is the result as it stands
    procs = [subprocess.Popen([sys.executable, "-c", __PROGRAM__, *sys.argv[1:4], str(r)], env=env,
                              stdout=out if r == 0 else None, stderr=errs[r])
             for r in range(world)]
    deadline = time.monotonic() + float(os.environ.get("RIGCTL_TIMEOUT", "150"))
    grace = float(os.environ.get("RIGCTL_GRACE", "15"))
    failed_at = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.poll() is not None for p in procs):
            failed_at = now  # one is done or dead, the others wait in NCCL: a moment to say so, then stop
        if now > deadline or (failed_at is not None and now > failed_at + grace):
            break
        time.sleep(0.05)
    codes = [p.poll() for p in procs]
    if None in codes:
        stop(procs)
        relay(errs)
        if failed_at is None:
            print(TAG + json.dumps({"ok": False, "hang": True}), flush=True)
            sys.exit(3)
        print(TAG + json.dumps({"ok": False, "error": f"rank exit codes {codes} (None: still waiting, stopped)"}),
              flush=True)
        sys.exit(1)
    relay(errs)
    line = ""
    if out is not None:
        out.seek(0)
        line = next((l for l in out.read().decode("utf-8", "replace").splitlines() if l.startswith(TAG)), "")
    if any(codes) or (out is not None and not line):
        print(TAG + json.dumps({"ok": False, "error": f"rank exit codes {codes}"}), flush=True)
        sys.exit(1)
    if line:
        print(line, flush=True)
    sys.exit(0)
rank = int(sys.argv[4])
import torch, torch.distributed as dist
torch.cuda.set_device(rank)
dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
n = mib * 1024 * 1024 // 4
x = torch.full((n,), float(rank + 1), device="cuda", dtype=torch.float32)
dist.all_reduce(x)
torch.cuda.synchronize()
want = world * (world + 1) / 2
bad = int((x != want).sum().item())
got = float(x[0].item())
dist.barrier()
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(x)
torch.cuda.synchronize()
dt = (time.perf_counter() - t0) / iters
if rank == 0:
    algbw = n * 4 / dt / 1e9
    print(TAG + json.dumps({"ok": bad == 0, "world": world, "bytes": n * 4, "expected": want, "got": got,
                            "bad_elements": bad, "seconds": dt, "algbw_gbps": algbw,
                            "busbw_gbps": algbw * (2 * (world - 1) / world if world > 1 else 1),
                            "torch": torch.__version__, "nccl": ".".join(map(str, torch.cuda.nccl.version()))}),
          flush=True)
dist.destroy_process_group()
'''
PROGRAM = PROGRAM.replace("__PROGRAM__", repr(PROGRAM))

HANG_FIX = (
    "NCCL hung: P2P through the PCIe root is blocked (typically IOMMU/ACS). Workaround: set NCCL_P2P_DISABLE=1 "
    "in container.env and add --disable-custom-all-reduce to engine.args (slower all-reduce, but it runs). "
    "Fix: boot with iommu=pt (amd_iommu=pt / intel_iommu=pt) or turn ACS off in the BIOS, then run --deep again"
)


@dataclass(frozen=True)
class Plan:
    """How the all_reduce will be launched: the command, its environment, and where it runs."""

    where: str  # "image" or "host"
    argv: list[str]
    env: dict[str, str]


def podman_plan(recipe: Recipe, choice: Choice, *, mib: int = 256, iters: int = 20) -> Plan:
    """Inside the recipe's image, the chosen GPUs passed by CDI UUID, IPC as the unit will have it."""
    argv = ["podman", "run", "--rm", "--network=none", "--pull=never", "--entrypoint", "python3"]
    for gpu in choice.gpus:
        argv += ["--device", f"nvidia.com/gpu={gpu.uuid}"]
    if recipe.container.ipc == "host":
        argv.append("--ipc=host")
    else:
        argv.append(f"--shm-size={recipe.container.shm_size or '8g'}")
    env = {"NCCL_DEBUG": "WARN", "RIGCTL_TIMEOUT": f"{TIMEOUT_S:g}"}
    for key in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL"):
        value = recipe.container.env.get(key) or recipe.engine.env.get(key)
        if value is not None:
            env[key] = value  # test what the engine will run with
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    argv += [recipe.image, "-c", PROGRAM, str(len(choice.gpus)), str(mib), str(iters)]
    return Plan("image", argv, {})


def host_plan(recipe: Recipe, choice: Choice, python: str = "python3", *, mib: int = 256,
              iters: int = 20) -> Plan:
    """With a host Python that has torch; the chosen GPUs by UUID, in PCI bus order like the unit."""
    env = {"CUDA_VISIBLE_DEVICES": ",".join(g.uuid for g in choice.gpus), "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
           "NCCL_DEBUG": "WARN", "RIGCTL_TIMEOUT": f"{TIMEOUT_S:g}"}
    for key in ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_P2P_LEVEL"):
        value = recipe.container.env.get(key) or recipe.engine.env.get(key)
        if value is not None:
            env[key] = value
    return Plan("host", [python, "-c", PROGRAM, str(len(choice.gpus)), str(mib), str(iters)], env)


def nccl_env(plan: Plan, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The NCCL_* settings the all_reduce ran with: inside the image only what the plan passed with --env;
    on the host the caller's environment (``environ``) under the plan's own."""
    if plan.where == "image":
        pairs = [plan.argv[i + 1] for i, a in enumerate(plan.argv[:-1]) if a == "--env"]
        return {k: v for k, _, v in (p.partition("=") for p in pairs) if k.startswith("NCCL_")}
    return {k: v for k, v in {**(environ or {}), **plan.env}.items() if k.startswith("NCCL_")}


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


def classify(done: Completed, plan: Plan, timeout_s: float = TIMEOUT_S, *, links: Sequence[PairLink] = (),
             env: Mapping[str, str] | None = None) -> Verdict:
    """The program's outcome; with ``links`` (the chosen pairs) the bandwidth is judged too. ``env``: the
    NCCL settings it ran with (``nccl_env``), by default the plan's own."""
    where = "inside the recipe's image" if plan.where == "image" else "with the host's torch"
    tail = why_failed(done.stderr or done.stdout)
    hung = any(line.startswith(RESULT_TAG) and '"hang": true' in line for line in done.stdout.splitlines())
    if done.rc == 124 or hung:
        return fail(f"all_reduce over {len(plan_gpus(plan))} GPU(s) {where} did not finish in {timeout_s:g} s: "
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
    return judge(head, float(result["busbw_gbps"]), links, env=nccl_env(plan) if env is None else env,
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


def plan_gpus(plan: Plan) -> list[str]:
    """The GPUs a plan targets (for messages)."""
    if plan.where == "host":
        return plan.env.get("CUDA_VISIBLE_DEVICES", "").split(",")
    return [a.split("=", 1)[1] for a in plan.argv if a.startswith("nvidia.com/gpu=")]


def describe(plan: Plan) -> str:
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in plan.env.items())
    shown = [a if a != PROGRAM else "<program>" for a in plan.argv]
    return (env + " " if env else "") + shlex.join(shown)


def _host_python_with_torch(candidates: Sequence[str] = ("python3",)) -> str | None:
    for python in candidates:
        if run([python, "-c", "import torch, torch.distributed"], timeout=60).ok:
            return python
    return None


def deep_allreduce(recipe: Recipe, facts: HostFacts, choice: Choice) -> dict[str, Verdict]:
    """Choose where to run (image via podman when the image and a CDI spec are here, else host torch)."""
    if len(choice.gpus) < 2:
        return {"gpu-allreduce": skip(f"{len(choice.gpus)} GPU chosen: no all_reduce between GPUs to test")}
    if not facts.gpu.available:
        return {"gpu-allreduce": skip("no GPUs visible")}
    digest = recipe.image_digest
    image_here = any(i.digest == digest or any(r.endswith("@" + digest) for r in i.repo_digests)
                     for i in facts.podman.images)
    cdi_here = any(s.kind == "nvidia.com/gpu" for s in facts.cdi.specs)
    if facts.podman.installed and image_here and cdi_here:
        plan = podman_plan(recipe, choice)
    else:
        python = _host_python_with_torch()
        if python is None:
            return {"gpu-allreduce": skip(
                "cannot run the all_reduce: the recipe's image or a CDI spec is missing here, and no host python3 "
                "has torch (pull the image and generate the CDI spec, then run --deep again)")}
        plan = host_plan(recipe, choice, python)
    environ = {**os.environ, **plan.env}
    done = run(plan.argv, timeout=TIMEOUT_S + OUTER_SLACK_S, env=environ)
    links = chosen_links(facts.gpu, choice.indices)
    return {"gpu-allreduce": classify(done, plan, links=links, env=nccl_env(plan, os.environ))}
