"""Facts for a healthy host around a fake-NVML box: each test breaks one thing."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.support.nvml_fake import FakeNvml

from rigctl.host.facts import (
    Cdi,
    CdiSpec,
    FileEntry,
    HostFacts,
    LicenseAcceptance,
    PathProbe,
    PodmanFacts,
    PodmanImage,
    Shm,
    SystemdFacts,
)
from rigctl.host.nvml import probe_gpus
from rigctl.recipe.load import load
from rigctl.recipe.model import Recipe

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
GIB = 1024**3


def shard_files(recipe: Recipe) -> list[FileEntry]:
    ck = recipe.checkpoint
    total = ck.total_bytes or ck.approx_bytes or 0
    names = ck.shard_names()
    each = total // len(names)
    sizes = [each] * (len(names) - 1) + [total - each * (len(names) - 1)]
    return [FileEntry(name=n, size=s, mtime_ns=1) for n, s in zip(names, sizes, strict=True)]


def box_capture(box: str) -> dict[str, Any]:
    """A captured-shape NVML box (tests/fixtures/inventory/boxes/), as a dict a test may mutate."""
    capture: dict[str, Any] = json.loads((FIXTURES / "boxes" / f"{box}.json").read_text())
    return capture


def healthy_facts(recipe: Recipe, box: str | dict[str, Any], **changes: Any) -> HostFacts:
    """A healthy host around the NVML box ``box`` (a name under boxes/, or a capture dict)."""
    capture = box_capture(box) if isinstance(box, str) else box
    gpu = probe_gpus(FakeNvml(capture), process_name={4242: "vllm"}.get)
    facts = HostFacts(
        gpu=gpu,
        shm=Shm(total_bytes=62 * GIB, free_bytes=62 * GIB),
        paths=[PathProbe(path=recipe.checkpoint.path, exists=True, is_dir=True, probed=recipe.checkpoint.path,
                         free_bytes=500 * GIB, total_bytes=4000 * GIB, files=shard_files(recipe))],
        podman=PodmanFacts(installed=True, version="5.4.2", quadlet="/usr/libexec/podman/quadlet", images_via="cli",
                           images=[PodmanImage(id="f" * 64, digest=recipe.image_digest,
                                               repo_digests=[f"{recipe.image_name}@{recipe.image_digest}"],
                                               names=[recipe.image.split("@")[0]])]),
        cdi=Cdi(dirs=["/etc/cdi"], specs=[CdiSpec(path="/etc/cdi/nvidia.yaml", kind="nvidia.com/gpu",
                                                  devices=["0", "1", "2", "all"], mtime_ns=2,
                                                  driver_versions=[gpu.driver_version or ""])],
                driver_installed_ns=1),
        systemd=SystemdFacts(system_manager=True, user_manager=False, user="root", uid=0),
        licenses=[LicenseAcceptance(id=lic.id, accepted_at="2026-01-01T00:00:00+00:00", by="op")
                  for _, lic in recipe.licenses()],
    )
    return facts.model_copy(update=changes)


@pytest.fixture(autouse=True)
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """rigctl's cache directory (gpu-fit's shard summaries, the sha256 cache) is the test's own, never the
    user's: a check that reads a checkpoint here writes there."""
    cache = tmp_path / "xdg-cache"
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    return cache


@pytest.fixture
def glm() -> Recipe:
    return load("glm53-flash").recipe


@pytest.fixture
def recipe_with() -> Callable[..., Recipe]:
    def make(name: str = "glm53-flash", *sets: str) -> Recipe:
        return load(name, sets=sets).recipe

    return make


@pytest.fixture
def facts_for() -> Callable[..., HostFacts]:
    return healthy_facts
