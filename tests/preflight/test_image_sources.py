"""Where image-cuda and known-bad read what the image declares (#34 items 1 and 3): the local image's Env, else
its registry's config (read from the loopback registry of tests.support.oci_registry for an image not pulled),
else the recipe's image_declares; each finding names its source, and nothing known is a skip naming all three."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError
from tests.preflight.test_stack_checks import DISABLE, clean, finding, with_args
from tests.support.oci_registry import Registry, serving

from rigctl.host.facts import HostFacts
from rigctl.host.registry import ConfigCache, image_config
from rigctl.preflight.finding import Severity
from rigctl.recipe.model import ImageDeclares, Recipe


@pytest.fixture
def reg() -> Iterator[Registry]:
    with serving() as state:
        yield state


@pytest.fixture
def tp2(glm: Recipe) -> Recipe:
    return with_args(glm, DISABLE)


def not_pulled(recipe: Recipe, facts: HostFacts) -> HostFacts:
    """``facts`` of a box where the recipe's image is not among the local ones."""
    return facts.model_copy(update={"podman": facts.podman.model_copy(update={"images": []})})


def pinned_to(recipe: Recipe, reg: Registry, **update: object) -> Recipe:
    return recipe.model_copy(update={"image": reg.ref(), **update})


def from_registry(recipe: Recipe, reg: Registry, tmp_path: Path) -> HostFacts:
    found = image_config(recipe.image, arch="amd64", offline=False, cache=ConfigCache(tmp_path / "c.json"),
                         plain_http_loopback=True)
    assert found.error is None, found.error
    return not_pulled(recipe, clean(recipe)).model_copy(update={"image_registry": found})


def test_registry_config_of_an_image_not_pulled_is_judged(tp2: Recipe, reg: Registry, tmp_path: Path) -> None:
    recipe = pinned_to(tp2, reg)
    facts = from_registry(recipe, reg, tmp_path)
    s, msg, fix = finding(recipe, facts, "image-cuda")  # the registry's CUDA 13.1 against the driver's 13.0
    assert s is Severity.FAIL and "CUDA 13.1" in msg and "the registry's config" in msg and fix
    s, msg, _ = finding(recipe, facts, "known-bad")
    assert s is Severity.FAIL and "nccl-2.26.2-illegal-memory-access" in msg and "NCCL 2.26.2" in msg
    assert "the registry's config" in msg


def test_the_local_image_comes_before_the_registry(tp2: Recipe, reg: Registry, tmp_path: Path) -> None:
    recipe = pinned_to(tp2, reg)
    remote = from_registry(recipe, reg, tmp_path).image_registry
    local = clean(recipe)  # its image is the clean one (CUDA 12.8, NCCL 2.27.3) under the same digest
    image = local.podman.images[0].model_copy(update={"digest": recipe.image_digest})
    facts = local.model_copy(update={"image_registry": remote,
                                     "podman": local.podman.model_copy(update={"images": [image]})})
    s, msg, _ = finding(recipe, facts, "image-cuda")
    assert s is Severity.OK and "the local image's Env" in msg


def test_the_recipe_field_where_the_image_declares_nothing(tp2: Recipe) -> None:
    recipe = tp2.model_copy(update={"image_declares": ImageDeclares(cuda="13.1", nccl="2.26.2")})
    facts = clean(recipe, env=["PATH=/usr/bin"])
    s, msg, _ = finding(recipe, facts, "image-cuda")
    assert s is Severity.FAIL and "image_declares.cuda: 13.1" in msg and "the recipe's image_declares" in msg
    s, msg, _ = finding(recipe, facts, "known-bad")
    assert s is Severity.FAIL and "NCCL 2.26.2" in msg and "image_declares" in msg


def test_offline_and_nothing_declared_is_a_skip_naming_the_three_ways(tp2: Recipe, reg: Registry,
                                                                       tmp_path: Path) -> None:
    recipe = pinned_to(tp2, reg)
    offline = image_config(recipe.image, offline=True, cache=ConfigCache(tmp_path / "c.json"))
    facts = not_pulled(recipe, clean(recipe)).model_copy(update={"image_registry": offline})
    s, msg, _ = finding(recipe, facts, "image-cuda")
    assert s is Severity.SKIP and "not pulled here" in msg and "offline" in msg
    assert "pull the image" in msg and "RIGCTL_OFFLINE" in msg and "image_declares.cuda" in msg
    s, msg, _ = finding(recipe, facts, "known-bad")
    assert s is Severity.OK and "not judged: nccl-2.26.2-illegal-memory-access" in msg and "image_declares.nccl" in msg
    assert reg.requests == []


def test_a_refused_registry_falls_back_to_the_recipe(tp2: Recipe, reg: Registry, tmp_path: Path) -> None:
    reg.tamper = b"{}"
    recipe = pinned_to(tp2, reg, image_declares=ImageDeclares(cuda="12.8"))
    refused = image_config(recipe.image, arch="amd64", offline=False, cache=ConfigCache(tmp_path / "c.json"),
                           plain_http_loopback=True)
    facts = not_pulled(recipe, clean(recipe)).model_copy(update={"image_registry": refused})
    s, msg, _ = finding(recipe, facts, "image-cuda")
    assert s is Severity.OK and "the recipe's image_declares" in msg


def test_image_declares_is_strict(glm: Recipe) -> None:
    for bad in ({"cuda": "twelve"}, {"nccl": "2.26"}, {"cuda": "12.8", "rocm": "6.2"}):
        with pytest.raises(ValidationError):
            ImageDeclares.model_validate(bad)
    assert "image_declares" not in glm.model_dump(mode="json")  # unset: a recipe's digest stays as it was
