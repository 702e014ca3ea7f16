"""Recipes and templates ship inside the wheel, and an installed rigctl finds them from any folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest


@pytest.mark.slow
def test_wheel_carries_recipes_and_templates(tmp_path: Path, repo: Path) -> None:
    uv = shutil.which("uv")
    assert uv, "uv is the project's build tool; .ci/run installs it"
    subprocess.run([uv, "build", "--wheel", "--out-dir", str(tmp_path / "dist"), str(repo)],
                   check=True, capture_output=True, timeout=300)
    wheel = next((tmp_path / "dist").glob("rigctl-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for recipe in (repo / "recipes").glob("*.yaml"):
        assert f"rigctl/_data/recipes/{recipe.name}" in names
    for template in (repo / "templates").rglob("*"):
        if template.is_file():
            assert f"rigctl/_data/templates/{template.relative_to(repo / 'templates')}" in names

    # Unpacked like an install, run from elsewhere: the bundled recipes must come from the package.
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {**os.environ, "PYTHONPATH": str(site), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    done = subprocess.run([sys.executable, "-m", "rigctl", "recipes", "--json"], cwd=elsewhere, env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["searched"][0] == str(site / "rigctl" / "_data" / "recipes")
    assert {r["name"] for r in doc["recipes"]} >= {"glm53-flash", "glm53-flash-nvfp4"}
