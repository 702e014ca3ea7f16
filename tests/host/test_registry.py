"""The image config from its registry (#34 item 1), against the loopback registry (tests.support.oci_registry):
the token flow, the index entry of this platform, the cache, and the ways a hostile registry breaks: a wrong
digest, a huge body, bad JSON, no answer, a redirect loop, plain http elsewhere. Never a remote registry."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.oci_registry import Registry, build, config_blob, serving

from rigctl.host.facts import HostFacts, PodmanFacts, RegistryImage
from rigctl.host.gather import facts_from_json, with_image_registry
from rigctl.host.registry import MANIFEST_LIMIT, ConfigCache, image_config, locate
from rigctl.recipe.load import load


@pytest.fixture
def reg() -> Iterator[Registry]:
    with serving() as state:
        yield state


@pytest.fixture
def cache(tmp_path: Path) -> ConfigCache:
    return ConfigCache(tmp_path / "cache" / "image-configs.json")


def ask(reg: Registry, cache: ConfigCache, pinned: str | None = None, **kw: Any) -> RegistryImage:
    return image_config(reg.ref(pinned), arch=kw.pop("arch", "amd64"), offline=False, cache=cache,
                        plain_http_loopback=kw.pop("plain_http_loopback", True), **kw)


def test_the_index_entry_of_this_platform_is_read_through_the_token_flow(reg: Registry, cache: ConfigCache) -> None:
    got = ask(reg, cache)
    assert got.error is None, got.error
    assert got.platform == "linux/amd64" and got.registry == reg.host and not got.cached
    assert got.env == ["CUDA_VERSION=13.1.0", "NV_CUDA_CUDART_VERSION=13.1.80-1", "NCCL_VERSION=2.26.2-1"]
    assert any(r.startswith("/token?") for r in reg.requests)  # 401, then a token, then the manifest again
    assert ask(reg, ConfigCache(cache.path.with_name("other.json")), arch="arm64").env == [
        "CUDA_VERSION=12.8.1", "NCCL_VERSION=2.27.3-1"]


def test_a_pin_of_the_manifest_itself_is_read(reg: Registry, cache: ConfigCache) -> None:
    amd = json.loads(reg.blobs[reg.index])["manifests"][1]["digest"]
    got = ask(reg, cache, amd)
    assert got.error is None and got.platform is None and got.env and "CUDA_VERSION=13.1.0" in got.env


def test_the_second_ask_is_answered_by_the_cache(reg: Registry, cache: ConfigCache) -> None:
    first = ask(reg, cache)
    asked = len(reg.requests)
    again = ask(reg, ConfigCache(cache.path))  # a later run: the file, not the object
    assert len(reg.requests) == asked and again.cached and again.env == first.env
    assert again.config_digest == first.config_digest


def test_offline_asks_nothing_and_says_so(reg: Registry, cache: ConfigCache) -> None:
    got = image_config(reg.ref(), arch="amd64", offline=True, cache=cache, plain_http_loopback=True)
    assert got.env is None and got.error and "offline" in got.error and reg.requests == []


def test_offline_from_the_environment(reg: Registry, cache: ConfigCache, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGCTL_OFFLINE", "1")
    got = image_config(reg.ref(), arch="amd64", cache=cache, plain_http_loopback=True)
    assert got.error and "RIGCTL_OFFLINE" in got.error and reg.requests == []


def test_a_config_that_does_not_match_its_digest_is_refused(reg: Registry, cache: ConfigCache) -> None:
    reg.tamper = config_blob(["CUDA_VERSION=12.0.0"], "amd64")
    got = ask(reg, cache)
    assert got.env is None and got.error and "config blob does not match its digest" in got.error
    assert ConfigCache(cache.path).get(reg.ref(), reg.index, "amd64") is None  # a failure is not remembered


def test_a_manifest_that_does_not_match_the_pin_is_refused(reg: Registry, cache: ConfigCache) -> None:
    wrong = "sha256:" + "ab" * 32
    reg.blobs[wrong] = reg.blobs[reg.index]  # the registry answers another document for the pinned digest
    got = ask(reg, cache, wrong)
    assert got.error and "manifest does not match its digest" in got.error


def test_a_huge_manifest_is_cut_off(reg: Registry, cache: ConfigCache) -> None:
    reg.huge = True
    got = ask(reg, cache)
    assert got.error and f"more than {MANIFEST_LIMIT} bytes" in got.error


def test_bad_json_is_a_finding_not_a_crash(cache: ConfigCache, reg: Registry) -> None:
    reg.blobs.clear()
    build(reg, config=b'{"config": {"Env": ["CUDA_VERSION=13.1.0"]')  # its digest is right, its JSON is not
    got = ask(reg, cache)
    assert got.env is None and got.error and "not JSON" in got.error


def test_no_answer_within_the_deadline(reg: Registry, cache: ConfigCache) -> None:
    reg.stall_s = 2.0
    started = time.monotonic()
    got = ask(reg, cache, timeout_s=0.5)
    assert time.monotonic() - started < 1.9
    assert got.error and ("0.5 s" in got.error or "deadline" in got.error)


def test_a_redirect_loop_ends(reg: Registry, cache: ConfigCache) -> None:
    reg.redirect_loop = True
    got = ask(reg, cache)
    assert got.error and "more than 3 redirects" in got.error


def test_a_redirect_to_plain_http_elsewhere_is_not_followed(reg: Registry, cache: ConfigCache) -> None:
    reg.redirect_to = "http://blobs.example.invalid/x"
    got = ask(reg, cache)
    assert got.error and "only https" in got.error
    assert not any("example" in r for r in reg.requests)


def test_plain_http_only_where_the_caller_allows_it(reg: Registry, cache: ConfigCache) -> None:
    """Without the tests' flag even a loopback registry is spoken to over https (here: no TLS, so no answer)."""
    got = ask(reg, cache, plain_http_loopback=False)
    assert got.env is None and got.error and reg.requests == []


