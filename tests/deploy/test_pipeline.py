"""One pipeline for `up`, `up --dry-run` and `swap`: each fact computed in one place. Each test here failed
before it was so: the endpoint, the paths probed, the scope swap judges, where quadlet is found."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import FakeClock, FakeGpu, FakePodman, FakeProbe, FakeSystemd, small_recipe_file

from rigctl.adapters import Adapters
from rigctl.deploy.swap import HostSwapDeploy, Side
from rigctl.deploy.up import UpResult, quadlet_diagnosis
from rigctl.host.facts import GpuInventory, HostFacts, PodmanFacts
from rigctl.host.gather import recipe_paths
from rigctl.host.probes import probe_podman
from rigctl.host.quadlet import QUADLET_ENV, find_quadlet
from rigctl.places import Dirs, Scope
from rigctl.plan.plan import make_plan
from rigctl.recipe.load import load
from rigctl.recipe.model import Recipe, http_url
from rigctl.verify.report import endpoint_for

pytestmark = pytest.mark.timeout(60)


def recipe_file(tmp: Path, *, address: str = "127.0.0.1", draft: bool = False, ckpt_exists: bool = True) -> Path:
    """A recipe with a second volume (``extra``), perhaps a draft model (not mounted), perhaps no checkpoint."""
    for d in ("extra", "draft"):
        (tmp / d).mkdir(exist_ok=True)
    speculative = {"method": "draft", "name": "eagle3", "draft": {
        "source": "test/draft", "path": str(tmp / "draft"), "total_bytes": 10, "license": {"id": "apache-2.0"}}}
    path = small_recipe_file(tmp, "pipe", port=18977, container={
        "publish": {"port": 18977, "address": address},
        "volumes": [{"host": str(tmp / "ckpt"), "container": "/models/m"}, {"host": str(tmp / "extra"),
                                                                            "container": "/extra"}],
    }, **({"speculative": speculative} if draft else {}))
    if not ckpt_exists:
        (tmp / "ckpt").rmdir()
    return path


def recipe_at(tmp: Path, **kw: Any) -> Recipe:
    return load(str(recipe_file(tmp, **kw))).recipe


# --- the endpoint: one property of the recipe -------------------------------------------------------


@pytest.mark.parametrize(("address", "url"), [
    ("0.0.0.0", "http://127.0.0.1:8000"),  # all IPv4 addresses: reached over IPv4 loopback
    ("::", "http://[::1]:8000"),  # all IPv6 addresses: over IPv6 loopback, bracketed
    ("fd00::1", "http://[fd00::1]:8000"),
    ("127.0.0.1", "http://127.0.0.1:8000"),
    ("10.1.2.3", "http://10.1.2.3:8000"),
    ("gpu-box.local", "http://gpu-box.local:8000"),  # a name is kept as it is
])
def test_http_url(address: str, url: str) -> None:
    assert http_url(address, 8000) == url


@pytest.mark.parametrize(("address", "base"), [("0.0.0.0", "http://127.0.0.1:18977"),
                                               ("::", "http://[::1]:18977"),
                                               ("fd00::7", "http://[fd00::7]:18977")])
def test_every_user_of_the_endpoint_agrees(tmp_path: Path, address: str, base: str) -> None:
    recipe = recipe_at(tmp_path, address=address)
    assert recipe.base_url == base
    assert endpoint_for(recipe).base_url == base  # verify's default URL
    assert UpResult.begin(recipe, Scope.USER, Dirs(tmp_path, tmp_path)).endpoint == base  # up, its record, swap
    facts = HostFacts(gpu=GpuInventory(available=False))
    dry = make_plan(recipe, facts, scope=Scope.USER).to_dict()
    assert dry["endpoint"] == f"{base}/v1"  # the dry run's endpoint: the OpenAI base URL, as it always was
    assert dry["base_url"] == base  # and what `endpoint` means everywhere else


# --- the facts: one gather, the same paths, for every command ----------------------------------------


def test_recipe_paths_are_checkpoint_draft_and_volumes(tmp_path: Path) -> None:
    recipe = recipe_at(tmp_path, draft=True)
    assert recipe_paths(recipe) == [str(tmp_path / "ckpt"), str(tmp_path / "draft"), str(tmp_path / "extra")]


@pytest.mark.timeout(120)
def test_dry_run_and_up_judge_the_same_draft_and_disk(tmp_path: Path) -> None:
    # the draft is not mounted: `up` used to probe only the mounted paths, the dry run only checkpoint and
    # draft; the checkpoint is missing, so preflight refuses and `up` installs nothing
    path = recipe_file(tmp_path, draft=True, ckpt_exists=False)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config")}

    def run(*args: str) -> dict[str, Any]:
        done = subprocess.run([sys.executable, "-m", "rigctl", "up", str(path), "--user", *args, "--json"],
                              env=env, capture_output=True, text=True, timeout=90, check=False)
        assert done.returncode == 1, done.stdout + done.stderr
        doc: dict[str, Any] = json.loads(done.stdout)
        return doc

    dry, real = run("--dry-run"), run()
    assert real["action"] == "refused" and not (tmp_path / "config").exists()
    dry_by_id = {f["id"]: f for f in dry["findings"]}
    real_by_id = {f["id"]: f for f in real["preflight"]}
    assert dry_by_id["checkpoint"]["severity"] == "fail"
    assert dry_by_id["draft"]["severity"] != "skip"  # the draft was probed: it is there
    for check in ("draft", "disk", "checkpoint"):
        assert real_by_id[check] == dry_by_id[check]


# --- swap judges TO in the caller's scope --------------------------------------------------------------


@pytest.mark.parametrize(("scope", "manager"), [(Scope.USER, "user manager"), (Scope.SYSTEM, "system manager")])
def test_swap_plans_to_in_the_callers_scope(tmp_path: Path, scope: Scope, manager: str) -> None:
    recipe = recipe_at(tmp_path)
    clock = FakeClock()
    systemd = FakeSystemd(tmp_path, clock, scope=scope)
    adapters = Adapters(systemd=systemd, podman=FakePodman(), probe=FakeProbe(systemd, "x", "m"), clock=clock,
                        gpu=FakeGpu())
    deploy = HostSwapDeploy(scope, adapters=adapters, dirs=Dirs(tmp_path / "u", tmp_path / "s"))
    plan = deploy.preflight(Side(recipe, "pipe.yaml"), freed_gpus=(), freed_port=recipe.publish.port)
    assert plan.scope is scope
    assert manager in plan.report.finding("systemd").message  # root's `swap --user` judges the user manager


# --- quadlet: found one way, in the facts, and asked by `up` when it rejects a unit -------------------


def test_the_plan_takes_quadlet_from_the_facts_for_its_scope(tmp_path: Path) -> None:
    recipe = recipe_at(tmp_path)
    podman = PodmanFacts(installed=True, version="4.3.1", quadlet="/opt/q/quadlet", quadlet_version="5.4.2",
                         quadlet_scope=Scope.USER)
    facts = HostFacts(gpu=GpuInventory(available=False), podman=podman)
    mine = make_plan(recipe, facts, scope=Scope.USER)
    assert (mine.quadlet_path, mine.quadlet_version) == ("/opt/q/quadlet", (5, 4))
    assert mine.rendered is not None and mine.rendered.quadlet_version == (5, 4)
    other = make_plan(recipe, facts, scope=Scope.SYSTEM)  # found for the user manager: not the system's
    assert (other.quadlet_path, other.quadlet_version) == (None, None)


def systemds_generator(scope: Scope) -> Path | None:
    """The podman generator the manager of ``scope`` runs: the first in systemd's own generator search path
    (``systemd-path``): /run/systemd/user-generators where the 4.3 testbed links trixie's quadlet, or
    /usr/lib/systemd/{system,user}-generators where Debian 13's podman package installs it."""
    path = shutil.which("systemd-path")
    if path is None:
        return None
    done = subprocess.run([path, f"systemd-search-{scope.value}-generator"], capture_output=True, text=True,
                          timeout=30, check=True)
    found = (Path(d) / f"podman-{scope.value}-generator" for d in done.stdout.strip().split(":") if d)
    return next((g for g in found if os.access(g, os.X_OK)), None)


