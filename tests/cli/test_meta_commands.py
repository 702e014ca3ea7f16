"""The conveniences of issue #15 as an operator types them, each in a real process, text and --json: --version
and `version` (with --host: both ends, a warning on skew; the fleet's `versions`), shell completion, the
examples in every --help, `schema recipe` (and docs/recipe.md made from it), `new`, `checks` and `explain`."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer.main
import yaml
from tests.fleet.conftest import sshd_hosts
from tools.gen_recipe_docs import COMMAND as DOCS_COMMAND
from tools.gen_recipe_docs import DOC, render

from rigctl.cli.examples import EXAMPLES
from rigctl.exitcodes import ExitCode
from rigctl.recipe.catalog import bundled_recipes_dir

pytestmark = pytest.mark.timeout(120)

VERSION_LINE = f"rigctl {importlib.metadata.version('rigctl')} (Python {platform.python_version()})\n"
SCRIPT = shutil.which("rigctl", path=os.path.dirname(sys.executable))  # the console script, as installed


def rigctl(*args: str, env: Mapping[str, str] | None = None, script: bool = False) -> subprocess.CompletedProcess[str]:
    """``python -m rigctl ARGS`` (or the console script), as an operator runs it."""
    head = [SCRIPT] if script and SCRIPT else [sys.executable, "-m", "rigctl"]
    done = subprocess.run([*head, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, check=False)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def as_json(done: subprocess.CompletedProcess[str], command: str, ok: bool) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(done.stdout)  # exactly one object, or this raises
    assert list(doc)[:3] == ["rigctl", "command", "ok"] and doc["command"] == command
    assert doc.get("version"), doc  # after the payload: the command's own keys follow the head
    assert doc["ok"] is ok, doc
    return doc


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose user recipe directory is the test's own."""
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state")}


# --- version ---------------------------------------------------------------------------------------------


def test_version_is_the_package_metadata_version() -> None:
    assert rigctl("--version", script=True).stdout == VERSION_LINE  # answered before typer loads
    assert rigctl("--version").stdout == VERSION_LINE  # through typer's --version
    assert rigctl("version").stdout == VERSION_LINE
    doc = as_json(rigctl("version", "--json"), "version", True)
    assert doc["version"] == importlib.metadata.version("rigctl") and doc["python"] == platform.python_version()


def test_every_json_document_says_which_rigctl_wrote_it() -> None:
    doc = as_json(rigctl("recipes", "--json"), "recipes", True)
    assert doc["version"] == importlib.metadata.version("rigctl")
    error = as_json(rigctl("show", "no-such-recipe", "--json"), "show", False)
    assert error["version"] == doc["version"] and error["error"]["code"] == "recipe-not-found"


OTHER_RIGCTL = """#!/bin/sh
# a rigctl of another version: answers any command with a passing envelope that says 0.0.9
printf '{"rigctl": "1", "command": "%s", "ok": true, "version": "0.0.9", "python": "3.9.2", "findings": []}\\n' "$1"
"""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path, dict[str, str]]]:
    """One real sshd host, and two hosts files for it: through this checkout's rigctl, and through a rigctl
    of another version. The environment gives ssh a short control-socket directory."""
    root = tmp_path_factory.mktemp("meta-fleet")
    other = root / "other-rigctl"
    other.write_text(OTHER_RIGCTL)
    other.chmod(0o755)
    run_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))
    with sshd_hosts.fleet_or_skip(root, 1) as fleet:
        same = fleet.inventory(include_down=False, rigctl=str(Path(sys.executable).with_name("rigctl")))
        older = fleet.inventory(include_down=False, rigctl=str(other))
        yield same, older, {"XDG_RUNTIME_DIR": str(run_dir)}
    shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.integration
def test_host_version_shows_both_ends_and_warns_on_skew(hosts: tuple[Path, Path, dict[str, str]]) -> None:
    same, older, env = hosts
    doc = as_json(rigctl("--hosts", str(same), "--host", "box00", "version", "--json", env=env), "version", True)
    assert doc["remote"]["version"] == doc["version"] and doc["skew"] is False and doc["host"] == "box00"
    text = rigctl("--hosts", str(same), "--host", "box00", "version", env=env)
    assert text.stdout.startswith(VERSION_LINE) and "box00: rigctl" in text.stdout and "WARN" not in text.stdout

    doc = as_json(rigctl("--hosts", str(older), "--host", "box00", "version", "--json", env=env), "version", True)
    assert doc["remote"] == {"version": "0.0.9", "python": "3.9.2"} and doc["skew"] is True
    text = rigctl("--hosts", str(older), "--host", "box00", "version", env=env)
    assert "box00: rigctl 0.0.9 (Python 3.9.2)" in text.stdout and "WARN version skew" in text.stdout


