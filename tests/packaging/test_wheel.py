"""Recipes and templates ship inside the wheel, and an installed rigctl finds them from any folder; test and
maintainer code (the fake NVML, the quadlets/ regenerator) does not ship."""

from __future__ import annotations

import ast
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
    _assert_no_dev_code(zipfile.ZipFile(wheel))

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


DEV_MODULES = ("rigctl/host/nvml_fake.py", "rigctl/render/regen.py")  # moved to tests/support/ and tools/


def _assert_no_dev_code(wheel: zipfile.ZipFile) -> None:
    names = wheel.namelist()
    code = [n for n in names if n.endswith(".py")]
    assert "rigctl/host/nvml.py" in code and len(code) > 20  # the listing is the package's, not an empty one
    assert not [n for n in DEV_MODULES if n in names]
    assert not [n for n in names if n.startswith(("tests/", "tools/", "rigctl/tests/", "rigctl/tools/"))]
    assert not [n for n in code if "fake" in n.rsplit("/", 1)[-1]]
    for name in code:  # and nothing shipped reaches for them
        for node in ast.walk(ast.parse(wheel.read(name).decode("utf-8"), name)):
            modules = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            assert not [m for m in modules if m.split(".")[0] in ("tests", "tools") or "nvml_fake" in m
                        or m.endswith("render.regen")], f"{name} imports {modules}"
