"""How fast `rigctl up` notices that the engine turned ready, and that it died during warmup.

Runs on the testbed (`.ci/testbed.sh up`; `. .testbed/env`), through the real chain: quadlet unit,
systemd --user, podman, the test engine in its image. The engine's own moment is observed from the host
by a 5 ms poller of its /health (first 200 = ready; first refused/reset connection during warmup = dead),
and compared with the moment deploy's wait loop noticed it. Targets: ready <= 0.3 s, death <= 1 s.

    uv run python benchmarks/deploy_latency.py [--trials 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml

from rigctl.adapters import real_adapters
from rigctl.adapters.systemd import SystemctlCli
from rigctl.deploy.up import UpOptions, plan_here, up
from rigctl.places import Dirs, Scope, install_dir, state_dir
from rigctl.recipe.load import load


def recipe_file(workdir: Path, name: str, port: int, env: dict[str, str]) -> Path:
    ckpt = workdir / "ckpt"
    ckpt.mkdir(exist_ok=True)
    (ckpt / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 10)
    data = {
        "name": name, "description": "latency benchmark", "family": "test", "served_name": "bench",
        "image": os.environ["RIGCTL_TEST_ENGINE_IMAGE"],
        "checkpoint": {"format": "safetensors", "source": "test/fake", "path": str(ckpt), "shards": 1,
                       "total_bytes": 10, "license": {"id": "apache-2.0"}},
        "engine": {"kind": "vllm", "port": 8000}, "context_length": 4096, "gpus": {"count": 0},
        "container": {"publish": {"port": port}, "volumes": [{"host": str(ckpt), "container": "/models/b"}],
                      "env": {"FAKE_VLLM_NO_ACCESS_LOG": "1", **env}},
        "service": {"warmup_budget_s": 60, "stall_budget_s": 30, "restart_sec": 1, "stop_timeout_s": 5},
    }
    path = workdir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


class Watcher(threading.Thread):
    """Polls /health every 5 ms; records when it first answered 200, and when an answering engine
    (503 while warming up) stopped answering at all."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.ready_at: float | None = None
        self.dead_at: float | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        seen_alive = False
        with httpx.Client(timeout=0.5, trust_env=False) as client:
            while not self.stop.is_set():
                try:
                    status = client.get(self.url + "/health").status_code
                    seen_alive = True
                    if status == 200 and self.ready_at is None:
                        self.ready_at = time.monotonic()
                except httpx.HTTPError:
                    if seen_alive and self.dead_at is None:
                        self.dead_at = time.monotonic()
                time.sleep(0.005)


def trial(workdir: Path, name: str, port: int, env: dict[str, str]) -> tuple[float | None, float | None, str]:
    scope = Scope.USER
    loaded = load(str(recipe_file(workdir, name, port, env)))
    adapters = real_adapters(scope)
    watcher = Watcher(f"http://127.0.0.1:{port}")
    watcher.start()
    try:
        result = up(plan_here(loaded.recipe, scope), recipe_source=name, adapters=adapters, dirs=Dirs.of(scope),
                    options=UpOptions(verify=False))
    finally:
        watcher.stop.set()
        watcher.join()
        adapters.systemd.stop(f"rigctl-{name}.service", wait=True, timeout=60)
        adapters.probe.close()
    wait = result.wait
    assert wait is not None
    ready = wait.noticed_mono - watcher.ready_at if watcher.ready_at and wait.status == "ready" else None
    dead = wait.noticed_mono - watcher.dead_at if watcher.dead_at and wait.status == "died" else None
    return ready, dead, str(wait.status)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    args = parser.parse_args()
    if "RIGCTL_TEST_ENGINE_IMAGE" not in os.environ:
        print("run `.ci/testbed.sh up` and `. .testbed/env` first", file=sys.stderr)
        return 2
    readies: list[float] = []
    deaths: list[float] = []
    with tempfile.TemporaryDirectory(prefix="rigctl-bench-") as tmp:
        for i in range(args.trials):
            ready, _, status = trial(Path(tmp), "bench-ready", 18301, {"FAKE_VLLM_WARMUP_SECONDS": "2"})
            print(f"ready trial {i + 1}: status {status}, noticed after "
                  f"{'?' if ready is None else f'{ready * 1000:.0f} ms'}")
            if ready is not None:
                readies.append(ready)
            _, dead, status = trial(Path(tmp), "bench-die", 18302, {
                "FAKE_VLLM_WARMUP_SECONDS": "6", "FAKE_VLLM_DIE_AFTER": "2", "FAKE_VLLM_EXIT_CODE": "0"})
            print(f"death trial {i + 1}: status {status}, noticed after "
                  f"{'?' if dead is None else f'{dead * 1000:.0f} ms'}")
            if dead is not None:
                deaths.append(dead)
        for name in ("bench-ready", "bench-die"):
            for path in (install_dir(Scope.USER) / f"rigctl-{name}.container", state_dir(Scope.USER) / f"{name}.json"):
                path.unlink(missing_ok=True)
        SystemctlCli(Scope.USER).daemon_reload()
    for label, values, target in (("readiness", readies, 0.3), ("death", deaths, 1.0)):
        if values:
            print(f"{label} notice latency: median {statistics.median(values) * 1000:.0f} ms, "
                  f"max {max(values) * 1000:.0f} ms over {len(values)} trials (target <= {target * 1000:.0f} ms)")
        else:
            print(f"{label} notice latency: no successful trial")
    return 0


if __name__ == "__main__":
    sys.exit(main())
