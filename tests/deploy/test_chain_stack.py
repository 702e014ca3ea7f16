"""The stack under the engine on the test bed (#34): real podman images whose environment declares a CUDA and an
NCCL (built here FROM the test engine, as NVIDIA's base images declare them), read by `rigctl preflight` through
`podman image inspect`, on the story's Blackwell pair from the stand-in NVML (the captured RTX PRO 6000 box, CUDA
driver 13.0). A newer CUDA than the driver's is refused, NCCL 2.26.2 is named, the custom all-reduce at TP 2 on
SM120 is flagged, a GPU at x4 of x16 is flagged; a matching image with --disable-custom-all-reduce on full links
raises none of them."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.deploy.conftest import REPO, Rig
from tests.support.on_capture import rigctl_on_capture

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

BOX = REPO / "tests" / "fixtures" / "inventory" / "boxes" / "pro6000-mixed.json"
PRODUCTS = ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"]
def _image(rig: Rig, tag: str, env: dict[str, str]) -> str:
    """An image FROM the test engine with ``env`` declared; its reference pinned by digest."""
    context = rig.workdir / tag
    context.mkdir()
    base = rig.image.split("@")[0]
    lines = [f"FROM {rig.image}", *(f"ENV {k}={v}" for k, v in env.items())]
    (context / "Containerfile").write_text("\n".join(lines) + "\n")
    name = f"{base}-{tag}"
    done = subprocess.run(["podman", "build", "-q", "-t", name, str(context)], env=rig.env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    digest = rig.podman("image", "inspect", "--format", "{{.Digest}}", name).strip()
    assert digest.startswith("sha256:"), digest
    return f"{name}@{digest}"


def _box(tmp: Path, *, narrow: bool) -> Path:
    capture = json.loads(BOX.read_text())
    if narrow:
        capture["devices"][1]["nvmlDeviceGetCurrPcieLinkWidth"] = {"ok": 4}
    path = tmp / ("narrow.json" if narrow else "full.json")
    path.write_text(json.dumps(capture))
    return path


def _preflight(rig: Rig, box: Path, recipe: Path) -> dict[str, dict[str, Any]]:
    done = rigctl_on_capture(box, "preflight", str(recipe), "--user", "--json", env=rig.env)
    doc = json.loads(done.stdout)
    return {f["id"]: f for f in doc["findings"]}


def _recipe(rig: Rig, name: str, image: str, *args: str) -> Path:
    return rig.recipe(name, 18471, image=image, gpus={"count": 2, "tensor_parallel": 2, "products": PRODUCTS,
                                                      "compute_capability": ["12.0"], "allow_mixed": True},
                      engine={"kind": "vllm", "port": 8000, "args": list(args)})


def test_the_stack_checks_read_real_images_on_the_story_box(rig: Rig) -> None:
    bad = _image(rig, "cuda131-nccl2262", {"CUDA_VERSION": "13.1.0", "NV_CUDA_CUDART_VERSION": "13.1.80-1",
                                            "NCCL_VERSION": "2.26.2-1"})
    good = _image(rig, "cuda128-nccl2273", {"CUDA_VERSION": "12.8.1", "NCCL_VERSION": "2.27.3-1"})
    try:
        _judge(rig, bad, good)
    finally:
        rig.podman("rmi", "--force", "--", bad.split("@")[0], good.split("@")[0])


def _judge(rig: Rig, bad: str, good: str) -> None:

    found = _preflight(rig, _box(rig.workdir, narrow=True), _recipe(rig, "st-bad", bad))
    assert found["image-cuda"]["severity"] == "fail" and "13.1" in found["image-cuda"]["message"], found["image-cuda"]
    known = found["known-bad"]
    assert known["severity"] == "fail" and "2.26.2" in known["message"], known
    assert "custom all-reduce" in known["message"].lower() or "custom_all_reduce" in known["message"], known
    assert found["pcie-link"]["severity"] == "warn" and "x4" in found["pcie-link"]["message"], found["pcie-link"]

    clean = _preflight(rig, _box(rig.workdir, narrow=False),
                       _recipe(rig, "st-good", good, "--disable-custom-all-reduce"))
    for check in ("image-cuda", "known-bad", "pcie-link"):
        assert clean[check]["severity"] in ("ok", "skip"), clean[check]
