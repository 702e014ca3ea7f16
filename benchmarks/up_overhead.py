"""What `rigctl up` and `rigctl swap` cost beyond podman and the engine: each against a bare `podman run` of
the same image, arguments, port and volume, timed to its first /health 200.

Runs on the testbed, either flavour (`. .testbed/env`, or `.ci/testbed.sh exec --podman 5 -- ...`), through
the real chain and the real CLI (`python -m rigctl`, as an operator runs it, verify included). Each trial
times, in turn:
  bare   `podman run -d --rm ...` spawned -> the engine's first /health 200 (polled every 5 ms)
  up     `rigctl up RECIPE --user` spawned -> exited 0; also when, after the engine's first 200, it exited
  swap   `rigctl swap A B --user` spawned (A serving) -> exited 0
and prints the medians side by side. Targets (issue #35): up <= bare + 1 s, swap <= bare + 1.5 s.

    uv run --frozen python benchmarks/up_overhead.py [--trials 5] [--warmup 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml

from rigctl.recipe.load import load
from rigctl.render.units import engine_process

UP_TARGET_S = 1.0
SWAP_TARGET_S = 1.5


def recipe_file(workdir: Path, name: str, port: int, warmup_s: float) -> Path:
    ckpt = workdir / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 1000)
    data = {
        "name": name, "description": "up overhead benchmark", "family": "test", "served_name": "test-model",
        "image": os.environ["RIGCTL_TEST_ENGINE_IMAGE"],
        "checkpoint": {"format": "safetensors", "source": "test/fake", "path": str(ckpt), "shards": 1,
                       "total_bytes": 1000, "license": {"id": "apache-2.0"}},
        "engine": {"kind": "vllm", "port": 8000}, "context_length": 4096, "gpus": {"count": 0},
        "container": {"publish": {"port": port}, "volumes": [{"host": str(ckpt), "container": "/models/test"}],
                      "env": {"FAKE_VLLM_NO_ACCESS_LOG": "1", "FAKE_VLLM_WARMUP_SECONDS": str(warmup_s)}},
        "service": {"warmup_budget_s": 90, "stall_budget_s": 30, "restart_sec": 1, "stop_timeout_s": 10},
    }
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Watcher(threading.Thread):
    """Polls /health every 5 ms and records when it first answered 200."""

    def __init__(self, port: int) -> None:
        super().__init__(daemon=True)
        self.url = f"http://127.0.0.1:{port}/health"
        self.ready_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=0.5, trust_env=False) as client:
            while not self.stop.is_set() and self.ready_at is None:
                try:
                    if client.get(self.url).status_code == 200:
                        self.ready_at = time.monotonic()
                except httpx.HTTPError:
                    pass
                time.sleep(0.005)


def podman(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["podman", *args], capture_output=True, text=True, timeout=120, check=False)


def rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    progress = ["--progress", "none"] if args[0] in ("up", "swap") else []
    done = subprocess.run([sys.executable, "-m", "rigctl", *args, "--user", *progress],
                          capture_output=True, text=True, timeout=180, check=False)
    if args[0] == "down" and done.returncode != 0:
        raise SystemExit(f"rigctl {' '.join(args)} exited {done.returncode}: {done.stderr[-800:]}")
    return done


def bare_argv(path: Path, name: str, port: int) -> list[str]:
    """The `podman run` of the container rigctl's unit runs, without quadlet and systemd: same image,
    entrypoint, arguments, environment, port and volume."""
    recipe = load(str(path)).recipe
    process = engine_process(recipe)
    argv = ["podman", "run", "-d", "--rm", "--name", name, "-p", f"127.0.0.1:{port}:{recipe.engine.port}"]
    for volume in recipe.container.volumes:
        argv += ["-v", f"{volume.host}:{volume.container}:ro"]
    for key, value in process.env:
        argv += ["-e", f"{key}={value}"]
    if process.entrypoint is not None:
        argv += [f"--entrypoint={process.entrypoint[0]}"]
    return [*argv, recipe.image, *(process.entrypoint or [])[1:], *process.args]


def bare(path: Path, port: int) -> float:
    name = "rigctl-bench-bare"
    podman("rm", "--force", "--ignore", "--time", "0", name)
    argv = bare_argv(path, name, port)
    watcher = Watcher(port)
    start = time.monotonic()
    watcher.start()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise SystemExit(f"bare podman run failed: {done.stderr.strip()}")
    watcher.join(timeout=60)
    podman("rm", "--force", "--time", "0", name)
    if watcher.ready_at is None:
        raise SystemExit("the bare container never answered 200")
    return watcher.ready_at - start


def timed_up(path: Path, port: int) -> tuple[float, float]:
    """(spawn -> exit, engine's first 200 -> exit) of `rigctl up`."""
    watcher = Watcher(port)
    watcher.start()
    start = time.monotonic()
    done = rigctl("up", str(path))
    end = time.monotonic()
    watcher.stop.set()
    if done.returncode != 0:
        raise SystemExit(f"rigctl up exited {done.returncode}: {done.stdout[-800:]} {done.stderr[-800:]}")
    return end - start, end - (watcher.ready_at or end)


def timed_swap(source: str, target: Path) -> float:
    start = time.monotonic()
    done = rigctl("swap", source, str(target))
    end = time.monotonic()
    if done.returncode != 0:
        raise SystemExit(f"rigctl swap exited {done.returncode}: {done.stdout[-800:]} {done.stderr[-800:]}")
    return end - start


def med(values: list[float]) -> str:
    return f"{statistics.median(values):6.2f} s"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--warmup", type=float, default=2.0, help="the test engine's warmup (s)")
    parser.add_argument("--no-swap", action="store_true")
    args = parser.parse_args()
    if "RIGCTL_TEST_ENGINE_IMAGE" not in os.environ:
        print("run `.ci/testbed.sh up` and `. .testbed/env` first", file=sys.stderr)
        return 2
    bares: list[float] = []
    ups: list[float] = []
    tails: list[float] = []
    swaps: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rigctl-bench-") as tmp:
        a = recipe_file(Path(tmp), "bench-up-a", 18311, args.warmup)
        b = recipe_file(Path(tmp), "bench-up-b", 18312, args.warmup)
        try:
            for i in range(args.trials):
                bares.append(bare(a, 18311))
                up_s, tail_s = timed_up(a, 18311)
                ups.append(up_s)
                tails.append(tail_s)
                line = (f"trial {i + 1}: bare {bares[-1]:.2f} s, up {up_s:.2f} s (+{up_s - bares[-1]:.2f}; "
                        f"{tail_s:.2f} s after the engine's first 200)")
                if not args.no_swap:
                    swaps.append(timed_swap("bench-up-a", b))
                    line += f", swap {swaps[-1]:.2f} s (+{swaps[-1] - bares[-1]:.2f})"
                    rigctl("down", "bench-up-b", "--remove")
                else:
                    rigctl("down", "bench-up-a")
                print(line, flush=True)
        finally:
            for name in ("bench-up-a", "bench-up-b"):
                subprocess.run([sys.executable, "-m", "rigctl", "down", name, "--remove", "--user"],
                               capture_output=True, timeout=120, check=False)
    load_avg = os.getloadavg()[0]
    print(f"\nmedians over {args.trials} trials (engine warmup {args.warmup:g} s, load {load_avg:.1f}):")
    print(f"  bare podman run -> 200   {med(bares)}")
    print(f"  rigctl up                {med(ups)}   (+{statistics.median(ups) - statistics.median(bares):.2f} s; "
          f"target <= +{UP_TARGET_S:g} s; exits {med(tails).strip()} after the engine's first 200)")
    if swaps:
        extra = statistics.median(swaps) - statistics.median(bares)
        print(f"  rigctl swap A -> B       {med(swaps)}   (+{extra:.2f} s beyond B's bare warmup; "
              f"target <= +{SWAP_TARGET_S:g} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
