"""Every bundled recipe's unit, for every podman version rigctl supports, through the real quadlet
generator (system and user) and systemd-analyze verify; the podman flags of the unit rendered for the
testbed's podman (4.3 or 5.4) against that real podman."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from tests.conftest import podman_flavour
from tools.regen_quadlets import bundled_units

from rigctl.recipe.load import load
from rigctl.render.units import render_units
from rigctl.util.proc import run

BUNDLED = sorted(name.removeprefix("rigctl-").removesuffix(".container") for name in bundled_units())
# (podman, quadlet): 4.3 has no quadlet of its own, so it is driven by trixie's 5.4 binary.
TARGETS = [((4, 3), (5, 4)), ((4, 4), None), ((4, 6), None), ((4, 7), None), ((5, 0), None), ((5, 4), None)]


def _target_id(target: tuple[tuple[int, int], tuple[int, int] | None]) -> str:
    podman, quadlet = target
    return f"podman{podman[0]}.{podman[1]}" + (f"-quadlet{quadlet[0]}.{quadlet[1]}" if quadlet else "")


@pytest.mark.integration
@pytest.mark.parametrize("scope", ["system", "user"])
@pytest.mark.parametrize("target", TARGETS, ids=_target_id)
@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_unit_passes_quadlet_and_systemd(
    name: str,
    *,
    target: tuple[tuple[int, int], tuple[int, int] | None],
    scope: str,
    tmp_path: Path,
    generate: Callable[..., Any],
    verify: Callable[[Path, bool, Path], str],
    exec_argv: Callable[[str], list[str]],
) -> None:
    podman, quadlet = target
    user = scope == "user"
    rendered = render_units(load(name).recipe, podman_version=podman, quadlet_version=quadlet,
                            scope="user" if user else "system")
    generated = generate(rendered, tmp_path, user)
    service_text: str = generated.service_text
    assert re.search(r"^Restart=always$", service_text, re.M)
    assert re.search(r"^Type=notify$", service_text, re.M)
    argv = exec_argv(generated.exec_start())
    assert argv[:2] == ["/usr/bin/podman", "run"]
    assert not ("--ipc=host" in argv and any(a.startswith("--shm-size") for a in argv))
    complaints = verify(generated.service_path, user, tmp_path / "runtime")
    assert complaints == ""


@pytest.mark.integration
@pytest.mark.parametrize("name", BUNDLED)
def test_the_installed_podman_accepts_every_flag(
    name: str,
    tmp_path: Path,
    generate: Callable[..., Any],
    exec_argv: Callable[[str], list[str]],
) -> None:
    """The unit rendered for the testbed's podman (quadlet 5.4 generating it) only uses `podman run` flags
    that the installed podman knows: podman 4.3 rejects --sdnotify=healthy, so its unit has conmon's
    notification; podman 5.4's waits for the health check (Notify=healthy)."""
    podman = podman_flavour()
    help_text = run(["podman", "run", "--help"], timeout=30).stdout
    known = set(re.findall(r"(?:^|\s)(--[a-z][a-z0-9-]*)", help_text))
    rendered = render_units(load(name).recipe, podman_version=podman, quadlet_version=(5, 4))
    argv = exec_argv(generate(rendered, tmp_path, False).exec_start())
    image_at = next(i for i, a in enumerate(argv) if "@sha256:" in a)
    flags = {a.split("=", 1)[0] for a in argv[2:image_at] if a.startswith("--")}
    assert flags - known == set()
    sdnotify = "--sdnotify=conmon" if podman < (5, 0) else "--sdnotify=healthy"
    assert [a for a in argv if a.startswith("--sdnotify")] == [sdnotify]
