"""Recipe (and hosts file) errors in an operator's words (issue #15): no pydantic internals, the nearest
known key for a typo, and the line of the file every problem comes from. Run as an operator types it,
`rigctl validate FILE` and `rigctl show NAME --set/-f ...`, in a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigctl.exitcodes import ExitCode
from rigctl.recipe.catalog import bundled_recipes_dir

pytestmark = pytest.mark.timeout(120)

GLM = (bundled_recipes_dir() / "glm53-flash.yaml").read_text(encoding="utf-8")
# what pydantic says to a Python programmer, which an operator must never have to read
PYDANTIC_WORDS = ("instance of", "dictionary", "Extra inputs", "Value error", "Input tag", "discriminator",
                  "Unable to extract tag", "unable to parse", "unable to interpret", "List should have",
                  "Service", "GpuLayout", "SpecDraft", "DraftModel", "Volume")


def rigctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})}, check=False)


def validate(tmp_path: Path, text: str) -> list[str]:
    """`rigctl validate FILE --json` of ``text``: its problems (it must be refused, exit 3)."""
    path = tmp_path / "r.yaml"
    path.write_text(text, encoding="utf-8")
    done = rigctl("validate", str(path), "--json")
    assert done.returncode == ExitCode.INVALID_INPUT, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    (result,) = json.loads(done.stdout)["files"]
    problems: list[str] = result["problems"]
    assert problems and all(p.startswith(f"{path}: ") for p in problems), problems
    return problems


def line_of(text: str, needle: str) -> int:
    """The 1-based line of the first line of ``text`` that starts with ``needle``."""
    return next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith(needle))


def with_lines(text: str, replace: dict[str, str]) -> str:
    for old, new in replace.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def test_an_unknown_key_gets_the_nearest_known_one_and_its_line(tmp_path: Path) -> None:
    text = with_lines(GLM, {"\nservice:\n": "\nservice:\n  warmup_budgt_s: 900\n"})
    (problem,) = validate(tmp_path, text)
    assert problem.endswith(f"service.warmup_budgt_s: unknown key; did you mean `warmup_budget_s`? "
                            f"(line {line_of(text, '  warmup_budgt_s:')})")


def test_a_key_with_no_near_miss_lists_the_keys_of_its_level(tmp_path: Path) -> None:
    text = with_lines(GLM, {"\nservice:\n": "\nservice:\n  colour: red\n"})
    (problem,) = validate(tmp_path, text)
    assert "service.colour: unknown key (this level takes: restart, restart_sec, warmup_budget_s" in problem


def test_a_scalar_where_a_mapping_belongs_is_said_in_yaml_words(tmp_path: Path) -> None:
    text = GLM.replace("\nservice:\n", "\nservice: 5\nold_service:\n", 1)
    problems = validate(tmp_path, text)
    assert any(p.endswith(f"service: expected a mapping (service settings), not the number 5 "
                          f"(line {line_of(text, 'service: 5')})") for p in problems), problems
    assert any("old_service: unknown key; did you mean `service`?" in p for p in problems), problems
    assert not any(word in p for p in problems for word in PYDANTIC_WORDS), problems


@pytest.mark.parametrize(("change", "where", "says", "at"), [
    (("  ipc: host ", "  ipc: hots "), "container.ipc",
     "expected 'private', 'shareable' or 'host', not the text 'hots'; did you mean `host`?", "  ipc: hots"),
    (("  kind: vllm\n", "  kind: vlm\n"), "engine.kind",
     "expected 'vllm', 'tabbyapi' or 'sglang', not the text 'vlm'; did you mean `vllm`?", "  kind: vlm"),
    (("  count: 2\n", "  count: 2\n  expert_parallel: maybe\n"), "gpus.expert_parallel",
     "expected true or false, not the text 'maybe'", "  expert_parallel: maybe"),
    (("  method: mtp\n", "  method: eagle\n"), "speculative",
     "method: expected one of 'none', 'mtp', 'draft', not 'eagle'", "speculative:"),
    (("  method: mtp\n", "  mehtod: mtp\n"), "speculative", "needs `method` to say which kind it is", "speculative:"),
    (("  volumes:\n", "  volumes:\n    - 5\n"), "container.volumes.0",
     "expected a mapping (an entry of volumes), not the number 5", "    - 5"),
    (("  port: 8001\n  health_path", "  port: 0\n  health_path"), "engine.port",
     "must be greater than or equal to 1, not the number 0", "  port: 0"),
    (("context_length: 262144\n", "context_length: lots\n"), "context_length",
     "Input should be a valid integer, not the text 'lots'", "context_length: lots"),
])
def test_every_problem_is_in_plain_words_with_its_line(tmp_path: Path, change: tuple[str, str], where: str,
                                                       says: str, at: str) -> None:
    text = with_lines(GLM, dict([change]))
    problems = validate(tmp_path, text)
    (problem,) = [p for p in problems if f": {where}: " in p]
    assert problem.endswith(f": {where}: {says} (line {line_of(text, at)})"), problem
    assert not any(word in p for p in problems for word in PYDANTIC_WORDS), problems


def test_a_missing_key_names_the_mapping_that_lacks_it(tmp_path: Path) -> None:
    text = with_lines(GLM, {"\n  port: 8001\n": "\n"})
    problems = validate(tmp_path, text)
    (problem,) = [p for p in problems if ": engine.port: " in p]
    assert problem.endswith(f"engine.port: Field required (the mapping at line {line_of(text, 'engine:')})")


def test_a_union_member_is_no_level_of_the_file(tmp_path: Path) -> None:
    """pydantic says speculative.draft.draft.shard; the file has speculative.draft.shard."""
    draft = ("speculative:\n  method: draft\n  name: dflash2\n  draft:\n    source: a/b\n    path: /models/d\n"
             "    total_bytes: 10\n    shard: 1\n    license: {id: mit}\n")
    start = GLM.index("speculative:\n")
    end = GLM.index("\n", GLM.index("adaptive:", start)) + 1
    text = GLM[:start] + draft + GLM[end:]
    problems = validate(tmp_path, text)
    (problem,) = [p for p in problems if "shard" in p]
    assert problem.endswith(f"speculative.draft.shard: unknown key; did you mean `shards`? "
                            f"(line {line_of(text, '    shard: 1')})"), problem


def test_problems_from_an_overlay_and_a_set_say_where_they_come_from(tmp_path: Path) -> None:
    overlay = tmp_path / "box.yaml"
    overlay.write_text("container:\n  ipc: private\n  shm_sise: 16g\n", encoding="utf-8")
    done = rigctl("show", "glm53-flash", "-f", str(overlay), "--set", "engine.port=0", "--json")
    assert done.returncode == ExitCode.INVALID_INPUT
    problems = json.loads(done.stdout)["error"]["problems"]
    assert any(p.endswith(f"container.shm_sise: unknown key; did you mean `shm_size`? (line 3 of {overlay})")
               for p in problems), problems
    assert any(p.endswith("engine.port: must be greater than or equal to 1, not the number 0 "
                          "(from --set engine.port=0)") for p in problems), problems
    text = rigctl("show", "glm53-flash", "-f", str(overlay), "--set", "engine.port=0")
    assert text.returncode == ExitCode.INVALID_INPUT and f"(line 3 of {overlay})" in text.stderr


def test_validate_takes_a_recipe_name_and_names_its_file(tmp_path: Path) -> None:
    mine = tmp_path / "config" / "rigctl" / "recipes"
    mine.mkdir(parents=True)
    (mine / "typo.yaml").write_text(GLM.replace("name: glm53-flash\n", "name: typo\nfamly: x\n", 1))
    done = rigctl("validate", "typo", env={"XDG_CONFIG_HOME": str(tmp_path / "config")})
    assert done.returncode == ExitCode.INVALID_INPUT
    assert "famly: unknown key; did you mean `family`? (line 5)" in done.stdout, done.stdout


def test_the_hosts_file_gets_the_same_words(tmp_path: Path) -> None:
    hosts = tmp_path / "hosts.yaml"
    hosts.write_text("hosts:\n  - name: a\n    ssh: a\n    prot: 22\n  - name: b\n    ssh: b\n    tags: gpu\n")
    done = rigctl("fleet", "status", "--hosts", str(hosts), "--json")
    assert done.returncode == ExitCode.INVALID_INPUT
    problems = json.loads(done.stdout)["error"]["problems"]
    assert f"{hosts}: hosts.0.prot: unknown key; did you mean `port`? (line 4)" in problems
    assert f"{hosts}: hosts.1.tags: expected a list, not the text 'gpu' (line 7)" in problems
