"""Imports only go downward: a module may import its own package and the layers below it, never above.

The order is the README's: leaves (exit codes, invocation: whose environment this is, errors, util, severity and findings: the result vocabulary, the podman
version table, then places: scopes and directories), then recipe, host, preflight, render, verify, adapters
(the outside systems), deploy, doctor, fleet, and cli on top. Lazy imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "rigctl"
RANK = {
    "exitcodes": 0, "invocation": 0.5, "errors": 1, "util": 2, "severity": 2, "findings": 2.2, "podman_versions": 2, "places": 2.5,
    "recipe": 3, "host": 4, "preflight": 5, "render": 6, "verify": 7, "adapters": 7.5, "deploy": 8, "doctor": 9,
    "fleet": 10, "cli": 11,
}
LAYERS = list(RANK)


def rank(part: str) -> float:
    return RANK.get(part, -1)


def imported(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("rigctl."):
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("rigctl.")]
    return out


MODULES = sorted(p for p in SRC.rglob("*.py") if p.parent != SRC or p.stem in LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_imports_only_go_downward(path: Path) -> None:
    own = path.relative_to(SRC).parts[0].removesuffix(".py")
    assert own in LAYERS, f"{own}: place it in the layer list"
    wrong = [
        f"line {line}: {module}"
        for line, module in imported(ast.parse(path.read_text(encoding="utf-8")))
        if (part := module.split(".")[1]) != own and rank(part) >= rank(own)
    ]
    assert not wrong, f"{path.relative_to(SRC)} imports upward or sideways: {wrong}"


def test_every_layer_exists() -> None:
    for name in LAYERS:
        assert (SRC / name).is_dir() or (SRC / f"{name}.py").is_file(), name
