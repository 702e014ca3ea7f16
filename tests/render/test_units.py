"""What goes into the unit: engine flags, environment, GPUs, labels, refusals."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tests.support.recipes import recipe_with

from rigctl.errors import RigctlError
from rigctl.places import install_path
from rigctl.recipe.model import Recipe
from rigctl.render.engines import engine_line
from rigctl.render.escape import RenderError
from rigctl.render.units import render_units, write_files

_recipe = recipe_with


def _text(recipe: Recipe, **kwargs: Any) -> str:
    return render_units(recipe, podman_version=(5, 4), **kwargs).files[0].text


def _values(text: str, key: str) -> list[str]:
    return re.findall(rf"^{key}=(.*)$", text, re.M)


def test_glm53_flash_vllm_flags() -> None:
    argv = engine_line(_recipe()).argv
    assert argv[:16] == [
        "--model", "/models/GLM-5.3-Flash-tr3-4bpw", "--served-model-name", "glm-5.3-flash",
        "--tensor-parallel-size", "2", "--max-model-len", "262144", "--host", "0.0.0.0", "--port", "8001",
        "--speculative-config", '{"method":"mtp","num_speculative_tokens":3}',
        "--gpu-memory-utilization", "0.95",
    ]
    assert argv[-1] == "--enable-prefix-caching"


def test_k3_dflash2_vllm_flags() -> None:
    argv = engine_line(_recipe("glm53-flash-k3-dflash2")).argv
    assert argv[argv.index("--decode-context-parallel-size") + 1] == "2"
    assert "--enable-expert-parallel" in argv
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "dflash2", "model": "/models/GLM-5.3-Flash-DFlash2", "num_speculative_tokens": 8}


def test_parallel_sizes_only_when_above_one() -> None:
    recipe = _recipe(gpus__count=4, gpus__pipeline_parallel=2)
    argv = engine_line(recipe).argv
    assert argv[argv.index("--pipeline-parallel-size") + 1] == "2"
    assert "--data-parallel-size" not in argv
    assert "--decode-context-parallel-size" not in engine_line(_recipe()).argv


def test_tabbyapi_flags() -> None:
    recipe = _recipe(engine__kind="tabbyapi", engine__port=5000, engine__env={}, attention_backend=None,
                     engine__args=["--cache-mode", "8,8"])
    line = engine_line(recipe)
    assert line.argv == [
        "--host", "0.0.0.0", "--port", "5000", "--model-dir", "/models", "--model-name", "GLM-5.3-Flash-tr3-4bpw",
        "--max-seq-len", "262144", "--tensor-parallel", "true", "--draft-mode", "mtp", "--draft-num-tokens", "3",
        "--cache-mode", "8,8",
    ]
    assert any("names the model after its directory" in n for n in line.notes)


def test_sglang_flags() -> None:
    recipe = _recipe(engine__kind="sglang", engine__env={}, engine__args=[])
    argv = engine_line(recipe).argv
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    assert argv[argv.index("--model-path") + 1] == "/models/GLM-5.3-Flash-tr3-4bpw"
    assert argv[argv.index("--tp-size") + 1] == "2"
    assert argv[argv.index("--context-length") + 1] == "262144"
    assert argv[argv.index("--attention-backend") + 1] == "B12X_MLA_SPARSE"
    assert argv[argv.index("--speculative-algorithm") + 1] == "NEXTN"


def test_sglang_refuses_decode_context_parallel() -> None:
    recipe = _recipe("glm53-flash-k3-dflash2", engine__kind="sglang", engine__env={}, engine__args=[])
    with pytest.raises(RenderError, match="decode-context-parallel"):
        render_units(recipe, podman_version=(5, 4))


def test_engine_args_may_not_repeat_derived_flags() -> None:
    with pytest.raises(RenderError, match="--max-model-len"):
        render_units(_recipe(engine__args=["--max-model-len=4096"]), podman_version=(5, 4))


def test_environment_merges_and_refuses_conflicts() -> None:
    text = _text(_recipe())
    env = _values(text, "Environment")
    assert "VLLM_ATTENTION_BACKEND=B12X_MLA_SPARSE" in env
    assert "HF_HUB_OFFLINE=1" in env
    assert len(env) == len(set(env))
    with pytest.raises(RenderError, match="VLLM_ATTENTION_BACKEND"):
        render_units(_recipe(engine__env={"VLLM_ATTENTION_BACKEND": "FLASH_ATTN"}), podman_version=(5, 4))


def test_attention_backend_becomes_environment_for_vllm() -> None:
    env = _values(_text(_recipe(engine__env={})), "Environment")
    assert "VLLM_ATTENTION_BACKEND=B12X_MLA_SPARSE" in env


def test_secret_is_a_podman_secret_never_a_value() -> None:
    text = _text(_recipe(container__secrets=[{"name": "hf-token", "env": "HF_TOKEN"}]))
    assert _values(text, "Secret") == ["hf-token,type=env,target=HF_TOKEN"]
    assert not any(v.startswith("HF_TOKEN=") for v in _values(text, "Environment"))
    with pytest.raises(RenderError, match="HF_HUB_OFFLINE"):
        render_units(_recipe(container__secrets=[{"name": "x", "env": "HF_HUB_OFFLINE"}]), podman_version=(5, 4))


def test_gpu_indices_by_default_with_a_note() -> None:
    rendered = render_units(_recipe(), podman_version=(5, 4))
    assert _values(rendered.files[0].text, "AddDevice") == ["nvidia.com/gpu=0", "nvidia.com/gpu=1"]
    assert any(n.kind == "assumed" and "indices 0, 1" in n.message for n in rendered.notes)


def test_gpu_uuids_given() -> None:
    uuids = ["GPU-5f1c0e2a-1111-2222-3333-444455556666", "GPU-7a2b9c3d-1111-2222-3333-444455556666"]
    rendered = render_units(_recipe(), podman_version=(5, 4), gpu_ids=uuids)
    assert _values(rendered.files[0].text, "AddDevice") == [f"nvidia.com/gpu={u}" for u in uuids]
    assert not any(n.kind == "assumed" for n in rendered.notes)


def test_gpu_select_from_recipe() -> None:
    text = _text(_recipe(gpus__select=["1", "0"]))
    assert _values(text, "AddDevice") == ["nvidia.com/gpu=1", "nvidia.com/gpu=0"]


@pytest.mark.parametrize("ids", [["0"], ["0", "1", "2"], ["0", "0"], ["0", "bad id"]])
def test_gpu_ids_refused(ids: list[str]) -> None:
    with pytest.raises(RenderError):
        render_units(_recipe(), podman_version=(5, 4), gpu_ids=ids)


def test_no_gpu_means_no_device() -> None:
    recipe = _recipe("qwen3-8b-vllm", gpus={"count": 0})
    rendered = render_units(recipe, podman_version=(5, 4))
    assert "AddDevice" not in rendered.files[0].text
    assert "--tensor-parallel-size" not in rendered.files[0].text


def test_labels() -> None:
    recipe = _recipe()
    text = _text(recipe, labels_extra={"example.com/owner": "ops team"})
    assert _values(text, "Label") == [
        "rigctl.managed=true", "rigctl.recipe=glm53-flash", f"rigctl.image-digest={recipe.image_digest}",
        '"example.com/owner=ops team"',
    ]
    with pytest.raises(RenderError):
        _text(recipe, labels_extra={"rigctl.managed": "false"})


def test_publish_defaults_to_loopback_and_brackets_ipv6() -> None:
    assert _values(_text(_recipe("qwen3-8b-vllm")), "PublishPort") == ["127.0.0.1:8000:8000"]
    text = _text(_recipe(container__publish={"address": "::1", "port": 9000}))
    assert _values(text, "PublishPort") == ["[::1]:9000:8001"]


def test_health_check_uses_engine_port_and_path() -> None:
    text = _text(_recipe(engine__health_path="/v1/models"))
    assert "http://127.0.0.1:8001/v1/models" in _values(text, "HealthCmd")[0]
    assert _values(text, "HealthOnFailure") == ["kill"]


@pytest.mark.parametrize("path", ["/srv/a:b", "/srv/a,b"])
def test_volume_paths_podman_cannot_carry(path: str) -> None:
    volumes = [{"host": "/srv/models/GLM-5.3-Flash-tr3-4bpw", "container": "/models/x"},
               {"host": path, "container": "/mnt/extra"}]
    with pytest.raises(RigctlError):
        render_units(_recipe(container__volumes=volumes), podman_version=(5, 4))


def test_special_characters_are_escaped() -> None:
    text = _text(_recipe(container__env={"P": 'a b%c$d"e\\f'}))
    assert 'Environment="P=a b%%c$$d\\"e\\\\f"' in text


def test_install_paths(tmp_path: Path) -> None:
    assert install_path("system", "x.container") == Path("/etc/containers/systemd/x.container")
    assert install_path("user", "x.container", config_home=tmp_path) == tmp_path / "containers/systemd/x.container"


def test_write_files_is_atomic_and_overwrites(tmp_path: Path) -> None:
    rendered = render_units(_recipe(), podman_version=(5, 4))
    (tmp_path / rendered.files[0].name).write_text("old")
    paths = write_files(rendered.files, tmp_path)
    assert [p.read_text() for p in paths] == [rendered.files[0].text]
    assert sorted(p.name for p in tmp_path.iterdir()) == [rendered.files[0].name]
    assert rendered.service_name == "rigctl-glm53-flash.service"
