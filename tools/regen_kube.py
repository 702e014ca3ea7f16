"""Regenerate kube/: the Kubernetes manifests (--target kube) and the podman kube play manifests with their
quadlet .kube unit (--target podman-kube) of every bundled recipe, for the documented default podman
(rigctl.podman_versions.DEFAULT_PODMAN, system scope, GPU indices). tests/render/test_kube.py keeps the
directory in sync (no extra, missing or stale files), as tools/regen_quadlets.py does for quadlets/.

A maintainer's tool, not shipped in the wheel; it renders through the installed rigctl:

    uv run python tools/regen_kube.py            # rewrite kube/
    uv run python tools/regen_kube.py --check    # exit 1 and list differences instead
"""

from __future__ import annotations

import sys
from pathlib import Path

from rigctl.podman_versions import DEFAULT_PODMAN
from rigctl.recipe.catalog import bundled_recipes_dir, recipe_files
from rigctl.recipe.load import load
from rigctl.render.kube import TARGETS, render_kube
from rigctl.render.units import RenderedFile

if not __package__:  # run as a file: the repo root makes `tools` importable, as it is for the tests
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools import goldens  # after the path is set

README, main = goldens.README, goldens.main
__all__ = ["README", "bundled_manifests", "differences"]

KUBE_DIR = Path(__file__).resolve().parents[1] / "kube"
COMMAND = "uv run python tools/regen_kube.py"


def bundled_manifests() -> dict[str, RenderedFile]:
    """name -> file, for every bundled recipe and both targets, rendered with the golden settings."""
    files: dict[str, RenderedFile] = {}
    for _name, path in recipe_files(bundled_recipes_dir()):  # a user's override is not bundled
        recipe = load(str(path)).recipe
        for target in TARGETS:
            for file in render_kube(recipe, target=target, podman_version=DEFAULT_PODMAN).files:
                files[file.name] = file
    return files


def differences(directory: Path) -> list[str]:
    return goldens.differences(directory, bundled_manifests())


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:], KUBE_DIR, bundled_manifests, COMMAND))
