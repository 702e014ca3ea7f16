"""A command loads what it needs when it needs it: the command's own module, not every command's; the root
help from the command table, without typer; `status` with nothing deployed without HTTP, templates or
recipes. What is loaded is asserted (sys.modules of a real process), never how long it took (benchmarks/
time it)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from rigctl.cli import app as app_module
from rigctl.cli.app import command_modules
from rigctl.cli.commands import MODULES
from rigctl.cli.roothelp import root_help


def typer_root_help() -> str:
    """What typer prints for `rigctl --help` at the widest layout, every command registered."""
    import typer.main

    group = typer.main.get_command(app_module.app)
    with group.make_context("rigctl", ["--help"], resilient_parsing=True, terminal_width=78) as ctx:
        return group.get_help(ctx) + "\n"


def test_the_root_help_from_the_table_is_what_typer_renders() -> None:
    assert root_help() == typer_root_help()


@pytest.mark.parametrize(("argv", "want"), [
    (["status", "--json"], ("cmd_deploy",)),
    (["--host", "box2", "preflight", "glm53-flash"], ("cmd_preflight",)),
    (["--hosts=h.yaml", "fleet", "status"], ("cmd_fleet",)),
    (["doctor", "--json"], ("cmd_doctor",)),
    (["schema", "recipe"], ("cmd_recipes",)),
    (["render", "--help"], ("cmd_render",)),
    ([], MODULES),
    (["--help"], MODULES),
    (["-h", "status"], MODULES),  # the root's help: it lists every command
    (["stauts"], MODULES),  # a typo: typer names the command it cannot find among all of them
])
def test_command_modules(argv: list[str], want: tuple[str, ...]) -> None:
    assert command_modules(argv) == want


def rigctl_exe() -> str:
    exe = shutil.which("rigctl", path=os.path.dirname(sys.executable))
    assert exe is not None, "the rigctl console script is installed beside this Python"
    return exe


def test_root_help_from_the_script_is_typers(tmp_path: Path) -> None:
    wide = {**os.environ, "COLUMNS": "120"}
    fast = subprocess.run([rigctl_exe(), "--help"], capture_output=True, text=True, env=wide, timeout=60, check=False)
    slow = subprocess.run([sys.executable, "-m", "rigctl", "--help"], capture_output=True, text=True, env=wide,
                          timeout=60, check=False)  # `python -m rigctl` always goes through typer
    assert fast.returncode == slow.returncode == 0
    assert fast.stdout == slow.stdout.replace("Usage: python -m rigctl", "Usage: rigctl")
    bare = subprocess.run([rigctl_exe()], capture_output=True, text=True, env=wide, timeout=60, check=False)
    assert bare.returncode == 2 and bare.stdout == "" and bare.stderr == root_help()  # as no_args_is_help does
    narrow = subprocess.run([rigctl_exe(), "--help"], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "60"}, timeout=60, check=False)
    assert narrow.returncode == 0 and "Commands:" in narrow.stdout
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 60  # typer wrapped it to the terminal


PROBE = """
import json, sys
sys.argv = ["rigctl", *sys.argv[1:]]
from rigctl.cli.app import main
try:
    main()
except SystemExit:
    pass
names = ("typer", "httpx", "jinja2", "rich", "pynvml", "rigctl.recipe.model", "rigctl.cli.cmd_fleet",
         "rigctl.cli.cmd_verify", "rigctl.verify")
sys.__stderr__.write("LOADED " + json.dumps([n for n in names if n in sys.modules]) + "\\n")
"""


def loaded(*argv: str, env: dict[str, str] | None = None) -> tuple[list[str], subprocess.CompletedProcess[str]]:
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "120", **(env or {})}, timeout=60, check=False)
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED "))
    modules: list[str] = json.loads(line.removeprefix("LOADED "))
    return modules, done


def test_status_with_nothing_deployed_loads_no_http_templates_or_recipes(tmp_path: Path) -> None:
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "XDG_RUNTIME_DIR": str(tmp_path / "run")}
    modules, done = loaded("status", "--json", env=env)
    assert json.loads(done.stdout)["services"] == []
    assert modules == ["typer"]


def test_a_command_loads_its_own_module_only() -> None:
    modules, done = loaded("recipes", "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["command"] == "recipes"
    assert "rigctl.cli.cmd_fleet" not in modules and "rigctl.cli.cmd_verify" not in modules


def test_the_root_help_loads_no_typer() -> None:
    modules, _ = loaded("--help")
    assert modules == []
