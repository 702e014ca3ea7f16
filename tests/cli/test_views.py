"""Every text view is in ``rigctl.cli.views`` (issue #11): the command modules parse options, call the core and
hand over an Outcome; none of them draws. One style map covers every severity."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest

from rigctl.cli import views
from rigctl.cli.views.draw import STYLE
from rigctl.severity import Severity

pytestmark = pytest.mark.timeout(30)

CLI = Path(views.__file__).resolve().parents[1]
COMMANDS = sorted(CLI.glob("cmd_*.py"))
DRAWING = {"write", "writelines", "print", "print_json", "add_row", "add_column"}


def _problems(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and (
                node.name.lstrip("_") == "view" or node.name.endswith(("_view", "View", "Display", "Progress"))):
            found.append(f"line {node.lineno}: defines {node.name}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DRAWING:
            found.append(f"line {node.lineno}: draws with .{node.func.attr}()")
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "rich":
            found.append(f"line {node.lineno}: imports {node.module}")
        elif isinstance(node, ast.Name) and node.id == "_STYLE":
            found.append(f"line {node.lineno}: a style map of its own")
    return found


def test_there_are_command_modules_to_check() -> None:
    assert len(COMMANDS) >= 5, COMMANDS


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: p.name)
def test_a_command_module_draws_nothing_itself(path: Path) -> None:
    assert not _problems(path), f"{path.name}: move its drawing into rigctl.cli.views: {_problems(path)}"


def test_the_check_finds_a_view_left_in_a_command_module(tmp_path: Path) -> None:
    leftover = tmp_path / "cmd_x.py"
    leftover.write_text("def produce():\n    def view(out):\n        out.write('x')\n    return view\n")
    assert len(_problems(leftover)) == 2


def test_every_view_is_used_by_a_command() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in COMMANDS)
    helpers = {"View", "progress", "log_lines", "inventory_lines"}
    unused = [name for name in views.__all__ if name not in helpers and f"views.{name}(" not in text]
    assert not unused, f"views no command hands to finish: {unused}"


def test_one_style_for_every_severity() -> None:
    assert set(STYLE) == set(Severity)


def test_a_piped_table_is_plain_and_a_styled_cell_keeps_its_text(monkeypatch: pytest.MonkeyPatch) -> None:
    from rigctl.cli.views.draw import table

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    out = io.StringIO()
    table(out, ("check", "result"), [["port", ("fail", Severity.FAIL)], ["disk", ("ok", Severity.OK)]], title="t")
    lines = out.getvalue().splitlines()
    assert lines[0] == "t" and lines[1].split() == ["check", "result"]
    assert [line.split() for line in lines[3:]] == [["port", "fail"], ["disk", "ok"]]
    assert "\x1b" not in out.getvalue()
