"""Regenerate kube/: the Kubernetes manifests (--target kube) and the podman kube play manifests with their
quadlet .kube unit (--target podman-kube) of every bundled recipe, for the documented default podman
(rigctl.render.versions.DEFAULT_PODMAN, system scope, GPU indices). tests/render/test_kube.py keeps the
directory in sync (no extra, missing or stale files), as tools/regen_quadlets.py does for quadlets/.

A maintainer's tool, not shipped in the wheel; it renders through the installed rigctl:

    uv run python tools/regen_kube.py            # rewrite kube/
    uv run python tools/regen_kube.py --check    # exit 1 and list differences instead
"""

from __future__ import annotations

import sys
from pathlib import Path

from rigctl.recipe.catalog import bundled_recipes_dir, recipe_files
from rigctl.recipe.load import load
from rigctl.render.kube import TARGETS, render_kube
from rigctl.render.units import UnitFile, write_files
from rigctl.render.versions import DEFAULT_PODMAN

KUBE_DIR = Path(__file__).resolve().parents[1] / "kube"
README = "README.md"
COMMAND = "uv run python tools/regen_kube.py"


def bundled_manifests() -> dict[str, UnitFile]:
    """name -> file, for every bundled recipe and both targets, rendered with the golden settings."""
    files: dict[str, UnitFile] = {}
    for _name, path in recipe_files(bundled_recipes_dir()):  # a user's override is not bundled
        recipe = load(str(path)).recipe
        for target in TARGETS:
            for file in render_kube(recipe, target=target, podman_version=DEFAULT_PODMAN).files:
                files[file.name] = file
    return files


def differences(directory: Path) -> list[str]:
    expected = bundled_manifests()
    present = {p.name for p in directory.iterdir() if p.is_file() and p.name != README} if directory.is_dir() else set()
    problems = [f"missing: {name}" for name in sorted(set(expected) - present)]
    problems += [f"extra: {name}" for name in sorted(present - set(expected))]
    problems += [
        f"stale: {name}" for name in sorted(present & set(expected))
        if (directory / name).read_text(encoding="utf-8") != expected[name].text
    ]
    return problems


def regenerate(directory: Path) -> list[str]:
    expected = bundled_manifests()
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.iterdir():
        if path.is_file() and path.name != README and path.name not in expected:
            path.unlink()
    return [str(p) for p in write_files(list(expected.values()), directory)]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        problems = differences(KUBE_DIR)
        for problem in problems:
            sys.stderr.write(f"kube/ {problem}\n")
        if problems:
            sys.stderr.write(f"run `{COMMAND}` and commit the result\n")
        return 1 if problems else 0
    for path in regenerate(KUBE_DIR):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
