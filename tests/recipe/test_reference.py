"""One reading of an image reference (rigctl.recipe.reference) for everything that reads one: which engine an
image is named after (a registry with a port was read as its host name, so a unit of
``registry.local:5000/vllm/vllm-openai`` was not known as vLLM's), and the digest status and verify's export
show (``foo@sha256:abc``, not pinned, was shown as the digest ``sha256:abc``)."""

from __future__ import annotations

import pytest

from rigctl.host.serving import find_engine
from rigctl.recipe.reference import IMAGE_RE, digest_of, pinned, repository_of

DIGEST = "sha256:" + "0a51" * 16


@pytest.mark.parametrize(("image", "repository"), [
    (f"registry.local:5000/vllm/vllm-openai@{DIGEST}", "registry.local:5000/vllm/vllm-openai"),
    (f"registry.local:5000/vllm/vllm-openai:v0.9@{DIGEST}", "registry.local:5000/vllm/vllm-openai"),
    ("docker.io/vllm/vllm-openai:latest", "docker.io/vllm/vllm-openai"),
    ("localhost:5000/lmsysorg/sglang", "localhost:5000/lmsysorg/sglang"),
    ("ghcr.io/theroyallab/tabbyapi", "ghcr.io/theroyallab/tabbyapi"),
])
def test_the_repository_keeps_a_registry_port(image: str, repository: str) -> None:
    assert repository_of(image) == repository
    match = IMAGE_RE.fullmatch(image)
    if match is not None:  # a pinned reference: the recipe model's own reading agrees
        assert match.group("name") == repository


def test_an_image_on_a_registry_with_a_port_names_its_engine() -> None:
    assert find_engine([], f"registry.local:5000/vllm/vllm-openai@{DIGEST}") == "vllm"


@pytest.mark.parametrize(("image", "digest"), [
    (f"docker.io/vllm/vllm-openai@{DIGEST}", DIGEST),
    (f"docker.io/vllm/vllm-openai:v1@{DIGEST}", DIGEST),
    ("docker.io/vllm/vllm-openai@sha256:abc", None),  # half a digest names nothing
    ("docker.io/vllm/vllm-openai:latest", None),
])
def test_a_digest_is_read_only_from_a_pinned_reference(image: str, digest: str | None) -> None:
    assert digest_of(image) == digest
    assert pinned(image) == (digest is not None)