@pytest.mark.integration
def test_fleet_reads_each_remote_version_and_warns_on_skew(hosts: tuple[Path, Path, dict[str, str]]) -> None:
    same, older, env = hosts
    doc = as_json(rigctl("fleet", "preflight", "qwen3-8b-vllm", "--hosts", str(older), "--json", env=env),
                  "fleet preflight", True)
    (box,) = doc["hosts"]
    assert box["rigctl_version"] == "0.0.9" and doc["versions"] == {"local": doc["version"], "skew": ["box00"]}
    assert any(line.startswith("WARN version skew: rigctl 0.0.9 on box00") for line in box["summary"])
    text = rigctl("fleet", "preflight", "qwen3-8b-vllm", "--hosts", str(older), env=env)
    assert "WARN version skew: rigctl 0.0.9 on box00" in text.stdout

    done = rigctl("fleet", "preflight", "qwen3-8b-vllm", "--hosts", str(same), "--json", env=env)
    doc = json.loads(done.stdout)
    (box,) = doc["hosts"]
    assert box["rigctl_version"] == doc["version"] and doc["versions"]["skew"] == []
    assert not any("version skew" in line for line in box["summary"])


# --- completion and examples -----------------------------------------------------------------------------


def complete(words: str, env: Mapping[str, str]) -> list[str]:
    """What bash completion offers for the last of ``words`` (the script `--show-completion` installs asks
    rigctl exactly this way)."""
    assert SCRIPT is not None
    done = rigctl(env={**env, "_RIGCTL_COMPLETE": "complete_bash", "COMP_WORDS": words,
                       "COMP_CWORD": str(len(words.split()) - (0 if words.endswith(" ") else 1))}, script=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_recipe_names_complete(home: dict[str, str]) -> None:
    mine = Path(home["XDG_CONFIG_HOME"]) / "rigctl" / "recipes"
    mine.mkdir(parents=True)
    (mine / "glm-mine.yaml").write_text("name: glm-mine\n")
    (mine / "Not A Name.yaml").write_text("name: x\n")  # a file name the shell would split: not offered
    bundled = sorted(p.stem for p in bundled_recipes_dir().glob("glm*.yaml"))
    assert complete("rigctl show glm", home) == sorted([*bundled, "glm-mine"])
    assert complete("rigctl up qwen", home) == ["qwen3-8b-vllm"]
    assert complete("rigctl new x --from glm-m", home) == ["glm-mine"]
    assert "checks" in complete("rigctl che", home)


def test_completion_scripts_are_offered() -> None:
    done = rigctl("--show-completion", "bash", script=True)
    assert done.returncode == 0 and "_RIGCTL_COMPLETE=complete_bash" in done.stdout
    root_help = rigctl("--help", script=True, env={"COLUMNS": "120"})
    assert "--install-completion" in root_help.stdout and "--version" in root_help.stdout


def _commands() -> dict[str, Any]:
    """Every command as typed after `rigctl` (fleet's as `fleet status`), with its click command."""
    from rigctl.cli.app import app

    root = typer.main.get_command(app)
    found: dict[str, Any] = {}
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        found[name] = command
        for sub, inner in getattr(command, "commands", {}).items():
            found[f"{name} {sub}"] = inner
    return found


def test_every_command_has_examples_that_parse() -> None:
    commands = _commands()
    assert set(EXAMPLES) == set(commands), "every command, and only commands, has examples"
    for name, command in commands.items():
        assert command.epilog and command.epilog.startswith("Examples:"), name
        for line, _ in EXAMPLES[name]:
            words = shlex.split(line.split(" > ")[0])  # a shell redirection is not rigctl's
            while words[0].startswith("--host"):  # the root's options
                words = words[2:]
            assert " ".join(words[: len(name.split())]) == name, (name, line)
            if getattr(command, "commands", None):
                continue  # a group: its subcommands' examples are parsed on their own
            command.make_context(name, words[len(name.split()):])  # raises on an option it does not take


def test_help_ends_with_examples() -> None:
    done = rigctl("up", "--help")
    assert done.returncode == 0
    tail = done.stdout[done.stdout.index("Examples:"):]
    assert "rigctl up glm53-flash --dry-run" in tail and "# what it would check" in tail
    assert "rigctl fleet status --hosts hosts.yaml" in rigctl("fleet", "status", "--help").stdout


# --- schema and the docs made from it ----------------------------------------------------------------------


def test_schema_recipe_checks_what_rigctl_checks(tmp_path: Path) -> None:
    done = rigctl("schema", "recipe")
    assert done.returncode == 0
    schema = json.loads(done.stdout)
    jsonschema.Draft202012Validator.check_schema(schema)
    check = jsonschema.Draft202012Validator(schema)
    for path in bundled_recipes_dir().glob("*.yaml"):
        data = yaml.safe_load(path.read_text())
        assert not list(check.iter_errors(data)), path
        data["container"]["env"] = {"NUMERIC": 1}  # rigctl takes numbers in env; the schema must too
        data["gpus"]["select"] = list(range(data["gpus"]["count"]))
        assert not list(check.iter_errors(data)), path
        data["service"] = {"warmup_budgt_s": 10}
        assert list(check.iter_errors(data)), "an unknown key must fail in the editor too"
    out = tmp_path / "recipe.schema.json"
    written = rigctl("schema", "recipe", "--out", str(out))
    assert written.returncode == 0 and str(out) in written.stdout and json.loads(out.read_text()) == schema
    doc = as_json(rigctl("schema", "recipe", "--json"), "schema", True)
    assert doc["schema"] == schema and doc["name"] == "recipe" and doc["path"] is None


def test_schema_of_something_else_is_a_usage_error() -> None:
    done = rigctl("schema", "recipes")
    assert done.returncode == ExitCode.USAGE and "did you mean recipe?" in done.stderr
    doc = as_json(rigctl("schema", "recipes", "--json"), "schema", False)
    assert doc["error"]["code"] == "usage"


def test_the_recipe_reference_is_made_from_the_model() -> None:
    assert DOC.read_text(encoding="utf-8") == render(), f"docs/recipe.md is out of date; run `{DOCS_COMMAND}`"
    text = render()
    assert "| `warmup_budget_s` | whole number, >= 10, <= 86400 | `1800` | becomes TimeoutStartSec |" in text
    assert "At: `checkpoint.license`, `speculative.draft.license`." in text


# --- new ---------------------------------------------------------------------------------------------------


def test_new_writes_a_user_recipe_that_validate_and_show_find(home: dict[str, str]) -> None:
    done = rigctl("new", "my-glm", "--from", "glm53-flash", env=home)
    assert done.returncode == 0, done.stderr
    path = Path(home["XDG_CONFIG_HOME"]) / "rigctl" / "recipes" / "my-glm.yaml"
    text = path.read_text()
    assert text.startswith("# yaml-language-server: $schema=recipe.schema.json\n")
    assert yaml.safe_load(text)["name"] == "my-glm"
    assert "# GLM-5.3-Flash on two RTX PRO 6000" in text  # the source's comments come along
    schema = path.with_name("recipe.schema.json")
    assert json.loads(schema.read_text()) == json.loads(rigctl("schema", "recipe").stdout)
    assert f"wrote {path}" in done.stdout and "rigctl validate my-glm" in done.stdout
    assert rigctl("validate", "my-glm", env=home).returncode == 0
    shown = as_json(rigctl("show", "my-glm", "--json", env=home), "show", True)
    assert shown["source"]["origin"] == "user" and shown["recipe"]["name"] == "my-glm"

    path.write_text(text + "# edited\n")
    again = rigctl("new", "my-glm", "--from", "qwen3-8b-vllm", env=home)
    assert again.returncode == ExitCode.INVALID_INPUT and "does not overwrite" in again.stderr
    assert path.read_text() == text + "# edited\n"  # untouched


def test_new_json_out_and_refusals(home: dict[str, str], tmp_path: Path) -> None:
    out = tmp_path / "mine" / "1.0.yaml"
    out.parent.mkdir()
    doc = as_json(rigctl("new", "1.0", "--from", "qwen3-8b-vllm", "--out", str(out), "--json", env=home), "new", True)
    assert doc["path"] == str(out) and doc["schema"] == str(out.parent / "recipe.schema.json")
    assert yaml.safe_load(out.read_text())["name"] == "1.0"  # text, not the number 1.0
    assert as_json(rigctl("show", str(out), "--json"), "show", True)["recipe"]["name"] == "1.0"

    planted = tmp_path / "mine" / "linked.yaml"
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    planted.symlink_to(victim)
    refused = as_json(rigctl("new", "linked", "--from", "qwen3-8b-vllm", "--out", str(planted), "--json"), "new",
                      False)
    assert refused["error"]["code"] == "invalid-input" and victim.read_text() == "keep\n" and planted.is_symlink()

    bad = rigctl("new", "Bad Name", "--from", "qwen3-8b-vllm", env=home)
    assert bad.returncode == ExitCode.USAGE and "not a recipe or container name" in bad.stderr
    missing = rigctl("new", "x", "--from", "no-such-recipe", env=home)
    assert missing.returncode == ExitCode.INVALID_INPUT and "no such recipe" in missing.stderr



def test_a_typo_in_a_recipe_name_is_answered_with_the_close_ones(home: dict[str, str]) -> None:
    done = rigctl("up", "glm53-flsh", "--dry-run", env=home)
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "glm53-flsh: no such recipe" in done.stderr and "fix: did you mean glm53-flash" in done.stderr

def test_new_out_never_replaces_a_schema_file_it_was_not_asked_to_write(home: dict[str, str], tmp_path: Path) -> None:
    """--out DIR/FILE writes FILE; a DIR/recipe.schema.json that is not rigctl's schema is the user's, kept and
    said on stderr. Rigctl's own schema of another version is refreshed; a missing one is written."""
    ours = rigctl("schema", "recipe").stdout
    cases: dict[str, tuple[str | None, bool]] = {  # what sits there -> whether rigctl writes its schema
        "unrelated": ('{"type": "object", "description": "my own schema"}\n', False),
        "not-json": ("hand notes, not JSON\n", False),
        "deep": ("[" * 100_000 + "]" * 100_000, False),  # past the JSON parser's depth: still not ours
        "older": (json.dumps({**json.loads(ours), "properties": {}}) + "\n", True),
        "same": (ours, True),
        "absent": (None, True),
    }
    for case, (there, written) in cases.items():
        out = tmp_path / case / "mine.yaml"
        out.parent.mkdir()
        schema = out.parent / "recipe.schema.json"
        if there is not None:
            schema.write_text(there)
        done = rigctl("new", "mine", "--from", "qwen3-8b-vllm", "--out", str(out), "--json", env=home)
        doc = as_json(done, "new", True)
        assert yaml.safe_load(out.read_text())["name"] == "mine", case
        if written:
            assert schema.read_text() == ours and "left" not in done.stderr, case
        else:
            assert schema.read_text() == there, case  # byte for byte the user's
        assert doc["schema_written"] is written, case
        if not written:
            assert f"left {schema} alone" in done.stderr and "not a rigctl recipe schema" in done.stderr, case
            assert doc["schema_problem"], case
    linked = tmp_path / "linked"
    linked.mkdir()
    victim = tmp_path / "victim.json"
    victim.write_text("keep\n")
    (linked / "recipe.schema.json").symlink_to(victim)
    done = rigctl("new", "mine", "--from", "qwen3-8b-vllm", "--out", str(linked / "mine.yaml"), env=home)
    assert done.returncode == 0, done.stderr
    assert (linked / "recipe.schema.json").is_symlink() and victim.read_text() == "keep\n"
    assert "alone" in done.stderr and "schema " + str(linked) not in done.stdout


# --- checks and explain ----------------------------------------------------------------------------------------


def registry_ids() -> dict[str, set[str]]:
    from rigctl.doctor.rules import REGISTRY as DOCTOR
    from rigctl.preflight.registry import check_ids
    from rigctl.verify.checks import REGISTRY as VERIFY

    return {"preflight": set(check_ids()), "verify": set(VERIFY), "doctor": {r.id for r in DOCTOR}}


def test_checks_lists_every_registry() -> None:
    doc = as_json(rigctl("checks", "--json"), "checks", True)
    listed: dict[str, set[str]] = {}
    for check in doc["checks"]:
        assert set(check) == {"id", "kind", "summary", "about", "severity", "force", "fixes", "source", "table"}
        assert (check["table"] is not None) == (check["id"] == "known-bad"), check["id"]
        assert check["summary"], check
        listed.setdefault(check["kind"], set()).add(check["id"])
    assert listed == registry_ids()
    text = rigctl("checks")
    assert text.returncode == 0 and text.stdout.startswith("ID ")
    assert any(line.split()[:3] == ["license", "preflight", "no"] for line in text.stdout.splitlines())
    assert any(line.split()[:3] == ["gpu-p2p", "preflight", "yes"] for line in text.stdout.splitlines())
    doctor = as_json(rigctl("checks", "--kind", "doctor", "--json"), "checks", True)
    assert {c["id"] for c in doctor["checks"]} == registry_ids()["doctor"]
    assert rigctl("checks", "--kind", "docter").returncode == ExitCode.USAGE


def test_explain_says_what_a_check_guards_and_how_to_fix_it() -> None:
    text = rigctl("explain", "restart-not-always")
    assert text.returncode == 0
    assert "guards:  Restart= weaker than always" in text.stdout
    assert "set Restart=always (and RestartSec=10) in [Service]" in text.stdout
    assert "--force does not apply" in text.stdout
    doc = as_json(rigctl("explain", "shm", "--json"), "explain", True)
    (shm,) = doc["checks"]
    assert shm["kind"] == "preflight" and shm["force"] is True
    assert "set container.shm_size: 16g (or ipc: host, without shm_size)" in shm["fixes"]
    assert "`--force shm` turns its fail into a warning" in rigctl("explain", "shm").stdout
    license_ = as_json(rigctl("explain", "license", "--json"), "explain", True)["checks"][0]
    assert license_["force"] is False


def test_checks_and_explain_list_the_bundled_known_bad_rows() -> None:
    """#34: the known-bad table is data rigctl ships; before, `checks` and `explain known-bad` named none of
    its rows, and the check's "why" spoke of the recipe's rows alone."""
    shipped = yaml.safe_load((Path(__file__).resolve().parents[2] / "src" / "rigctl" / "preflight"
                              / "known_bad.yaml").read_text(encoding="utf-8"))["rows"]
    assert shipped
    for args in (("checks",), ("explain", "known-bad")):
        done = rigctl(*args, env={"COLUMNS": "200"})
        assert done.returncode == 0, done.stderr
        said = " ".join(done.stdout.split())  # explain wraps at 120 whatever COLUMNS says
        for row in shipped:
            assert f"- {row['id']} ({row.get('severity', 'fail')})" in said
            for text in (row["error"], row["fix"], row["source"], row["problem"]):
                assert " ".join(text.split()) in said, (args, text)
        assert "extended by a recipe's own known_issues.bad_combinations rows" in said
    (check,) = as_json(rigctl("explain", "known-bad", "--json"), "explain", True)["checks"]
    table = check["table"]
    assert [r["id"] for r in table["rows"]] == [r["id"] for r in shipped]
    for mine, theirs in zip(table["rows"], shipped, strict=True):
        assert {k: mine[k] for k in ("error", "fix", "source")} == {k: theirs[k] for k in ("error", "fix", "source")}
    assert "known_issues.bad_combinations" in table["extended_by"]
    assert "known_issues.bad_combinations" in check["about"] and "rigctl ships a table" in check["about"]
    assert shipped[0]["fix"] in check["fixes"]
    (custom,) = [r for r in table["rows"] if r["id"] == "vllm-custom-allreduce-sm12x-tp"]
    assert custom["when"] == "engine vllm; sm 12.0/12.1; TP >= 2; unless --disable-custom-all-reduce"
    assert "bundled row" not in rigctl("checks", "--kind", "doctor").stdout


def test_explain_an_unknown_id_names_the_close_ones() -> None:
    done = rigctl("explain", "gpu-p2")
    assert done.returncode == ExitCode.USAGE and "did you mean gpu-p2p" in done.stderr
    doc = as_json(rigctl("explain", "restart-always", "--json"), "explain", False)
    assert doc["error"]["code"] == "usage" and "restart-not-always" in doc["error"]["fix"]
