"""Regenerate quadlets/: the rendered units of every bundled recipe, for the documented default podman
(rigctl.podman_versions.DEFAULT_PODMAN, system scope, GPU indices). tests/render/test_golden.py keeps
the directory in sync (no extra, missing or stale files).

A maintainer's tool, not shipped in the wheel; it renders through the installed rigctl:

    uv run python tools/regen_quadlets.py            # rewrite quadlets/
    uv run python tools/regen_quadlets.py --check    # exit 1 and list differences instead
"""

from __future__ import annotations

import sys
from pathlib import Path

from rigctl.places import Scope
from rigctl.podman_versions import DEFAULT_PODMAN
from rigctl.recipe.catalog import bundled_recipes_dir, recipe_files
from rigctl.recipe.load import load
from rigctl.render.units import RenderedFile, render_units

if not __package__:  # run as a file: the repo root makes `tools` importable, as it is for the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import goldens  # after the path is set

README, main = goldens.README, goldens.main
__all__ = ["README", "bundled_units", "differences"]

QUADLETS_DIR = Path(__file__).resolve().parents[1] / "quadlets"
COMMAND = "uv run python tools/regen_quadlets.py"


def bundled_units() -> dict[str, RenderedFile]:
    """name -> file, for every bundled recipe, rendered with the golden settings."""
    units: dict[str, RenderedFile] = {}
    for _name, path in recipe_files(bundled_recipes_dir()):  # a user's override is not bundled
        rendered = render_units(load(str(path)).recipe, podman_version=DEFAULT_PODMAN, scope=Scope.SYSTEM)
        for unit in rendered.files:
            units[unit.name] = unit
    return units


def differences(directory: Path) -> list[str]:
    return goldens.differences(directory, bundled_units())


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], QUADLETS_DIR, bundled_units, COMMAND))
