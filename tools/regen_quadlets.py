"""Regenerate quadlets/: the rendered units of every bundled recipe, for the documented default podman
(rigctl.render.versions.DEFAULT_PODMAN, system scope, GPU indices). tests/render/test_golden.py keeps
the directory in sync (no extra, missing or stale files).

A maintainer's tool, not shipped in the wheel; it renders through the installed rigctl:

    uv run python tools/regen_quadlets.py            # rewrite quadlets/
    uv run python tools/regen_quadlets.py --check    # exit 1 and list differences instead
"""

from __future__ import annotations

import sys
from pathlib import Path

from rigctl.places import Scope
from rigctl.recipe.catalog import bundled_recipes_dir, recipe_files
from rigctl.recipe.load import load
from rigctl.render.units import RenderedUnits, UnitFile, render_units, write_units
from rigctl.render.versions import DEFAULT_PODMAN

QUADLETS_DIR = Path(__file__).resolve().parents[1] / "quadlets"
README = "README.md"
COMMAND = "uv run python tools/regen_quadlets.py"


def bundled_units() -> dict[str, UnitFile]:
    """name -> file, for every bundled recipe, rendered with the golden settings."""
    units: dict[str, UnitFile] = {}
    for _name, path in recipe_files(bundled_recipes_dir()):  # a user's override is not bundled
        rendered = render_units(load(str(path)).recipe, podman_version=DEFAULT_PODMAN, scope=Scope.SYSTEM)
        for unit in rendered.files:
            units[unit.name] = unit
    return units


def differences(directory: Path) -> list[str]:
    expected = bundled_units()
    present = {p.name for p in directory.iterdir() if p.is_file() and p.name != README} if directory.is_dir() else set()
    problems = [f"missing: {name}" for name in sorted(set(expected) - present)]
    problems += [f"extra: {name}" for name in sorted(present - set(expected))]
    problems += [
        f"stale: {name}" for name in sorted(present & set(expected))
        if (directory / name).read_text(encoding="utf-8") != expected[name].text
    ]
    return problems


def regenerate(directory: Path) -> list[str]:
    expected = bundled_units()
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.iterdir():
        if path.is_file() and path.name != README and path.name not in expected:
            path.unlink()
    bundle = RenderedUnits("all", DEFAULT_PODMAN, DEFAULT_PODMAN, Scope.SYSTEM, list(expected.values()))
    return [str(p) for p in write_units(bundle, directory)]


def main(argv: list[str]) -> int:
    if argv[:1] == ["--check"]:
        problems = differences(QUADLETS_DIR)
        for problem in problems:
            sys.stderr.write(f"quadlets/ {problem}\n")
        if problems:
            sys.stderr.write(f"run `{COMMAND}` and commit the result\n")
        return 1 if problems else 0
    for path in regenerate(QUADLETS_DIR):
        sys.stdout.write(f"wrote {path}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
