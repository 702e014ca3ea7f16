"""The one splitter of list options (``rigctl.util.lists.split_list``) and the commands that use it: each
rule once, then the same refusal from every command that takes a list."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from rigctl.cli.app import app
from rigctl.errors import UsageError
from rigctl.exitcodes import ExitCode
from rigctl.util.lists import split_list
from rigctl.verify.runner import parse_checks

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize(("values", "items"), [
    (None, ()),
    ("", ()),
    ("0", ("0",)),
    ("0,2", ("0", "2")),
    (" 2 , 0 ", ("2", "0")),  # blanks stripped, the order kept (it is the operator's, e.g. GPU order)
    ("a,,b,", ("a", "b")),  # empty items dropped
    (["a", "b,c"], ("a", "b", "c")),  # a repeated option and commas mix
    ([], ()),
])
def test_items_in_order_stripped_without_empties(values: str | list[str] | None, items: tuple[str, ...]) -> None:
    assert split_list(values, option="--x") == items


@pytest.mark.parametrize("values", ["0,0", " 0 ,0", ["a", "a"], ["a,b", "b"]])
def test_an_item_given_twice_is_refused_by_name(values: str | list[str]) -> None:
    with pytest.raises(UsageError) as refused:
        split_list(values, option="--gpus")
    assert refused.value.message.startswith("--gpus: ") and "given twice" in refused.value.message
    assert refused.value.exit_code == ExitCode.USAGE


def test_verify_checks_use_the_same_rule() -> None:
    assert parse_checks(" models , health,") == ("health", "models")  # canonical order, as before
    with pytest.raises(UsageError, match="--checks: 'smoke' is given twice"):
        parse_checks("smoke,smoke")
    with pytest.raises(UsageError, match="no check selected"):
        parse_checks(" , ")


@pytest.mark.parametrize("argv", [
    ["render", "glm53-flash", "--gpus", "0,0"],
    ["up", "glm53-flash", "--dry-run", "--force", "known-bad", "--force", "known-bad"],
    ["preflight", "glm53-flash", "--gpus", "1, 1"],
    ["verify", "--url", "http://127.0.0.1:9", "--model", "m", "--checks", "health,health"],
])
def test_every_command_refuses_a_repeated_item_the_same_way(argv: list[str]) -> None:
    """Refused before anything is gathered or asked: exit 2, one JSON error naming the option."""
    result = CliRunner().invoke(app, [*argv, "--json"])
    assert result.exit_code == ExitCode.USAGE, result.output
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "usage" and "is given twice" in error["message"], error
    assert error["message"].split(":")[0] in {"--gpus", "--force", "--checks"}
