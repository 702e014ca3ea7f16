"""A credential in a recipe's environment or engine arguments is written in clear into the unit file
(issue: secrets in units). Preflight and `rigctl render` warn about it, the installer writes such a unit
0600, `rigctl doctor` finds it in installed units; none of them ever prints the value."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from tests.fakes import small_recipe_file
from tests.preflight.conftest import healthy_facts

from rigctl.deploy.install import install_files
from rigctl.doctor.rules import UNIT_RULES
from rigctl.host.unitfile import MergedUnit, parse
from rigctl.places import Scope
from rigctl.plan.plan import parse_version, place_gpus, podman_target
from rigctl.plan.rendering import render_quadlet
from rigctl.preflight.registry import CHECKS, run_preflight
from rigctl.preflight.secrets import option_secrets, secret_name, unit_secrets
from rigctl.recipe.load import load
from rigctl.recipe.model import Recipe
from rigctl.render.units import render_units

TOKEN = "hf_QwErTyUiOpAsDfGhJkLzXcVbNm0123456789"  # made up; what must never be printed
KEY = "sk-live-0123456789abcdefTOPSECRET"
PIN = "docker.io/x/y@sha256:" + "0" * 64


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rigctl", *args], capture_output=True, text=True, timeout=60,
                          check=False)


# --- the rule on names ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "VLLM_API_KEY", "OPENAI_API_KEY",
                                  "API_KEYS", "AWS_SECRET_ACCESS_KEY", "CLIENT_SECRET", "DB_PASSWORD",
                                  "REDIS_PASSWD", "HFTOKEN", "APIKEY", "--api-key", "--hf-token", "--token",
                                  "--api-keys", "--admin-key"])
def test_names_that_hold_a_secret(name: str) -> None:
    assert secret_name(name)


@pytest.mark.parametrize("name", ["KEY_CACHE_DTYPE", "--kv-cache-dtype", "TOKENIZERS_PARALLELISM", "--tokenizer",
                                  "--tokenizer-mode", "MAX_TOKENS", "--max-num-batched-tokens",
                                  "--num-speculative-tokens", "--api-key-file", "HF_TOKEN_PATH", "--ssl-keyfile",
                                  "HF_HUB_OFFLINE", "VLLM_ATTENTION_BACKEND", "MONKEY", "--port"])
def test_names_that_do_not(name: str) -> None:
    assert not secret_name(name)


@pytest.mark.parametrize(("words", "found"), [
    (["--api-key", KEY, "--port", "8000"], ["--api-key ***"]),
    ([f"--api-key={KEY}"], ["--api-key=***"]),
    (["--hf-token", "--port", "8000"], []),  # a bare --hf-token (use the cached login): no value here
    (["--hf-token"], []),
    (["--api-key", "${VLLM_API_KEY}"], []),  # expanded from the environment at start: not in the file
    (["--api-key=$VLLM_API_KEY"], []),
    (["--api-key="], []),
    (["--kv-cache-dtype", "fp8", "--tokenizer", "x/y", "--max-num-batched-tokens", "8192"], []),
])
def test_engine_options_in_both_spellings(words: list[str], found: list[str]) -> None:
    assert option_secrets(words) == found


# --- preflight and render: a warning before anything is installed ----------------------------------------


def _recipe(tmp_path: Path, **sections: dict[str, Any]) -> Recipe:
    return load(str(small_recipe_file(tmp_path, "sec", port=18999, **sections))).recipe


def test_the_check_is_registered_once() -> None:
    assert [c.id for c in CHECKS].count("secret-in-unit") == 1
    assert [r.id for r in UNIT_RULES].count("secret-in-unit") == 1


def test_preflight_warns_about_env_and_engine_args_without_the_values(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, container={"env": {"HF_TOKEN": TOKEN, "KEY_CACHE_DTYPE": "fp8"}},
                     engine={"args": ["--api-key", KEY, "--kv-cache-dtype", "fp8"], "env": {"DB_PASSWORD": KEY}})
    finding = run_preflight(recipe, healthy_facts(recipe, "no-nvml")).finding("secret-in-unit")
    assert finding.severity == "warn"
    text = json.dumps(finding.model_dump(mode="json"))
    assert TOKEN not in text and KEY not in text
    for shown in ("container.env HF_TOKEN=***", "engine.env DB_PASSWORD=***", "engine.args --api-key ***"):
        assert shown in finding.message
    assert "KEY_CACHE_DTYPE" not in finding.message and "kv-cache" not in finding.message
    assert finding.fix and "podman secret create" in finding.fix and "container.secrets" in finding.fix


def test_preflight_is_quiet_for_secrets_kept_in_podman_secrets(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, container={"secrets": [{"name": "hf", "env": "HF_TOKEN"}],
                                          "env": {"KEY_CACHE_DTYPE": "fp8"}},
                     engine={"args": ["--api-key", "${VLLM_API_KEY}"]})
    assert run_preflight(recipe, healthy_facts(recipe, "no-nvml")).finding("secret-in-unit").severity == "ok"


def test_render_warns_and_masks_the_value(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, container={"env": {"HF_TOKEN": TOKEN}})
    placement = place_gpus(recipe, None, None)
    result = render_quadlet(recipe, placement, podman_target("5.4.2", None, None, where="test", scope=Scope.USER),
                            scope=Scope.USER, out=None)
    (note,) = [n for n in result.warnings if "HF_TOKEN" in n.message]
    assert note.kind == "warning" and TOKEN not in note.message and "container.secrets" in note.message
    # the renderer turns values into files: the warning is the render command's, preflight's in `up`
    assert not [n for n in result.rendered.notes if "HF_TOKEN" in n.message]
    path = small_recipe_file(tmp_path, "sec", port=18999, container={"env": {"HF_TOKEN": TOKEN}})
    for quiet in ([], ["--quiet"]):  # a warning about the unit on stdout: shown with --quiet too
        done = cli(*quiet, "render", str(path), "--podman-version", "5.4.2")
        assert done.returncode == 0, done.stderr
        assert "HF_TOKEN=***" in done.stderr and TOKEN not in done.stderr  # stdout: the unit itself


def test_the_dry_run_says_it_once(tmp_path: Path) -> None:
    path = small_recipe_file(tmp_path, "sec", port=18999, container={"env": {"HF_TOKEN": TOKEN}})
    done = cli("up", str(path), "--dry-run", "--user")
    said = done.stdout + done.stderr  # the unit it would install is shown too, the value in it
    assert "dry run" in said and said.count("HF_TOKEN=***") == 1, said
    doc = json.loads(cli("up", str(path), "--dry-run", "--user", "--json").stdout)
    assert [f["id"] for f in doc["findings"] if "HF_TOKEN" in f["message"]] == ["secret-in-unit"]
    assert not [n for n in doc["render_notes"] if "HF_TOKEN" in n["message"]]


# --- install: a unit with a secret is 0600 --------------------------------------------------------------


def test_a_unit_with_a_secret_is_installed_0600(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, container={"env": {"HF_TOKEN": TOKEN}})
    (unit,) = render_units(recipe, podman_version=parse_version("5.4.2"), scope=Scope.SYSTEM).files
    clean = _recipe(tmp_path, container={"env": {"KEY_CACHE_DTYPE": "fp8"}})
    (plain,) = render_units(clean, podman_version=parse_version("5.4.2")).files
    units = tmp_path / "units"
    install_files(units, {"with-secret.container": unit.text, "plain.container": plain.text})
    assert stat.S_IMODE((units / "with-secret.container").stat().st_mode) == 0o600
    assert stat.S_IMODE((units / "plain.container").stat().st_mode) == 0o644
    assert TOKEN in (units / "with-secret.container").read_text()  # the unit itself is unchanged


def test_an_identical_unit_installed_0644_before_is_tightened_in_place(tmp_path: Path) -> None:
    text = f"[Container]\nImage={PIN}\nExec=--api-key={KEY}\n"
    units = tmp_path / "units"
    units.mkdir()
    (units / "a.container").write_text(text)
    (units / "a.container").chmod(0o644)
    inode = (units / "a.container").stat().st_ino
    result = install_files(units, {"a.container": text})
    assert result.written == [] and not result.changed  # not a change: `up` does not restart the engine
    st = (units / "a.container").stat()
    assert (stat.S_IMODE(st.st_mode), st.st_ino) == (0o600, inode)


# --- doctor: installed units ----------------------------------------------------------------------------

UNITS = {
    "env.container": f"[Container]\nImage={PIN}\nEnvironment=HF_TOKEN={TOKEN} KEY_CACHE_DTYPE=fp8\n",
    "exec.container": f"[Container]\nImage={PIN}\nExec=--model m --api-key {KEY}\n",
    "args.container": f"[Container]\nImage={PIN}\nPodmanArgs=--env=OPENAI_API_KEY={KEY}\n",
    "run.service": f"[Service]\nExecStart=/usr/bin/podman run --rm -e HF_TOKEN={TOKEN} {PIN} --hf-token={TOKEN}\n",
    "engine.service": f"[Service]\nEnvironment=VLLM_API_KEY={KEY}\nExecStart=/usr/bin/vllm serve m\n",
}
FINE = {
    "file.container": f"[Container]\nImage={PIN}\nEnvironmentFile=/etc/llm.env\nSecret=hf,type=env,target=HF_TOKEN\n",
    "ref.container": f"[Container]\nImage={PIN}\nExec=--api-key ${{VLLM_API_KEY}} --kv-cache-dtype fp8\n"
                     "PodmanArgs=-e HF_TOKEN --secret hf,type=env,target=HF_TOKEN\n",
}
WHERE = {"env.container": ["Environment= HF_TOKEN=***"], "exec.container": ["Exec= --api-key ***"],
         "args.container": ["PodmanArgs= OPENAI_API_KEY=***"],
         "run.service": ["ExecStart= HF_TOKEN=***", "ExecStart= --hf-token=***"],
         "engine.service": ["Environment= VLLM_API_KEY=***"]}


def test_unit_secrets_reads_every_place_a_value_can_be_written() -> None:
    for name, text in {**UNITS, **FINE}.items():
        found = [str(e) for e in unit_secrets(MergedUnit.of(parse(f"/u/{name}", text)))]
        assert found == WHERE.get(name, []), name


def test_doctor_warns_on_installed_units_and_never_prints_the_value(tmp_path: Path) -> None:
    for name, text in {**UNITS, **FINE}.items():
        (tmp_path / name).write_text(text)
    done = cli("doctor", "--json", "--path", str(tmp_path))
    assert TOKEN not in done.stdout + done.stderr and KEY not in done.stdout + done.stderr
    data = json.loads(done.stdout)
    hits = {Path(f["unit"]).name: f for f in data["findings"] if f["id"] == "secret-in-unit"}
    assert set(hits) == set(UNITS), hits
    assert {f["severity"] for f in hits.values()} == {"warn"}
    assert "podman secret create" in hits["env.container"]["fix"] and hits["env.container"]["line"] == 3
    assert "Secret=NAME,type=env" in hits["exec.container"]["fix"]
    assert "--secret NAME,type=env" in hits["run.service"]["fix"]
    text = cli("doctor", "--path", str(tmp_path))
    assert "secret-in-unit" in text.stdout and TOKEN not in text.stdout and KEY not in text.stdout


def test_doctor_points_a_managed_unit_to_the_recipe_field(tmp_path: Path) -> None:
    (tmp_path / "m.container").write_text(UNITS["env.container"] + "Label=rigctl.managed=true\n")
    data = json.loads(cli("doctor", "--json", "--path", str(tmp_path)).stdout)
    (hit,) = [f for f in data["findings"] if f["id"] == "secret-in-unit"]
    assert "container.secrets" in hit["fix"]


@pytest.mark.skipif(os.geteuid() != 0, reason="the mode matters where root installs for the system")
def test_root_installs_a_secret_unit_unreadable_to_others(tmp_path: Path) -> None:
    units = tmp_path / "etc-containers-systemd"
    install_files(units, {"a.container": UNITS["env.container"]})
    st = (units / "a.container").stat()
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (0, 0o600)
    # another uid cannot read it
    done = subprocess.run([sys.executable, "-c", f"import os; os.setuid(23456); open({str(units / 'a.container')!r})"],
                          capture_output=True, text=True, timeout=30, check=False)
    assert done.returncode != 0 and "PermissionError" in done.stderr
