"""One atomic writer: every file rigctl writes goes through ``rigctl.util.safefs`` (a fresh O_EXCL|O_NOFOLLOW
temporary in the opened directory, renamed over the name), so no write follows a link planted at the name
and no reader sees half a file. This scans the source for any other way to write a file."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "rigctl"
WRITER = SRC / "util" / "safefs.py"
# Where opening a file for writing by hand is right, and why.
ALLOWED = {
    ("deploy/state.py", "os.open"): "the deployment lock: created without following a link, written in place under flock",
}
WRITE_METHODS = {"write_text", "write_bytes"}
MOVES = {("os", "replace"), ("os", "rename"), ("os", "renames"), ("shutil", "move"), ("shutil", "copy"),
         ("shutil", "copy2"), ("shutil", "copyfile"), ("shutil", "copytree")}
WRITE_FLAGS = {"O_CREAT", "O_WRONLY", "O_RDWR", "O_TRUNC", "O_APPEND"}


def _open_mode(call: ast.Call) -> str:
    mode = call.args[1] if len(call.args) > 1 else next((k.value for k in call.keywords if k.arg == "mode"), None)
    return mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"


def _reads_only(call: ast.Call) -> bool:
    """os.open whose flags, written out in the call, hold no flag that writes (flags in a variable: unknown)."""
    if len(call.args) < 2:
        return False
    flags = call.args[1]
    if any(isinstance(n, ast.Name) and n.id != "os" for n in ast.walk(flags)):
        return False
    return not WRITE_FLAGS & {n.attr for n in ast.walk(flags) if isinstance(n, ast.Attribute)}


def writes(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each call that writes a file other than through safefs."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in WRITE_METHODS:
            found.append((node.lineno, f".{func.attr}()"))
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            pair = (func.value.id, func.attr)
            if pair in MOVES or (func.value.id == "tempfile" and func.attr != "gettempdir"):
                found.append((node.lineno, f"{pair[0]}.{pair[1]}"))
            elif pair == ("os", "open") and not _reads_only(node):
                found.append((node.lineno, "os.open"))
        elif isinstance(func, ast.Name) and func.id == "open" and set(_open_mode(node)) & set("wax+"):
            found.append((node.lineno, f"open(mode={_open_mode(node)!r})"))
    return found


PROGRAMS = SRC / "host" / "programs"  # run elsewhere (an image, another Python), never imported by rigctl
MODULES = sorted(p for p in SRC.rglob("*.py") if p != WRITER and PROGRAMS not in p.parents)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_files_are_written_only_through_safefs(path: Path) -> None:
    rel = str(path.relative_to(SRC))
    wrong = [f"line {line}: {what}" for line, what in writes(ast.parse(path.read_text(encoding="utf-8")))
             if (rel, what) not in ALLOWED]
    assert not wrong, f"{rel} writes a file by hand (use rigctl.util.safefs): {wrong}"


def test_the_scan_sees_each_way_of_writing() -> None:
    """The scan must find what it looks for, or the test above passes for nothing."""
    source = """
import os, shutil, tempfile
p.write_text("x"); p.write_bytes(b"x"); os.replace(a, b); shutil.move(a, b); tempfile.mkstemp()
open(f, "w"); open(f, mode="a"); open(f, "r+"); os.open(f, os.O_WRONLY | os.O_CREAT); os.open(f, flags)
open(f); open(f, "rb"); os.open(f, os.O_RDONLY | os.O_CLOEXEC); tempfile.gettempdir()
"""
    assert [what for _, what in writes(ast.parse(source))] == [
        ".write_text()", ".write_bytes()", "os.replace", "shutil.move", "tempfile.mkstemp",
        "open(mode='w')", "open(mode='a')", "open(mode='r+')", "os.open", "os.open",
    ]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(SRC)))
def test_every_json_rigctl_writes_is_strict(path: Path) -> None:
    """NaN and Infinity are not JSON: every json.dumps of rigctl's refuses them (allow_nan=False), so a number
    from an engine or a remote host can never make rigctl's own output or state unreadable to another reader."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    loose = [node.lineno for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "dumps"
             and isinstance(node.func.value, ast.Name) and node.func.value.id == "json"
             and not any(k.arg == "allow_nan" for k in node.keywords)
             and not (node.args and isinstance(node.args[0], ast.Name) and node.args[0].id == "name")]
    assert not loose, f"{path.relative_to(SRC)}: json.dumps without allow_nan=False at line(s) {loose}"
