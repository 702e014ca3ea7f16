"""Hostile recipe inputs (issue #10): YAML alias bombs, files that are not regular files or too large,
values that used to end in a traceback, and a user recipe that shadows a bundled one.

Every attack goes through the real CLI, a fresh process with HOME and XDG_CONFIG_HOME in tmp_path,
under a memory ceiling and a time limit: a regression fails the test instead of hanging the run or
eating the box. Every refusal must be a clear message with exit 2 (command line) or 3 (file), never
a traceback (exit 70), and with --json exactly one JSON object.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rigctl.exitcodes import ExitCode
from rigctl.podman_versions import find_version
from rigctl.recipe.catalog import bundled_recipes_dir
from rigctl.util.safefs import RECIPE_LIMIT

MEMORY_CEILING = 2 << 30  # far above a real run (~100 MiB), far below what the box has
BASE = bundled_recipes_dir() / "qwen3-8b-vllm.yaml"
LONG_DIGITS = "9" * 5000


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CEILING, MEMORY_CEILING))


def rigctl(tmp_path: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "cfg")}
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False, preexec_fn=_limit_memory)


def refused(done: subprocess.CompletedProcess[str], code: ExitCode, *needles: str) -> dict[str, Any] | None:
    """Assert a clean refusal; returns the JSON document when the command was run with --json."""
    out = done.stdout + done.stderr
    assert "Traceback" not in out and "internal error" not in out, out[-3000:]
    assert done.returncode == code, out[-3000:]
    for needle in needles:
        assert needle in out, out[-3000:]
    if "--json" in done.args:
        doc: dict[str, Any] = json.loads(done.stdout)  # one JSON object, nothing else
        assert doc["ok"] is False
        return doc
    return None


def base() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(BASE.read_text())
    return data


def recipe_text(**changes: Any) -> str:
    """The base recipe with top-level or dotted (``a__b``) keys changed, as YAML text."""
    data = base()
    for dotted, value in changes.items():
        node = data
        *parents, last = dotted.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return yaml.safe_dump(data, sort_keys=False)


def user_dir(tmp_path: Path) -> Path:
    d = tmp_path / "cfg" / "rigctl" / "recipes"
    d.mkdir(parents=True, exist_ok=True)
    return d


# --- alias bombs ------------------------------------------------------------------------------------


def _laughs(levels: int, fan: int, *, maps: bool = False) -> str:
    """The billion laughs: each level repeats the one below ``fan`` times, as lists or as mappings."""
    lines = [f"l0: &l0 {'[' + ', '.join(['lol'] * fan) + ']'}"]
    for n in range(1, levels):
        if maps:
            lines.append(f"l{n}: &l{n} {{{', '.join(f'k{i}: *l{n - 1}' for i in range(fan))}}}")
        else:
            lines.append(f"l{n}: &l{n} [{', '.join([f'*l{n - 1}'] * fan)}]")
    return "\n".join(lines) + f"\ndescription: *l{levels - 1}\n"


def _big_string_many_aliases() -> str:
    """A valid recipe but for size: one 900 kB argument used 3000 times (2.7 GB once rendered)."""
    args = "[&big " + "x" * 900_000 + ", " + ", ".join(["*big"] * 3000) + "]"
    text = recipe_text(engine__args="ARGS-HERE").replace("args: ARGS-HERE", f"args: {args}")
    assert len(text.encode()) < RECIPE_LIMIT  # the file itself is within bounds: only its expansion is not
    return text


def _merge_bomb() -> str:
    """Merge keys (`<<`) that each pull in the level below several times."""
    lines = ["m0: &m0 {" + ", ".join(f"k{i}: v" for i in range(10)) + "}"]
    for n in range(1, 8):
        lines.append(f"m{n}: &m{n} {{<<: [{', '.join([f'*m{n - 1}'] * 10)}], own{n}: 1}}")
    return "\n".join(lines) + "\n"


def _deep_through_aliases() -> str:
    """Each anchor 30 levels deep, the next one nesting the previous: 90 levels, though each is short."""
    return ("a: &a " + "[" * 30 + "x" + "]" * 30 + "\n"
            + "b: &b " + "[" * 30 + "*a" + "]" * 30 + "\n"
            + "c: " + "[" * 30 + "*b" + "]" * 30 + "\n")


def _wide_aliases() -> str:
    """One list of 50,000 values used 100,000 times in one list: cheap to measure only if a node
    already measured costs nothing more each time it is met again."""
    return "a: &a [" + ", ".join(["1"] * 50_000) + "]\nb: [" + ", ".join(["*a"] * 100_000) + "]\n"


BOMBS = {
    "nested-lists": (_laughs(9, 10), "more than 100,000 values"),
    "nested-lists-30-levels": (_laughs(30, 10), "more than 100,000 values"),  # 10^30: measured, not expanded
    "nested-maps": (_laughs(8, 10, maps=True), "more than 100,000 values"),
    "big-string-many-aliases": (_big_string_many_aliases(), "MiB of text"),
    "merge-keys": (_merge_bomb(), "more than 100,000 values"),
    "recursive": ("description: &a [*a]\n", "contains it"),
    "deep-through-aliases": (_deep_through_aliases(), "levels deep"),
    "wide-aliases": (_wide_aliases(), "more than 100,000 values"),
}


@pytest.mark.parametrize("shape", sorted(BOMBS))
def test_alias_bomb_recipe_is_refused_by_validate(tmp_path: Path, shape: str) -> None:
    text, needle = BOMBS[shape]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text)
    doc = refused(rigctl(tmp_path, "validate", str(bomb), "--json", timeout=30), ExitCode.INVALID_INPUT, needle)
    assert doc is not None
    (result,) = doc["files"]
    assert result["problems"][0].startswith(f"{bomb}: line ")


@pytest.mark.parametrize("shape", ["nested-lists", "big-string-many-aliases"])
def test_alias_bomb_recipe_is_refused_by_render_and_show(tmp_path: Path, shape: str) -> None:
    text, needle = BOMBS[shape]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(text)
    refused(rigctl(tmp_path, "render", str(bomb)), ExitCode.INVALID_INPUT, needle, str(bomb))
    refused(rigctl(tmp_path, "show", str(bomb), "--json"), ExitCode.INVALID_INPUT, needle)


@pytest.mark.parametrize("shape", ["nested-maps", "merge-keys", "recursive"])
def test_alias_bomb_overlay_is_refused(tmp_path: Path, shape: str) -> None:
    text, needle = BOMBS[shape]
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(text)
    refused(rigctl(tmp_path, "show", "qwen3-8b-vllm", "-f", str(overlay), "--json"), ExitCode.INVALID_INPUT,
            needle, str(overlay))
    refused(rigctl(tmp_path, "render", "qwen3-8b-vllm", "-f", str(overlay)), ExitCode.INVALID_INPUT, needle)


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("[" + ", ".join(f"&a{i} [" + ", ".join([f"*a{i - 1}" if i else "x"] * 10) + "]" for i in range(7)) + "]",
         "more than 100,000 values"),
        ("&a [*a]", "contains it"),
        ("[" * 70 + "x" + "]" * 70, "levels deep"),
    ],
    ids=["nested-lists", "recursive", "deep"],
)
def test_alias_bomb_in_set_value_is_a_usage_error(tmp_path: Path, value: str, needle: str) -> None:
    done = rigctl(tmp_path, "show", "qwen3-8b-vllm", "--set", f"engine.args={value}", "--json")
    doc = refused(done, ExitCode.USAGE, needle, "--set 'engine.args'")
    assert doc is not None and doc["error"]["code"] == "usage"


def test_alias_bomb_in_user_recipe_is_listed_as_invalid(tmp_path: Path) -> None:
    (user_dir(tmp_path) / "laughs.yaml").write_text(BOMBS["nested-lists"][0])
    doc = refused(rigctl(tmp_path, "recipes", "--json"), ExitCode.INVALID_INPUT)
    assert doc is not None
    row = next(r for r in doc["recipes"] if r["name"] == "laughs")
    assert row["valid"] is False and "more than 100,000 values" in row["problems"][0]
    assert all(r["valid"] for r in doc["recipes"] if r["name"] != "laughs")  # the others still listed


def test_anchors_and_merge_keys_in_real_use_still_work(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        "engine:\n  env: &common {HF_HOME: /models, VLLM_LOGGING_LEVEL: INFO}\n"
        "container:\n  env:\n    <<: *common\n    VLLM_LOGGING_LEVEL: DEBUG\n"
    )
    recipe = tmp_path / "anchored.yaml"
    recipe.write_text(recipe_text(container__volumes="VOLS").replace(
        "volumes: VOLS",
        "volumes:\n  - &vol {host: /srv/models/Qwen3-8B, container: /models/Qwen3-8B}\n"
        "  - {<<: *vol, host: /srv/cache, container: /cache}",
    ))
    done = rigctl(tmp_path, "show", str(recipe), "-f", str(overlay), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    doc = json.loads(done.stdout)["recipe"]
    assert doc["engine"]["env"] == {"HF_HOME": "/models", "VLLM_LOGGING_LEVEL": "INFO"}
    assert doc["container"]["env"]["VLLM_LOGGING_LEVEL"] == "DEBUG" and doc["container"]["env"]["HF_HOME"] == "/models"
    assert [v["container"] for v in doc["container"]["volumes"]] == ["/models/Qwen3-8B", "/cache"]
    assert all(v["read_only"] for v in doc["container"]["volumes"])


# --- files that are not small regular UTF-8 files -----------------------------------------------------


def _make(kind: str, path: Path) -> Path:
    if kind == "fifo":
        os.mkfifo(path)  # reading it would block for ever
    elif kind == "device":
        path.symlink_to("/dev/zero")  # reading it would never end
    elif kind == "directory":
        path.mkdir()
    elif kind == "oversized":
        path.write_text(recipe_text() + "# " + "x" * RECIPE_LIMIT + "\n")
    elif kind == "non-utf8":
        path.write_bytes(recipe_text().encode().replace(b"Qwen3-8B BF16", b"Qwen3-8B \xff\xfe BF16"))
    return path


KINDS = {
    "fifo": "a FIFO",
    "device": "a character device",
    "directory": "a directory",
    "oversized": "more than the 1.0 MiB",
    "non-utf8": "not UTF-8 text (byte 0xff",
}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_validate_refuses_what_is_not_a_small_text_file(tmp_path: Path, kind: str) -> None:
    bad = _make(kind, tmp_path / "r.yaml")
    doc = refused(rigctl(tmp_path, "validate", str(bad), "--json", timeout=30), ExitCode.INVALID_INPUT, KINDS[kind])
    assert doc is not None and doc["files"][0]["problems"] == [p for p in doc["files"][0]["problems"] if str(bad) in p]


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_overlay_that_is_not_a_small_text_file_is_refused(tmp_path: Path, kind: str) -> None:
    bad = _make(kind, tmp_path / "o.yaml")
    refused(rigctl(tmp_path, "show", "qwen3-8b-vllm", "-f", str(bad), timeout=30), ExitCode.INVALID_INPUT,
            f"{bad}: ", KINDS[kind])
    refused(rigctl(tmp_path, "render", "qwen3-8b-vllm", "-f", str(bad), "--json", timeout=30),
            ExitCode.INVALID_INPUT, KINDS[kind])


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_recipe_path_that_is_not_a_small_text_file_is_refused_by_render(tmp_path: Path, kind: str) -> None:
    bad = _make(kind, tmp_path / "r.yaml")
    refused(rigctl(tmp_path, "render", str(bad), timeout=30), ExitCode.INVALID_INPUT, f"{bad}: ", KINDS[kind])


def test_device_given_directly_is_refused(tmp_path: Path) -> None:
    refused(rigctl(tmp_path, "show", "qwen3-8b-vllm", "-f", "/dev/zero", timeout=30), ExitCode.INVALID_INPUT,
            "/dev/zero: a character device")
    refused(rigctl(tmp_path, "validate", "/dev/null", timeout=30), ExitCode.INVALID_INPUT,
            "/dev/null: a character device")


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_user_recipe_dir_entries_that_are_not_small_text_files(tmp_path: Path, kind: str) -> None:
    """`recipes` lists them as invalid with the reason; `show NAME` refuses rather than blocking or
    quietly falling back to another recipe."""
    _make(kind, user_dir(tmp_path) / "odd.yaml")
    doc = refused(rigctl(tmp_path, "recipes", "--json", timeout=30), ExitCode.INVALID_INPUT)
    assert doc is not None
    (row,) = [r for r in doc["recipes"] if r["name"] == "odd"]
    assert row["valid"] is False and KINDS[kind] in row["problems"][0]
    text = refused(rigctl(tmp_path, "recipes", timeout=30), ExitCode.INVALID_INPUT, "INVALID", KINDS[kind])
    assert text is None
    refused(rigctl(tmp_path, "show", "odd", "--json", timeout=30), ExitCode.INVALID_INPUT, KINDS[kind])


def test_fifo_shadowing_a_bundled_recipe_is_refused_not_skipped(tmp_path: Path) -> None:
    os.mkfifo(user_dir(tmp_path) / "qwen3-8b-vllm.yaml")
    refused(rigctl(tmp_path, "render", "qwen3-8b-vllm", timeout=30), ExitCode.INVALID_INPUT, "a FIFO")


# --- values that used to end in a traceback ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "needle"),
    [("a" * 300, "at most 63"), ("a" * 64, "at most 63"), ("Upper", "not a recipe or container name"),
     ("_under", "not a recipe or container name"), ("caf\u00e9", "not a recipe or container name")],
    ids=["300", "64", "upper", "underscore-first", "non-ascii"],
)
def test_bad_recipe_name_on_the_command_line(tmp_path: Path, name: str, needle: str) -> None:
    doc = refused(rigctl(tmp_path, "show", name, "--json"), ExitCode.INVALID_INPUT, needle)
    assert doc is not None and len(doc["error"]["message"]) < 400  # a huge name is cut, not echoed


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"name": "a" * 300}, "name: a name of 300 characters"),
        ({"name": "a" * 64}, "at most 63"),
        ({"name": "has space"}, "not a recipe or container name"),
        ({"container__name": "c" * 300}, "container.name: a name of 300 characters"),
        ({"checkpoint__shard_pattern": "m-{index:0999999999d}.st"}, "width below 100"),
        ({"checkpoint__shard_pattern": "m-{index:099999999999999999999d}.st"}, "width below 100"),
        ({"checkpoint__shard_pattern": "m-{index:>9999}.st"}, "width below 100"),
        ({"checkpoint__shard_pattern": "m-{index!r}.st"}, "is not {index} or {count}"),
        ({"checkpoint__shard_pattern": "m-{index.real}.st"}, "is not {index} or {count}"),
        ({"checkpoint__shard_pattern": "m-{0}.st"}, "is not {index} or {count}"),
        ({"checkpoint__shard_pattern": "m-{index[0]}.st"}, "is not {index} or {count}"),
        ({"checkpoint__shard_pattern": "m-{index"}, "cannot be formatted"),
        ({"checkpoint__shard_pattern": "../../etc/{index}"}, "not a file name inside checkpoint.path"),
        ({"checkpoint__shard_pattern": "x" * 300 + "{index:05d}"}, "at most 255"),
        ({"checkpoint__shards": 10**9}, "less than or equal to 100000"),
        ({"context_length": "abc"}, "context_length: Input should be a valid integer"),
    ],
    ids=lambda v: next(iter(v)) if isinstance(v, dict) else "",
)
def test_bad_values_in_a_recipe_file(tmp_path: Path, changes: dict[str, Any], needle: str) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(recipe_text(**changes))
    refused(rigctl(tmp_path, "validate", str(bad)), ExitCode.INVALID_INPUT, needle)
    refused(rigctl(tmp_path, "render", str(bad), "--json"), ExitCode.INVALID_INPUT, needle)


def test_huge_integer_in_a_file_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(recipe_text(context_length=1024).replace("context_length: 1024", f"context_length: {LONG_DIGITS}"))
    refused(rigctl(tmp_path, "validate", str(bad), "--json"), ExitCode.INVALID_INPUT,
            "an integer of 5000 characters")


def test_longest_names_give_file_names_that_fit(tmp_path: Path) -> None:
    name = "n" * 63
    good = tmp_path / "long.yaml"
    good.write_text(recipe_text(name=name, container__name="c" * 63))
    out = tmp_path / "units"
    out.mkdir()
    done = rigctl(tmp_path, "render", str(good), "--out", str(out), "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    names = [f["name"] for f in json.loads(done.stdout)["files"]]
    assert names == ["c" * 63 + ".container"]
    assert all(len(n.encode()) <= 255 for n in os.listdir(out))


@pytest.mark.parametrize(
    ("contents", "needle"),
    [
        ({"context_length": "abc"}, "context_length: Input should be a valid integer"),
        ({"gpus__count": "many"}, "gpus.count: Input should be a valid integer"),
        ({"description": [1, 2]}, "description: Input should be a valid string"),
        ({"name": "x" * 300}, "a name of 300 characters"),
    ],
    ids=["context-abc", "gpus-text", "description-list", "name-300"],
)
def test_broken_user_recipe_is_listed_as_invalid(tmp_path: Path, contents: dict[str, Any], needle: str) -> None:
    (user_dir(tmp_path) / "broken.yaml").write_text(recipe_text(**contents))
    doc = refused(rigctl(tmp_path, "recipes", "--json"), ExitCode.INVALID_INPUT)
    assert doc is not None
    (row,) = [r for r in doc["recipes"] if r["name"] == "broken"]
    assert row["valid"] is False and row["context_length"] is None and any(needle in p for p in row["problems"])
    refused(rigctl(tmp_path, "recipes"), ExitCode.INVALID_INPUT, "broken", "INVALID", needle)


def test_user_file_whose_name_is_no_recipe_name_is_listed_as_invalid(tmp_path: Path) -> None:
    (user_dir(tmp_path) / "Bad\x1b[2JName.yaml").write_text(recipe_text())
    doc = refused(rigctl(tmp_path, "recipes", "--json"), ExitCode.INVALID_INPUT)
    assert doc is not None
    (row,) = [r for r in doc["recipes"] if r["name"].startswith("Bad")]
    assert "the file name cannot name a recipe" in row["problems"][0]
    text = rigctl(tmp_path, "recipes")
    assert "\x1b" not in text.stdout and "Bad\\x1b[2JName" in text.stdout  # shown escaped, not interpreted


def test_a_description_that_reorders_the_terminal_line_is_listed_escaped(tmp_path: Path) -> None:
    # valid for the model (it refuses control characters, not bidi overrides), and still not for a terminal
    (user_dir(tmp_path) / "bidi.yaml").write_text(recipe_text(name="bidi", description="safe \u202egnp.exe"))
    text = rigctl(tmp_path, "recipes")
    assert text.returncode == 0, text.stderr
    assert "\u202e" not in text.stdout and "safe \\u202egnp.exe" in text.stdout


@pytest.mark.parametrize(
    "version", [LONG_DIGITS + ".1", "5." + LONG_DIGITS, "5.4." + LONG_DIGITS, "5.4-" + "x" * 5000, "1234567.1"],
    ids=["major", "minor", "patch", "suffix", "seven-digits"],
)
def test_bad_podman_version_is_refused(tmp_path: Path, version: str) -> None:
    doc = refused(rigctl(tmp_path, "render", "qwen3-8b-vllm", "--podman-version", version, "--json"),
                  ExitCode.INVALID_INPUT, "is not a podman version")
    assert doc is not None and len(doc["error"]["message"]) < 200
    refused(rigctl(tmp_path, "render", "qwen3-8b-vllm", "--quadlet-version", version), ExitCode.INVALID_INPUT,
            "is not a podman version")


def test_find_version_ignores_overlong_numbers() -> None:
    assert find_version(LONG_DIGITS + ".1") is None
    assert find_version("podman version " + LONG_DIGITS) is None
    assert find_version("podman version 4.3.1") == (4, 3)
    assert find_version("5.4.2-dev") == (5, 4)


@pytest.mark.parametrize(
    ("assignment", "needle"),
    [
        (f"container.volumes.{LONG_DIGITS}.host=/x", "is not an index into it"),
        ("container.volumes.\u00b2.host=/x", "is not an index into it"),  # '²'.isdigit() is True
        ("container.volumes.-1.host=/x", "is not an index into it"),
        ("engine.args.99999999999=x", "is not an index into it"),
        (".".join(["a"] * 10_000) + "=1", "a path of 10000 parts"),
        (".".join(["a"] * 65) + "=1", "a path of 65 parts"),
    ],
    ids=["5000-digits", "superscript", "negative", "eleven-digits", "10000-parts", "65-parts"],
)
def test_bad_set_paths_are_usage_errors(tmp_path: Path, assignment: str, needle: str) -> None:
    doc = refused(rigctl(tmp_path, "show", "qwen3-8b-vllm", "--set", assignment, "--json"), ExitCode.USAGE, needle)
    assert doc is not None and len(doc["error"]["message"]) < 400


def test_huge_integer_set_value_is_a_clear_refusal(tmp_path: Path) -> None:
    doc = refused(rigctl(tmp_path, "show", "qwen3-8b-vllm", "--set", f"engine.port={LONG_DIGITS}", "--json"),
                  ExitCode.INVALID_INPUT, "engine.port")
    assert doc is not None and all(len(p) < 600 for p in doc["error"]["problems"])


# --- a user recipe named like a bundled one ----------------------------------------------------------


def test_user_recipe_overrides_bundled_and_says_so(tmp_path: Path) -> None:
    mine = user_dir(tmp_path) / "qwen3-8b-vllm.yaml"
    mine.write_text(recipe_text(description="my own copy", context_length=4096))
    bundled = str(bundled_recipes_dir() / "qwen3-8b-vllm.yaml")

    listing = json.loads(rigctl(tmp_path, "recipes", "--json").stdout)
    (row,) = [r for r in listing["recipes"] if r["name"] == "qwen3-8b-vllm"]
    assert row == row | {"origin": "user", "path": str(mine), "overrides": bundled, "valid": True,
                         "description": "my own copy", "context_length": 4096}
    assert "user, overrides bundled" in rigctl(tmp_path, "recipes").stdout

    shown = rigctl(tmp_path, "show", "qwen3-8b-vllm", "--json")
    assert shown.returncode == 0, shown.stdout + shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["source"] == doc["source"] | {"path": str(mine), "origin": "user", "overrides": bundled}
    assert doc["recipe"]["context_length"] == 4096
    assert f"(user, overrides the bundled {bundled})" in rigctl(tmp_path, "show", "qwen3-8b-vllm").stdout
    rendered = rigctl(tmp_path, "render", "qwen3-8b-vllm", "--json")
    assert rendered.returncode == 0, rendered.stdout + rendered.stderr
    assert "--max-model-len 4096 " in json.loads(rendered.stdout)["files"][0]["text"]


def test_bundled_recipe_without_override_says_nothing_of_it(tmp_path: Path) -> None:
    doc = json.loads(rigctl(tmp_path, "show", "qwen3-8b-vllm", "--json").stdout)
    assert doc["source"]["origin"] == "bundled" and doc["source"]["overrides"] is None
