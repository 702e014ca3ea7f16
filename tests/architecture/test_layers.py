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
    "exitcodes": 0, "invocation": 0.5, "errors": 1, "util": 2, "severity": 2, "findings": 2.2, "podman_versions": 2, "podman_args": 2, "places": 2.5,
    "recipe": 3, "host": 4, "preflight": 5, "render": 6, "plan": 6.5, "verify": 7, "adapters": 7.5, "deploy": 8, "doctor": 9,
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


# --- the planner's rooms: render turns values into files, preflight judges facts; neither runs a program ---

RUNS_PROGRAMS = ("subprocess", "rigctl.util.proc", "rigctl.host.probes", "rigctl.host.gather", "rigctl.host.early",
                 "rigctl.host.quadlet", "rigctl.host.nvml", "rigctl.plan")


def runtime_imports(tree: ast.Module) -> list[tuple[int, str]]:
    """Every import of ``tree`` but those under ``if TYPE_CHECKING:`` (types only: nothing runs)."""
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            guarded |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    out = []
    for node in ast.walk(tree):
        if id(node) in guarded:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


PURE = sorted(p for room in ("render", "preflight") for p in (SRC / room).rglob("*.py"))


@pytest.mark.parametrize("path", PURE, ids=lambda p: str(p.relative_to(SRC)))
def test_render_and_preflight_run_no_program(path: Path) -> None:
    """render is recipe + target in, files out; preflight is checks over facts. What gathers facts or runs
    a program (podman, quadlet, NCCL) lives in host/ and is driven by plan/."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wrong = [f"line {line}: {module}" for line, module in runtime_imports(tree)
             if any(module == m or module.startswith(m + ".") for m in RUNS_PROGRAMS)]
    assert not wrong, f"{path.relative_to(SRC)} imports what runs programs: {wrong}"
    assert "print(" not in path.read_text(encoding="utf-8") or path.name == "__init__.py", \
        f"{path.relative_to(SRC)} prints: the core returns values, the views print them"


RENDER_READS = ("rigctl.render", "rigctl.recipe", "rigctl.podman_versions", "rigctl.podman_args", "rigctl.places",
                "rigctl.util", "rigctl.errors", "rigctl.exitcodes", "rigctl.findings", "rigctl.severity")


@pytest.mark.parametrize("path", sorted((SRC / "render").rglob("*.py")), ids=lambda p: str(p.relative_to(SRC)))
def test_render_takes_values_only(path: Path) -> None:
    """The renderer's inputs are the recipe and the target's versions: no facts of a box (host), no judging of
    them (preflight: its warnings are said by preflight, or by the render command), no plan."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    wrong = [f"line {line}: {module}" for line, module in runtime_imports(tree) if module.startswith("rigctl")
             and not any(module == m or module.startswith(m + ".") for m in RENDER_READS)]
    assert not wrong, f"{path.relative_to(SRC)} reads beyond recipe and target: {wrong}"


def test_the_purity_rule_sees_a_program() -> None:
    code = "import subprocess\nfrom rigctl.util.proc import run\nif TYPE_CHECKING:\n    from rigctl.util.proc import Completed\n"
    assert [m for _, m in runtime_imports(ast.parse(code))] == ["subprocess", "rigctl.util.proc"]


def test_one_http_client_to_the_engine() -> None:
    """Only verify's client speaks HTTP (httpx) to the engine: deploy's readiness probe goes through it, so the
    engine's answers have one bounded reader, one Content-Encoding rule and one reading of /v1/models. The one
    other user is host.registry, which reads an image's config from its registry (never an engine)."""
    users = sorted(str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                   if any(m == "httpx" or m.startswith("httpx.") for _, m in runtime_imports(ast.parse(p.read_text()))))
    assert users == ["host/registry.py", "verify/client.py"], users
