"""`rigctl --version --json` (#35 item 6) answers as `rigctl version --json` does (before: a usage error,
exit 2, "No such option: --json"); plain --version keeps its one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _rigctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=60,
                          check=False)


@pytest.mark.parametrize("args", [("--version", "--json"), ("--json", "--version")])
def test_version_json_is_the_version_commands_json(args: tuple[str, ...]) -> None:
    done, same = _rigctl(*args), _rigctl("version", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout) == json.loads(same.stdout)
    assert json.loads(done.stdout)["ok"] is True


def test_plain_version_is_one_line() -> None:
    done = _rigctl("--version")
    assert done.returncode == 0 and done.stdout.startswith("rigctl ") and done.stdout.count("\n") == 1
