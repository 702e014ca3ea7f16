"""The recipe model refuses what cannot be served safely, with `file: dotted.path: problem` lines."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from rigctl.errors import InvalidInputError, RecipeNotFoundError, UsageError
from rigctl.recipe.catalog import bundled_recipes_dir, list_recipe_files, read_yaml_mapping
from rigctl.recipe.load import apply_set, load, parse_set, validate_data, validate_file
from rigctl.recipe.model import PODMAN_IPC_SHM_ERROR, Recipe, SpecDraft

BUNDLED = sorted(p.stem for p in bundled_recipes_dir().glob("*.yaml"))


def base() -> dict[str, Any]:
    return read_yaml_mapping(bundled_recipes_dir() / "glm53-flash.yaml")


def problems(data: dict[str, Any]) -> list[str]:
    with pytest.raises(InvalidInputError) as info:
        validate_data(data, "r.yaml")
    return info.value.problems


def mutate(path: str, value: Any) -> dict[str, Any]:
    parts, _ = path.split("."), None
    return apply_set(copy.deepcopy(base()), parts, value)


def test_bundled_recipes_include_the_story() -> None:
    assert {"glm53-flash", "glm53-flash-k3-dflash2", "glm53-flash-nvfp4"} <= set(BUNDLED)
    assert len(BUNDLED) >= 4  # plus at least one ordinary recipe on a stock engine


@pytest.mark.parametrize("name", BUNDLED)
def test_every_bundled_recipe_validates(name: str) -> None:
    recipe = load(name).recipe
    assert recipe.name == name
    assert recipe.service.restart == "always"
    assert recipe.image_digest.startswith("sha256:") and len(recipe.image_digest) == 71


def test_glm53_flash_is_the_story_stack() -> None:
    r = load("glm53-flash").recipe
    assert r.checkpoint.format == "exl3" and r.checkpoint.variant == "TR3" and r.checkpoint.shards == 120
    assert r.checkpoint.license.acceptance_required
    assert r.attention_backend == "B12X_MLA_SPARSE"
    assert r.gpus.count == 2 and r.gpus.tensor_parallel == 2 and r.gpus.allow_mixed
    assert r.context_length == 262_144
    assert r.speculative.method == "mtp"
    assert r.service.warmup_budget_s >= 1800
    assert r.container.ipc == "host" and r.container.shm_size is None
    assert r.image.endswith("sha256:fe249b88d091430d8a88cd987d087d556053f0f067a649f2e9ca95895129e82b")
    assert any("ReplaySSM" in s.pattern for s in r.known_issues.signatures)
    assert r.recipe_known_bad() == []  # the working stack matches none of its own known-bad combinations


def test_k3_variant_has_fail_closed_draft_license() -> None:
    r = load("glm53-flash-k3-dflash2").recipe
    assert r.checkpoint.total_bytes == 136_686_260_192 and r.checkpoint.shards == 16
    assert isinstance(r.speculative, SpecDraft)
    assert r.speculative.draft.total_bytes == 2_342_169_800
    assert [lic.acceptance_required for _, lic in r.licenses()] == [True, True]
    assert r.context_length == 1_048_576


def test_nvfp4_recipe_matches_its_known_bad_combination() -> None:
    hits = load("glm53-flash-nvfp4").recipe.recipe_known_bad()
    assert [h.id for h in hits] == ["nvfp4-sparse-mla-sm120"]
    assert hits[0].compute_capabilities == ["12.0", "12.1"]


@pytest.mark.parametrize(
    ("path", "value", "where", "says"),
    [
        ("image", "ghcr.io/tpurtell/glm:latest", "image", "not pinned by digest"),
        ("image", "ghcr.io/x/y@sha256:abc", "image", "not a valid"),
        ("image", "ghcr.io/x/y@sha256:" + "F" * 64, "image", "not a valid"),
        ("container.shm_size", "16g", "container", PODMAN_IPC_SHM_ERROR),
        ("gpus.tensor_parallel", 4, "gpus", "but count is 2"),
        ("gpus.decode_context_parallel", 3, "gpus", "must divide"),
        ("checkpoint.path", "models/glm", "checkpoint.path", "not an absolute path"),
        ("checkpoint.path", "/srv/../etc", "checkpoint.path", "contains '..'"),
        ("engine.port", 70000, "engine.port", "less than or equal to 65535"),
        ("engine.port", 0, "engine.port", "greater than or equal to 1"),
        ("engine.port", "eighty", "engine.port", "valid integer"),
        ("container.publish.port", 65536, "container.publish.port", "65535"),
        ("engine.env.FOO", "a\nExecStartPre=/bin/evil", "engine.env.FOO", "control character"),
        ("description", "tab\there", "description", "control character"),
        ("engine.args", ["--x", "ok\rno"], "engine.args.1", "control character"),
        ("service.restart", "on-failure", "service.restart", "'always'"),
        ("checkpoint.shards", "many", "checkpoint.shards", "valid integer"),
        ("surprise", 1, "surprise", "unknown key"),
        ("gpus.surprise", 1, "gpus.surprise", "unknown key"),
        ("speculative.draft_tokens", 3, "speculative.draft_tokens", "unknown key"),
        ("checkpoint.variant", "Q9", "checkpoint", "exl3 variant"),
        ("container.extra_podman_args", ["--restart=always"], "container", "--restart"),
    ],
)
def test_refusals_name_file_path_and_problem(path: str, value: Any, where: str, says: str) -> None:
    lines = problems(mutate(path, value))
    assert any(line.startswith(f"r.yaml: {where}") and says in line for line in lines), lines


def test_all_problems_are_listed_at_once() -> None:
    data = mutate("engine.port", 0)
    data = apply_set(data, ["image"], "nginx:latest")
    data = apply_set(data, ["bogus"], True)
    lines = problems(data)
    assert {line.split(":")[1].strip() for line in lines} >= {"engine.port", "image", "bogus"}


def test_unmounted_checkpoint_is_refused() -> None:
    lines = problems(mutate("container.volumes", []))
    assert any("is not mounted" in line for line in lines)


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\n  description: [unclosed\n")
    with pytest.raises(InvalidInputError) as info:
        validate_file(bad)
    assert info.value.problems[0].startswith(f"{bad}: line ")
    assert "malformed YAML" in info.value.problems[0]


@pytest.mark.parametrize("text", ["", "- a\n- b\n", "just a string\n"])
def test_top_level_must_be_a_mapping(tmp_path: Path, text: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(InvalidInputError, match="top level must be a mapping"):
        validate_file(bad)


def test_set_and_overlay_retarget_a_bundled_recipe(tmp_path: Path) -> None:
    overlay = tmp_path / "mine.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "checkpoint": {"path": "/data/glm"},
                "container": {"volumes": [{"host": "/data/glm", "container": "/models/glm"}]},
            }
        )
    )
    loaded = load("glm53-flash", overlays=[overlay], sets=["container.publish.port=9001", "gpus.select=[0, 2]"])
    r = loaded.recipe
    assert r.checkpoint.path == "/data/glm" and r.publish.port == 9001 and r.gpus.select == ["0", "2"]
    assert r.checkpoint.shards == 120  # untouched keys survive the deep merge
    assert loaded.source.overlays == (str(overlay), "--set container.publish.port=9001", "--set gpus.select=[0, 2]")


def test_set_errors_carry_the_source() -> None:
    with pytest.raises(InvalidInputError) as info:
        load("glm53-flash", sets=["engine.port=abc"])
    assert "--set engine.port=abc" in info.value.problems[0]
    assert "engine.port" in info.value.problems[0]


@pytest.mark.parametrize("bad", ["novalue", "=3", "a..b=1"])
def test_malformed_set_is_a_usage_error(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_set(bad)


def test_set_values_are_yaml() -> None:
    assert parse_set("engine.port=8002") == (["engine", "port"], 8002)
    assert parse_set("engine.env.X='8002'") == (["engine", "env", "X"], "8002")
    assert parse_set("a=") == (["a"], "")


def test_user_recipes_override_bundled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    user = tmp_path / "rigctl" / "recipes"
    user.mkdir(parents=True)
    mine = base() | {"name": "mine"}
    (user / "mine.yaml").write_text(yaml.safe_dump(mine))
    (user / "glm53-flash.yaml").write_text(yaml.safe_dump(base() | {"description": "my copy"}))  # user wins
    assert load("mine").source.origin == "user"
    mine_too = load("glm53-flash")
    assert mine_too.source.origin == "user" and mine_too.recipe.description == "my copy"
    assert mine_too.source.overrides == bundled_recipes_dir() / "glm53-flash.yaml"
    names = {name: origin for name, _, origin in list_recipe_files()}
    assert names["mine"] == "user" and names["glm53-flash"] == "user"


def test_unknown_recipe_lists_where_it_looked() -> None:
    with pytest.raises(RecipeNotFoundError, match="no such recipe") as raised:
        load("does-not-exist")
    assert raised.value.fix is not None and "did you mean" not in raised.value.fix  # nothing close: no guess


def test_a_typo_is_answered_with_the_recipes_it_is_close_to() -> None:
    with pytest.raises(RecipeNotFoundError) as raised:
        load("glm53-flsh")
    fix = raised.value.fix or ""
    assert fix.startswith("did you mean glm53-flash") and "rigctl recipes" in fix


def test_recipe_round_trips_through_json() -> None:
    r = load("glm53-flash-k3-dflash2").recipe
    again = Recipe.model_validate_json(r.model_dump_json())
    assert again == r


def test_set_indexes_into_lists() -> None:
    r = load("glm53-flash", sets=["checkpoint.path=/data/glm", "container.volumes.0.host=/data/glm"]).recipe
    assert r.checkpoint_mount().host == "/data/glm"
    with pytest.raises(UsageError, match="not an index"):
        load("glm53-flash", sets=["container.volumes.5.host=/x"])


def test_env_values_from_set_become_text() -> None:
    r = load("glm53-flash", sets=["container.env.USE_REPLAYSSM=0", "engine.env.FLAG=true"]).recipe
    assert r.container.env["USE_REPLAYSSM"] == "0"
    assert r.engine.env["FLAG"] == "1"


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path: Path) -> None:
    text = (bundled_recipes_dir() / "glm53-flash.yaml").read_text()
    bad = tmp_path / "twice.yaml"
    bad.write_text(text.replace("context_length: 262144", "context_length: 262144\ncontext_length: 1024"))
    with pytest.raises(InvalidInputError) as info:
        validate_file(bad)
    (problem,) = info.value.problems
    assert "duplicate key 'context_length'" in problem and "first given on line" in problem
    nested = tmp_path / "nested.yaml"
    nested.write_text(text.replace("  count: 2\n", "  count: 2\n  count: 4\n", 1))
    with pytest.raises(InvalidInputError, match="duplicate key 'count'"):
        validate_file(nested)


def test_yaml_merge_keys_still_override(tmp_path: Path) -> None:
    data = read_yaml_mapping(bundled_recipes_dir() / "glm53-flash.yaml")
    merged = tmp_path / "merge.yaml"
    merged.write_text("base: &b {a: 1, b: 2}\nthing:\n  <<: *b\n  b: 3\n")
    assert read_yaml_mapping(merged)["thing"] == {"a": 1, "b": 3}
    assert data["name"] == "glm53-flash"


@pytest.mark.parametrize("path", ["/health", "/", "/v1/health.json", "/a-b_c", "//health", "//other/x", "health",
                                  "/he alth", "/health?x=1", "/h\r\n"])
def test_the_recipe_and_the_probe_take_the_same_health_paths(path: str) -> None:
    """One rule: a health path the recipe takes is one the probe sends. ``//health`` passed the recipe and was
    refused by the client on every poll, so `up` waited out the whole warmup budget for a model that was up."""
    from rigctl.errors import InvalidInputError, UsageError
    from rigctl.recipe.load import load
    from rigctl.verify.client import Endpoint

    try:
        load("qwen3-8b-vllm", sets=[f"engine.health_path={json.dumps(path)}"])
        recipe_takes = True
    except InvalidInputError:
        recipe_takes = False
    try:
        Endpoint("http://127.0.0.1:8000", "m", health_path=path)
        probe_takes = True
    except UsageError:
        probe_takes = False
    assert recipe_takes == probe_takes == (path in {"/health", "/", "/v1/health.json", "/a-b_c"})
