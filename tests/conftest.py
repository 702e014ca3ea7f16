"""Shared fixtures. Integration tests need the real testbed (.ci/testbed.sh); they skip without it
locally, and fail instead when RIGCTL_REQUIRE_TESTBED=1 (CI), so a missing install step cannot hide."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def require_or_skip(available: bool, why: str) -> None:
    """Skip locally when a real component is missing; in CI (RIGCTL_REQUIRE_TESTBED=1) fail instead."""
    if available:
        return
    if os.environ.get("RIGCTL_REQUIRE_TESTBED") == "1":
        pytest.fail(f"testbed component missing in CI: {why}")
    pytest.skip(why)


# What each testbed flavour (RIGCTL_TESTBED_FLAVOUR in its env file) runs: Debian 12's podman 4.3, or podman
# 5.4 (Debian 13's own, or the trixie root's on Debian 12).
FLAVOURS = {"podman4": (4, 3), "podman5": (5, 4)}


def podman_flavour() -> tuple[int, int]:
    """The podman of the testbed flavour in use, as (major, minor): (4, 3) or (5, 4). It is the installed
    podman's own ``--version``; no podman (or an unknown one) skips locally and fails in CI, and a podman
    that is not the one the testbed's RIGCTL_TESTBED_FLAVOUR names fails everywhere. Tests whose expectations
    depend on the version assert those of the flavour found, so neither flavour is skipped."""
    found = shutil.which("podman") and subprocess.run(["podman", "--version"], capture_output=True, text=True,
                                                      timeout=30, check=False).stdout
    match = re.search(r"\bversion (\d+)\.(\d+)\.", found or "")
    version = (int(match[1]), int(match[2])) if match else None
    require_or_skip(version in FLAVOURS.values(), f"the testbed's podman, 4.3 or 5.4 (found {found!r})")
    assert version is not None
    named = os.environ.get("RIGCTL_TESTBED_FLAVOUR")
    if named is not None:
        assert FLAVOURS.get(named) == version, f"the testbed says {named}, but podman says {found!r}"
    return version


@pytest.fixture(autouse=True)
def _no_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test asks a real registry for an image's config (host.registry): a preflight of an image not pulled
    here is offline unless the test passes its own loopback registry."""
    monkeypatch.setenv("RIGCTL_OFFLINE", "1")


@pytest.fixture
def need() -> Callable[[bool, str], None]:
    """``need(available, why)``: skip (locally) or fail (CI) when a real component is missing."""
    return require_or_skip


@pytest.fixture
def repo() -> Path:
    return REPO
