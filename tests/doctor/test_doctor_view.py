"""`doctor`'s text and scope options (#35 item 6): its message and fix lines wrap at the width (COLUMNS),
a command in backticks never broken; `--fix` heads its output with the counts of the findings it lists and
says what is left after the fix at the end; `--user`/`--system` audit that scope's directories only."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rigctl.cli.app import app

UNITS = Path(__file__).parents[1] / "fleet" / "units"


def test_message_and_fix_lines_wrap_at_the_width(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    result = CliRunner().invoke(app, ["doctor", "--path", str(UNITS / "glm53-flash.container")])
    assert result.exit_code == 1, result.output
    # only a command in backticks longer than the room may stand on a line of its own past it
    too_long = [ln for ln in result.stdout.splitlines() if len(ln) > 60 and not ln.strip().startswith("`")]
    assert not too_long, result.stdout
    assert "fix: set Restart=always" in result.stdout  # still one `fix:` per finding, its rest indented under it


def test_fix_heads_with_the_findings_it_lists_and_ends_with_what_remains(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    units = tmp_path / "units"
    shutil.copytree(UNITS, units)
    result = CliRunner().invoke(app, ["doctor", "--path", str(units), "--fix"])
    assert result.exit_code == 1, result.output
    text = result.stdout
    listed = len(re.findall(r"^  FAIL ", text, flags=re.MULTILINE))
    head = re.search(r"(\d+) fail, (\d+) warn", text.splitlines()[0])
    assert head is not None and int(head.group(1)) == listed, text.splitlines()[0]
    last = text.rstrip().splitlines()[-1]
    assert last.startswith("after --fix: ") and re.search(r"\(\d+ fail, \d+ warn\)$", last), last
    assert text.index("after --fix:") > text.rindex("  FAIL ")


def _roots(args: list[str], home: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str]]:
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("XDG_DATA_HOME", raising=False)
    result = CliRunner().invoke(app, ["doctor", *args, "--json"])
    return result.exit_code, json.loads(result.stdout).get("roots", []) if result.stdout.strip() else []


def test_user_and_system_pick_that_scopes_directories(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, both = _roots([], tmp_path, monkeypatch)
    user_code, user = _roots(["--user"], tmp_path, monkeypatch)
    system_code, system = _roots(["--system"], tmp_path, monkeypatch)
    assert 2 not in (code, user_code, system_code)  # before: "No such option: --user", a usage error
    assert user and system and set(user) | set(system) == set(both) and not set(user) & set(system)
    assert any(r.startswith(str(tmp_path)) for r in user) and not any(r.startswith(str(tmp_path)) for r in system)


def test_a_scope_with_path_is_a_usage_error() -> None:
    result = CliRunner().invoke(app, ["doctor", "--user", "--path", str(UNITS), "--json"])
    assert result.exit_code == 2 and "--path" in json.loads(result.stdout)["error"]["message"]
