"""Run on a GPU box: does `status`'s GPU memory per service see memory held by an engine's workers?

A parent process that never touches CUDA starts a worker that allocates ``--gib`` GiB on GPU 0 with torch
(as vLLM's API server leaves the GPUs to its EngineCore and workers). Then rigctl's NVML adapter is asked
what the parent alone holds and what its whole process tree holds, and NVML's own per-process list is
printed beside it. One JSON object on stdout.

    PYTHONPATH=src python3 tools/gpu_memory_probe.py --gib 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

WORKER = """
import sys, time, torch
block = torch.empty(int(float(sys.argv[1]) * 2**30), dtype=torch.uint8, device="cuda:0")
torch.cuda.synchronize()
print("allocated", flush=True)
time.sleep(120)
"""

PARENT = """
import subprocess, sys, time
worker = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]], stdout=subprocess.PIPE, text=True)
print(worker.pid, worker.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=4.0)
    args = parser.parse_args()

    import pynvml  # noqa: PLC0415 - a GPU-box tool

    from rigctl.adapters.gpu_memory import NvmlGpuMemory  # noqa: PLC0415 - PYTHONPATH=src
    from rigctl.host.procfs import process_tree  # noqa: PLC0415

    parent = subprocess.Popen([sys.executable, "-c", PARENT, WORKER, str(args.gib)], stdout=subprocess.PIPE,
                              text=True)
    worker_pid = "0"
    try:
        assert parent.stdout is not None
        worker_pid, state = parent.stdout.readline().split()
        time.sleep(1.0)  # let NVML's process list catch up
        gpu = NvmlGpuMemory()
        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        listed = [{"pid": p.pid, "used_mib": (p.usedGpuMemory or 0) // 2**20}
                  for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)]
        tree = process_tree(parent.pid)
        report = {
            "gpu0": pynvml.nvmlDeviceGetName(handle),
            "driver": pynvml.nvmlSystemGetDriverVersion(),
            "worker_state": state,
            "parent_pid": parent.pid,
            "worker_pid": int(worker_pid),
            "tree": sorted(tree),
            "nvml_compute_processes": listed,
            "used_by_parent_only_mib": gpu.used_by({parent.pid}),
            "used_by_tree_mib": gpu.used_by(tree),
            "allocated_gib": args.gib,
        }
    finally:
        for pid in (int(worker_pid), parent.pid):
            if pid:
                subprocess.run(["kill", "-9", str(pid)], check=False)
        parent.wait(timeout=30)
    print(json.dumps(report, indent=2))
    return 0 if report["used_by_tree_mib"] and report["used_by_tree_mib"] >= args.gib * 1024 else 1


if __name__ == "__main__":
    raise SystemExit(main())
