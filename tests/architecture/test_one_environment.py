"""One owner of "whose environment": only ``rigctl.invocation`` reads HOME, the XDG directories, TMPDIR or the
process's uids. Everything else asks ``rigctl.invocation.current()``, so that root with a user's environment
(sudo -E) is decided once, by one rule, for every file rigctl reads or writes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "rigctl"
OWNER = SRC / "invocation.py"
WATCHED = {"HOME", "TMPDIR"}
FORBIDDEN_CALLS = {("os", "geteuid"), ("os", "getuid"), ("Path", "home"), ("path", "expanduser"),
                   ("tempfile", "gettempdir"), ("os", "getenv")}


def _watched(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str) and (
        node.value in WATCHED or node.value.startswith("XDG_"))


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def reads(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            base = node.func.value
            name = base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else ""
            if (name, node.func.attr) in FORBIDDEN_CALLS:
                found.append(f"line {node.lineno}: {name}.{node.func.attr}()")
            if _is_environ(base) and node.func.attr in {"get", "pop", "setdefault"} and node.args \
                    and _watched(node.args[0]):
                found.append(f"line {node.lineno}: environ.{node.func.attr}({node.args[0].value!r})")  # type: ignore[attr-defined]
        elif isinstance(node, ast.Subscript) and _is_environ(node.value) and _watched(node.slice):
            found.append(f"line {node.lineno}: environ[{node.slice.value!r}]")  # type: ignore[attr-defined]
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In) for op in node.ops) and _watched(node.left) \
                and any(_is_environ(c) for c in node.comparators):
            found.append(f"line {node.lineno}: {node.left.value!r} in environ")  # type: ignore[attr-defined]
    return found


MODULES = sorted(p for p in SRC.rglob("*.py") if p != OWNER)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_only_the_invocation_reads_whose_environment(path: Path) -> None:
    found = reads(ast.parse(path.read_text(encoding="utf-8")))
    assert not found, f"{path.relative_to(SRC)} reads the environment's owner itself (ask rigctl.invocation): {found}"


def test_the_rule_sees_each_spelling() -> None:
    """The rule is not vacuous: each way of reading the environment is caught."""
    code = ("import os, tempfile\nfrom pathlib import Path\n"
            "os.environ.get('HOME'); os.environ['XDG_STATE_HOME']; 'XDG_RUNTIME_DIR' in os.environ\n"
            "os.geteuid(); os.getuid(); Path.home(); os.path.expanduser('~'); tempfile.gettempdir()\n")
    assert len(reads(ast.parse(code))) == 8
    assert reads(ast.parse(OWNER.read_text(encoding="utf-8")))  # the owner itself does read them


XDG_DEFAULTS = {".config", ".local", ".local/state", ".local/share", ".cache"}


def _spells_a_default(tree: ast.AST) -> list[str]:
    """String constants of an XDG default below a home (``.local/state``), in a path or a join."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip("/") in XDG_DEFAULTS:
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_only_the_invocation_knows_the_xdg_defaults(path: Path) -> None:
    """Where a variable that is unset points (``~/.local/state``) is said once, in ``invocation._DEFAULTS``: the
    directories of another environment (a user manager's) are asked of ``invocation.named_dir`` too."""
    found = _spells_a_default(ast.parse(path.read_text(encoding="utf-8")))
    assert not found, f"{path.relative_to(SRC)} spells an XDG default itself (ask rigctl.invocation): {found}"


def test_the_default_rule_sees_a_spelling() -> None:
    code = 'Path(h) / ".local" / "state"; os.path.join(h, ".config"); f"{h}/.local/share"'
    assert len(_spells_a_default(ast.parse(code))) == 3
    assert _spells_a_default(ast.parse(OWNER.read_text(encoding="utf-8")))
