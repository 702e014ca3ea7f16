"""quadlets/ holds exactly the rendered units of every bundled recipe (regenerate with
`uv run python -m rigctl.render.regen`)."""

from __future__ import annotations

from pathlib import Path

from rigctl.recipe.catalog import bundled_recipes_dir
from rigctl.render.regen import README, bundled_units, differences


def test_quadlets_dir_matches_bundled_recipes(repo: Path) -> None:
    problems = differences(repo / "quadlets")
    assert problems == [], "quadlets/ is out of sync; run `uv run python -m rigctl.render.regen`: " + "; ".join(
        problems
    )


def test_every_bundled_recipe_has_a_unit(repo: Path) -> None:
    recipes = sorted(p.stem for p in bundled_recipes_dir().glob("*.yaml"))
    assert recipes, "no bundled recipes found"
    units = bundled_units()
    assert sorted(units) == sorted(f"rigctl-{name}.container" for name in recipes)
    on_disk = sorted(p.name for p in (repo / "quadlets").iterdir() if p.name != README)
    assert on_disk == sorted(units)


def test_rendering_is_deterministic() -> None:
    assert {n: u.text for n, u in bundled_units().items()} == {n: u.text for n, u in bundled_units().items()}
