"""quadlets/ holds exactly the rendered units of every bundled recipe (regenerate with
`uv run python tools/regen_quadlets.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tools.regen_quadlets import README, bundled_units, differences

from rigctl.recipe.catalog import bundled_recipes_dir


def test_quadlets_dir_matches_bundled_recipes(repo: Path) -> None:
    problems = differences(repo / "quadlets")
    assert problems == [], "quadlets/ is out of sync; run `uv run python tools/regen_quadlets.py`: " + "; ".join(
        problems
    )


def test_every_bundled_recipe_has_a_unit(repo: Path) -> None:
    recipes = sorted(p.stem for p in bundled_recipes_dir().glob("*.yaml"))
    assert recipes, "no bundled recipes found"
    units = bundled_units()
    assert sorted(units) == sorted(f"rigctl-{name}.container" for name in recipes)
    on_disk = sorted(p.name for p in (repo / "quadlets").iterdir() if p.name != README)
    assert on_disk == sorted(units)


# Each process renders every bundled recipe and prints the units in the order rendered, name and text.
RENDER_ALL = """
import json, sys
from tools.regen_quadlets import bundled_units
sys.stdout.write(json.dumps([[name, unit.text] for name, unit in bundled_units().items()]))
"""


def _rendered_by_a_process(repo: Path, hash_seed: str) -> bytes:
    done = subprocess.run([sys.executable, "-c", RENDER_ALL], cwd=repo, capture_output=True, timeout=120,
                          env={**os.environ, "PYTHONHASHSEED": hash_seed}, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    return done.stdout


def test_rendering_is_deterministic(repo: Path) -> None:
    assert {n: u.text for n, u in bundled_units().items()} == {n: u.text for n, u in bundled_units().items()}
    # Within one process set and dict orders repeat; across processes with other hash seeds they need not.
    first, second = (_rendered_by_a_process(repo, seed) for seed in ("1", "2"))
    assert len(json.loads(first)) == len(bundled_units()) > 0
    assert first == second, "two processes rendered different bytes: rendering depends on hash order"