def test_docker_hub_names() -> None:
    assert locate("vllm/vllm-openai") == ("registry-1.docker.io", "vllm/vllm-openai")
    assert locate("ubuntu") == ("registry-1.docker.io", "library/ubuntu")
    assert locate("docker.io/library/ubuntu") == ("registry-1.docker.io", "library/ubuntu")
    assert locate("docker.io/ubuntu") == ("registry-1.docker.io", "library/ubuntu")
    assert locate("nvcr.io/nvidia/pytorch") == ("nvcr.io", "nvidia/pytorch")
    assert locate("localhost/x") == ("localhost", "x")
    assert locate("127.0.0.1:5000/a/b") == ("127.0.0.1:5000", "a/b")


def test_a_damaged_cache_counts_as_absent(reg: Registry, cache: ConfigCache) -> None:
    cache.path.parent.mkdir(parents=True)
    cache.path.write_text(json.dumps({"version": 1, "configs": {f"{reg.index} amd64": {"env": "not a list"}}}))
    got = ask(reg, ConfigCache(cache.path))
    assert got.error is None and not got.cached


# --- the gathered facts --------------------------------------------------------------------------------------


def test_the_registry_is_asked_only_for_an_image_not_pulled() -> None:
    recipe = load("glm53-flash").recipe
    facts = HostFacts.model_validate({"gpu": {"available": False}})
    local = facts.model_copy(update={"podman": PodmanFacts(installed=True, images=[
        {"id": "a" * 64, "digest": recipe.image_digest, "env": []}])})  # type: ignore[list-item]
    assert with_image_registry(local, recipe, offline=False).image_registry is None
    offline = with_image_registry(facts, recipe, offline=True)
    assert offline.image_registry is not None and "offline" in (offline.image_registry.error or "")


def test_inventory_json_round_trips_the_registry_config(reg: Registry, cache: ConfigCache) -> None:
    found = ask(reg, cache)
    facts = HostFacts.model_validate({"gpu": {"available": False}}).model_copy(update={"image_registry": found})
    again = facts_from_json(json.loads(facts.model_dump_json()), "inventory.json")
    assert again.image_registry == found