def test_quadlet_is_found_in_the_generator_dirs_or_by_the_override(
    need: Callable[[bool, str], None], monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    generator = systemds_generator(Scope.USER)
    need(generator is not None, "no user quadlet generator in systemd's search path (.ci/testbed.sh up)")
    assert generator is not None
    monkeypatch.delenv(QUADLET_ENV, raising=False)
    assert find_quadlet(Scope.USER) == str(generator)  # where systemd runs it from
    system = systemds_generator(Scope.SYSTEM)  # the 4.3 testbed has none; Debian 13's package installs one
    if system is not None:
        assert find_quadlet(Scope.SYSTEM) == str(system)
    found = probe_podman(sockets=[], scope=Scope.USER)
    assert found.quadlet == str(generator) and found.quadlet_scope is Scope.USER
    assert found.quadlet_version is not None and found.quadlet_version.count(".") >= 1
    copy = tmp_path / "quadlet"
    shutil.copy(generator.resolve(), copy)
    monkeypatch.setenv(QUADLET_ENV, str(copy))
    assert find_quadlet(Scope.USER) == find_quadlet(Scope.SYSTEM) == str(copy)


def test_up_asks_the_quadlet_the_facts_found_why_it_rejected_a_unit(
    need: Callable[[bool, str], None], tmp_path: Path,
) -> None:
    quadlet = find_quadlet(Scope.USER)
    need(quadlet is not None, "no quadlet (.ci/testbed.sh up)")
    assert quadlet is not None
    (tmp_path / "broken.container").write_text("[Container]\nContainerName=broken\n")  # no Image=
    rejected, why = quadlet_diagnosis(quadlet, tmp_path, Scope.USER)
    assert rejected and "broken.container" in why and "Image" in why
    assert "no quadlet generator found" in quadlet_diagnosis(None, tmp_path, Scope.USER)[1]
    # a unit quadlet accepts: what is wrong is where the manager looks, not the unit (operator issue, item 3)
    (tmp_path / "broken.container").write_text("[Container]\nImage=localhost/x@sha256:" + "a" * 64 + "\n")
    rejected, why = quadlet_diagnosis(quadlet, tmp_path, Scope.USER)
    assert not rejected and f"does not read {tmp_path}" in why
