"""Shared fixtures. Integration tests need the real testbed (.ci/testbed.sh); they skip without it
locally, and fail instead when RIGCTL_REQUIRE_TESTBED=1 (CI), so a missing install step cannot hide."""

from __future__ import annotations

import os
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


@pytest.fixture
def need() -> Callable[[bool, str], None]:
    """``need(available, why)``: skip (locally) or fail (CI) when a real component is missing."""
    return require_or_skip


@pytest.fixture
def repo() -> Path:
    return REPO
