"""The engine cache in the rendered unit: a directory per image digest and GPU under the manager's cache
directory (%C, made by systemd: CacheDirectory=), mounted where the engine's cache variables point."""

from __future__ import annotations

from rigctl.places import ENGINE_CACHE_MOUNT
from rigctl.recipe.load import load
from rigctl.render.units import engine_cache_key, render_units


def _unit(*sets: str) -> str:
    return render_units(load("qwen3-8b-vllm", sets=list(sets)).recipe, podman_version=(5, 4)).files[0].text


def test_the_unit_mounts_a_cache_per_image_and_gpu() -> None:
    recipe = load("qwen3-8b-vllm").recipe
    key = engine_cache_key(recipe)
    assert key is not None and key.startswith(recipe.image_digest.removeprefix("sha256:")[:16])
    text = _unit()
    assert f"CacheDirectory=rigctl/engine-cache/{key}\n" in text and "CacheDirectoryMode=0700" in text
    assert f"Volume=%C/rigctl/engine-cache/{key}:{ENGINE_CACHE_MOUNT}:rw,z\n" in text
    for line in ("VLLM_CACHE_ROOT=/var/cache/rigctl-engine/vllm", "TRITON_CACHE_DIR=/var/cache/rigctl-engine/triton",
                 "TORCHINDUCTOR_CACHE_DIR=/var/cache/rigctl-engine/inductor"):
        assert f"Environment={line}\n" in text


def test_another_image_or_gpu_is_another_cache() -> None:
    recipe = load("qwen3-8b-vllm").recipe
    other_image = recipe.model_copy(update={"image": recipe.image.split("@")[0] + "@sha256:" + "1" * 64})
    other_gpu = load("qwen3-8b-vllm", sets=['gpus.products=["NVIDIA H200"]']).recipe
    keys = {engine_cache_key(r) for r in (recipe, other_image, other_gpu)}
    assert len(keys) == 3 and all(k and "/" not in k and ".." not in k for k in keys)


def test_a_recipes_own_cache_variable_wins_and_the_cache_can_be_off() -> None:
    own = _unit("container.env.VLLM_CACHE_ROOT=/cache/mine")
    assert "Environment=VLLM_CACHE_ROOT=/cache/mine\n" in own
    assert "VLLM_CACHE_ROOT=/var/cache/rigctl-engine/vllm" not in own
    off = _unit("container.engine_cache=false")
    assert "CacheDirectory=" not in off and "rigctl-engine" not in off
