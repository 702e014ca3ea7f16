"""Fixtures for deploy tests on the real chain, in the flavour `.ci/testbed.sh` set up: podman 4.3 with
trixie's quadlet (`up`), or podman 5.4 with its own quadlet and systemd 257 (`up --podman 5`, whose tests
run inside its trixie root through `.ci/testbed.sh exec --podman 5 -- ...`); both with a `systemd --user`
manager and the locally built test-engine image."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
# The flavour's environment file: `testbed.sh exec` names it (the podman 5 one lives in .testbed/podman5/);
# otherwise the podman 4.3 testbed's.
ENV_FILE = Path(os.environ.get("RIGCTL_TESTBED_ENV") or REPO / ".testbed" / "env")


def testbed_env() -> dict[str, str]:
    """The process environment plus what `.ci/testbed.sh up` exported (when the caller did not source it)."""
    env = dict(os.environ)
    if ENV_FILE.is_file():
        for line in ENV_FILE.read_text().splitlines():
            if line.startswith("export ") and "=" in line:
                key, value = line.removeprefix("export ").split("=", 1)
                env.setdefault(key, value)
    return env


def flavour(env: dict[str, str]) -> str:
    """``podman4`` or ``podman5``: which testbed the environment names (an env file from before the switch
    is the 4.3 one)."""
    return env.get("RIGCTL_TESTBED_FLAVOUR") or "podman4"


def outside_its_root(env: dict[str, str]) -> str | None:
    """Why this process cannot use the testbed ``env`` names, or None. The podman 5 testbed on Debian 12 is a
    trixie root: its env file names paths (the manager's runtime directory) that mean nothing, or another
    manager, on the host."""
    marker = env.get("RIGCTL_TESTBED_MARKER")
    if marker and not Path(marker).is_file():
        return (f"the {flavour(env)} testbed's tests run inside its root (no {marker} here): "
                "bash .ci/testbed.sh exec --podman 5 -- uv run --frozen pytest ...")
    return None


def _manager_running(env: dict[str, str]) -> bool:
    if shutil.which("systemctl") is None or "XDG_RUNTIME_DIR" not in env:
        return False
    done = subprocess.run(["systemctl", "--user", "is-system-running"], env=env, capture_output=True, text=True,
                          timeout=10, check=False)
    return done.stdout.strip() in {"running", "degraded"}


class Rig:
    """Runs rigctl as an operator would (a subprocess, --json) against the testbed."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.workdir = workdir
        self.image = env["RIGCTL_TEST_ENGINE_IMAGE"]
        self.flavour = flavour(env)
        self.deployed: list[str] = []
        ckpt = workdir / "ckpt"
        ckpt.mkdir(exist_ok=True)
        (ckpt / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 1000)
        self.ckpt = ckpt

    def recipe(self, name: str, port: int, *, env: dict[str, str] | None = None, **extra: Any) -> Path:
        data: dict[str, Any] = {
            "name": name, "description": "test engine on the testbed", "family": "test",
            "served_name": "test-model", "image": self.image,
            "checkpoint": {"format": "safetensors", "source": "test/fake", "path": str(self.ckpt), "shards": 1,
                           "total_bytes": 1000, "license": {"id": "apache-2.0"}},
            "engine": {"kind": "vllm", "port": 8000},
            "context_length": 4096,
            "gpus": {"count": 0},
            "container": {"publish": {"port": port},
                          "volumes": [{"host": str(self.ckpt), "container": "/models/test"}],
                          "env": {"FAKE_VLLM_NO_ACCESS_LOG": "1", **(env or {})}},
            "service": {"warmup_budget_s": 90, "stall_budget_s": 30, "restart_sec": 1, "stop_timeout_s": 10},
            "known_issues": {"signatures": [{
                "id": "replayssm-row-mismatch",
                "pattern": "ReplaySSM prefill source/state row count mismatch",
                "meaning": "the KDA ReplaySSM speculative-decode path crashed under batched prefill",
                "remedy": "set USE_REPLAYSSM=0, or use an image with the fix",
            }]},
        }
        for key, value in extra.items():
            data[key] = {**data.get(key, {}), **value} if isinstance(value, dict) else value
        path = self.workdir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        if name not in self.deployed:
            # a container of this name left by an earlier run that was killed (its unit gone, the container
            # up) would be taken for this test's: "running" seen before this test's `up` has even started
            self.podman("rm", "--force", "--ignore", "--", f"rigctl-{name}")
            self.deployed.append(name)
        return path

    def run(self, *args: str, timeout: float = 180) -> tuple[int, dict[str, Any]]:
        done = subprocess.run([sys.executable, "-m", "rigctl", *args, "--json"], env=self.env, capture_output=True,
                              text=True, timeout=timeout, check=False)
        try:
            payload = json.loads(done.stdout)
        except json.JSONDecodeError:
            payload = {"stdout": done.stdout, "stderr": done.stderr}
        return done.returncode, payload

    def systemctl(self, *args: str) -> str:
        done = subprocess.run(["systemctl", "--user", *args], env=self.env, capture_output=True, text=True,
                              timeout=60, check=False)
        return done.stdout

    def podman(self, *args: str) -> str:
        done = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True, timeout=60, check=False)
        return done.stdout

    def container_running(self, name: str) -> bool:
        return self.podman("container", "inspect", "--format", "{{.State.Running}}", "--", name).strip() == "true"

    def cleanup(self) -> None:
        for name in self.deployed:
            self.run("down", name, "--user", "--remove", timeout=120)


@pytest.fixture
def rig(need: Callable[[bool, str], None], tmp_path: Path) -> Iterator[Rig]:
    env = testbed_env()
    need("RIGCTL_TEST_ENGINE_IMAGE" in env, "no test-engine image: run `.ci/testbed.sh up` and source .testbed/env")
    elsewhere = outside_its_root(env)
    need(elsewhere is None, elsewhere or "")
    need(shutil.which("podman") is not None, "podman is not installed (.ci/testbed.sh up)")
    need(_manager_running(env), "no `systemd --user` manager running (.ci/testbed.sh up)")
    # The records live under the user's state dir; recipes must sit where the manager can mount them.
    rig = Rig(env, tmp_path)
    try:
        yield rig
    finally:
        rig.cleanup()


def shared_prefix_load(url: str, n: int, stop: threading.Event | None = None) -> None:
    """n streamed completions sharing one long prefix, at once: the test engine's crash-under-load mode
    then prints the ReplaySSM traceback and exits 0, as vLLM's API server does when its EngineCore dies.
    Returns when every stream has ended (or ``stop`` is set), each bounded in time."""
    prefix = "You are a helpful agent. " * 60

    def one(i: int) -> None:
        body = {"model": "test-model", "prompt": prefix + f"task {i}", "max_tokens": 200, "stream": True}
        try:
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=20) as r:
                for _ in r.iter_lines():
                    if stop is not None and stop.is_set():
                        return
        except httpx.HTTPError:
            return  # the engine dying mid-stream is the point

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)


@pytest.fixture(autouse=True)
def own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The deployment locks ``up()``, ``down()``, ``swap()`` and the canary take in this test process go to tmp:
    tests of other checkouts on one host (root's lock directory is host-wide) never contend for a name. A
    rigctl started as a process keeps the real directory."""
    import rigctl.places

    locks = tmp_path / "locks"
    monkeypatch.setattr(rigctl.places, "lock_dir", lambda: locks)
    return locks
