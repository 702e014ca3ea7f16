"""rigctl's all_reduce probe (``rigctl preflight --deep``), run by ``rigctl.host.allreduce_launch`` as
``python3 -c THIS WORLD MIB ITERS``: in the recipe's image, or with a host Python that has torch.

With three arguments it is the launcher: one ``python3 -c THIS WORLD MIB ITERS RANK`` per GPU (a program
given by -c cannot be pickled into multiprocessing children), each rank's stderr in a file of its own and
relayed whole in rank order, a deadline for NCCL hangs and a grace period once one rank has ended. With a
fourth it is that rank: NCCL over the visible GPUs in order; rank r contributes r+1 everywhere, so every
element must come back as W(W+1)/2, and rank 0 prints one ``RIGCTL-ALLREDUCE {json}`` line.

Standard library and torch only: it runs in images rigctl knows nothing else about. Never imported.
"""
# ruff: noqa
# mypy: ignore-errors
SOURCE = None  # the launcher fills in this program's own text (``rigctl.host.allreduce_launch.program``)
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
    procs = [subprocess.Popen([sys.executable, "-c", SOURCE, *sys.argv[1:4], str(r)], env=env,
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
