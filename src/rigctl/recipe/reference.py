"""Container image references: the one reading of NAME[:TAG]@sha256:DIGEST for the recipe's image, the
unit files doctor audits, status, verify's export and which engine an image is named after. A leaf (no
pydantic): status and doctor read references without loading the recipe model."""

from __future__ import annotations

import re

_NAME_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*(?::[0-9]+)?/)?"
IMAGE_RE = re.compile(
    rf"(?P<name>{_DOMAIN}{_NAME_COMPONENT}(?:/{_NAME_COMPONENT})*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?"
    r"@(?P<digest>sha256:[0-9a-f]{64})"
)

_PINNED = re.compile(r"@(sha256:[0-9a-f]{64})$")


def pinned(image: str) -> bool:
    """Whether an image reference names its content (``@sha256:`` and 64 hex digits at its end): the one rule
    for the recipe's image, doctor's image-pinned rule and which images doctor looks a digest up for."""
    return _PINNED.search(image) is not None


def digest_of(image: str) -> str | None:
    """The content digest a pinned reference names (``sha256:...``); None for one that is not ``pinned``
    (a half digest names nothing)."""
    found = _PINNED.search(image)
    return found.group(1) if found else None


def repository_of(image: str) -> str:
    """The repository a reference names, without its tag and digest; a registry's port is kept
    (``registry.local:5000/vllm/vllm-openai``)."""
    name = image.split("@", 1)[0]
    head, slash, last = name.rpartition("/")
    return f"{head}{slash}{last.split(':', 1)[0]}"
