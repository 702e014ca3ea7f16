"""The JSON contract of the commands that need no deployment (issue #11): recipes, show, validate, render,
preflight and up --dry-run on captured inventories, inventory, doctor, and the error paths. Each runs as an
operator types it (``python -m rigctl ... --json``) and its keys are compared with sets written out here
(contract_cases says why exactly). The deployed commands are pinned in tests/deploy/test_json_contract_deploy.py,
the fleet in tests/fleet/test_json_contract_fleet.py."""

from __future__ import annotations

import json
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.cli.contract_cases import (
    APPLIED_KEYS,
    DOCTOR_COUNTS_KEYS,
    ENVELOPE,
    ERROR_KEYS_BARE,
    ERROR_KEYS_INVALID,
    ERROR_KEYS_USAGE_WITH_FIX,
    FINDING_KEYS,
    FIX_KEYS,
    GPU_CHOICE_KEYS,
    NOTE_KEYS,
    NOTE_KINDS,
    PATCH_KEYS,
    PREFLIGHT_KEYS,
    PREFLIGHT_LAYOUT_KEYS,
    RECIPE_ROW_KEYS,
    RECIPES_KEYS,
    SEVERITIES,
    UNIT_FINDING_KEYS,
    UNIT_SEVERITIES,
    check_envelope,
    check_error,
    check_items,
    check_keys,
    check_words,
    rigctl_json,
)
from tests.support.on_capture import rigctl_on_capture

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "inventory"
UNITS = REPO / "tests" / "fleet" / "units"
BUNDLED = REPO / "recipes"

DOCTOR_KEYS = ENVELOPE | {"roots", "units", "driver_version", "cdi_specs", "findings", "counts", "skipped",
                          "canaries"}  # canaries: #24, this host's `rigctl canary` timers
SKIPPED_KEYS = frozenset({"path", "reason"})


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """This process's environment with rigctl's config, state and cache in the test's own directory."""
    return {**os.environ, "XDG_CONFIG_HOME": str(tmp_path / "config"), "XDG_STATE_HOME": str(tmp_path / "state"),
            "XDG_CACHE_HOME": str(tmp_path / "cache")}


# --- recipes | show | validate ------------------------------------------------------------------------


def test_recipes(env: dict[str, str]) -> None:
    mine = Path(env["XDG_CONFIG_HOME"]) / "rigctl" / "recipes"
    mine.mkdir(parents=True)
    shutil.copy(BUNDLED / "qwen3-8b-vllm.yaml", mine / "qwen3-8b-vllm.yaml")  # a user recipe overriding a bundled one
    (mine / "contract-broken.yaml").write_text("name: contract-broken\nimage: 3\n")  # listed as invalid: exit 3
    code, doc = rigctl_json("recipes", "--json", env=env)
    assert code == 3
    check_envelope(doc, "recipes", False)
    check_keys(doc, RECIPES_KEYS, "recipes")
    rows = check_items(doc["recipes"], RECIPE_ROW_KEYS, "recipes.recipes")
    check_words([r["origin"] for r in rows], {"bundled", "user"}, "recipes.recipes[].origin")
    assert {r["origin"] for r in rows} == {"bundled", "user"}
    assert {r["valid"] for r in rows} == {True, False}
    assert all(isinstance(d, str) for d in doc["searched"]) and doc["searched"]


def test_show(env: dict[str, str]) -> None:
    code, doc = rigctl_json("show", "qwen3-8b-vllm", "--json", env=env)
    assert code == 0
    check_envelope(doc, "show", True)
    check_keys(doc, ENVELOPE | {"source", "recipe"}, "show")
    check_keys(doc["source"], {"path", "origin", "overrides", "overlays"}, "show.source")
    check_words([doc["source"]["origin"]], {"bundled", "user", "file"}, "show.source.origin")
    check_keys(doc["recipe"], {
        "name", "description", "family", "served_name", "checkpoint", "image", "engine", "gpus", "attention_backend",
        "context_length", "speculative", "container", "service", "verify", "known_issues",
    }, "show.recipe")


def test_validate(env: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "contract-broken.yaml"
    broken.write_text("name: contract-broken\nimage: 3\n")
    code, doc = rigctl_json("validate", str(BUNDLED / "qwen3-8b-vllm.yaml"), str(broken), "--json", env=env)
    assert code == 3
    check_envelope(doc, "validate", False)
    check_keys(doc, ENVELOPE | {"files"}, "validate")
    good, bad = doc["files"]
    check_keys(good, {"file", "ok", "name", "problems", "warnings"}, "validate.files[valid]")  # warnings: #15
    check_keys(bad, {"file", "ok", "problems", "warnings"}, "validate.files[invalid]")
    assert good["ok"] is True and bad["ok"] is False and bad["problems"]


# --- render | preflight | up --dry-run on captured inventories -------------------------------------------


@pytest.fixture
def h200_podman_44(tmp_path: Path) -> Path:
    """The captured H200 box with podman 4.4 installed: old enough that the unit needs adapting (notes)."""
    capture = json.loads((FIXTURES / "h200.json").read_text())
    capture["podman"].update(installed=True, version="4.4.1")
    path = tmp_path / "h200-podman-4.4.json"
    path.write_text(json.dumps(capture))
    return path


def test_render(env: dict[str, str], tmp_path: Path, h200_podman_44: Path) -> None:
    code, doc = rigctl_json("render", "qwen3-8b-vllm", "--inventory", str(h200_podman_44), "--out",
                            str(tmp_path / "units"), "--json", env=env)
    assert code == 0
    check_envelope(doc, "render", True)
    check_keys(doc, ENVELOPE | {"recipe", "podman_version", "quadlet_version", "scope", "service", "files", "notes",
                                "gpus", "versions_from"}, "render")  # versions_from: #15
    check_words([doc["scope"]], {"system", "user"}, "render.scope")
    check_words([doc["versions_from"]], {"option", "inventory", "host", "default"}, "render.versions_from")
    check_items(doc["files"], {"name", "install_path", "path", "text"}, "render.files")  # path: with --out
    notes = check_items(doc["notes"], NOTE_KEYS, "render.notes")
    check_words([n["kind"] for n in notes], NOTE_KINDS, "render.notes[].kind")
    check_items(doc["gpus"], GPU_CHOICE_KEYS, "render.gpus")


def test_preflight_on_a_captured_inventory(env: dict[str, str]) -> None:
    code, doc = rigctl_json("preflight", "qwen3-8b-vllm", "--inventory", str(FIXTURES / "h200.json"), "--json",
                            env=env)
    assert code == 1  # podman is not installed on the captured box
    check_envelope(doc, "preflight", False)
    check_keys(doc, PREFLIGHT_KEYS, "preflight")  # `checksums` joins with --checksums (the deploy contract)
    findings = check_items(doc["findings"], FINDING_KEYS, "preflight.findings")
    check_words([f["severity"] for f in findings], SEVERITIES, "preflight.findings[].severity")
    check_items(doc["gpus"], GPU_CHOICE_KEYS, "preflight.gpus")
    check_keys(doc["layout"], PREFLIGHT_LAYOUT_KEYS, "preflight.layout")
    assert isinstance(doc["forced"], list)


def test_up_dry_run_on_a_captured_inventory(env: dict[str, str], h200_podman_44: Path) -> None:
    code, doc = rigctl_json("up", "qwen3-8b-vllm", "--dry-run", "--inventory", str(h200_podman_44), "--json",
                            env=env)
    assert code == 1  # the captured box lacks the image and the checkpoint: nothing would be installed
    check_envelope(doc, "up", False)
    check_keys(doc, ENVELOPE | {
        "recipe", "scope", "dry_run", "would_install", "findings", "gpus", "layout", "podman_version",
        "quadlet_version", "unit_dir", "service", "files", "render_notes", "render_error", "notes", "endpoint",
        "scope_hint",  # #15
        "base_url",  # what `endpoint` means in every other answer (the dry run's own keeps its /v1)
    }, "up --dry-run")
    assert doc["dry_run"] is True and doc["would_install"] is False
    check_words([doc["scope"]], {"system", "user"}, "up --dry-run.scope")
    findings = check_items(doc["findings"], FINDING_KEYS, "up --dry-run.findings")
    check_words([f["severity"] for f in findings], SEVERITIES, "up --dry-run.findings[].severity")
    check_items(doc["gpus"], GPU_CHOICE_KEYS, "up --dry-run.gpus")
    check_keys(doc["layout"], {"wanted", "explicit", "reasons", "problems"}, "up --dry-run.layout")
    check_items(doc["files"], {"name", "path", "text"}, "up --dry-run.files")
    notes = check_items(doc["render_notes"], NOTE_KEYS, "up --dry-run.render_notes")
    check_words([n["kind"] for n in notes], NOTE_KINDS, "up --dry-run.render_notes[].kind")
    assert all(isinstance(n, str) for n in doc["notes"]) and doc["notes"]


# --- inventory ---------------------------------------------------------------------------------------

INVENTORY_KEYS = ENVELOPE | {"hostname", "captured_at", "cpu_count", "gpu", "shm", "paths", "podman", "cdi",
                             "systemd", "ports", "licenses", "probe_errors",
                             "receipts",  # #32: what engines booted here said of their memory
                             "stack",  # #34: kernel module, Xid log, the GPUs' PCIe paths
                             "image_registry"}  # #34: a recipe's image config from its registry (None here)
GPU_INVENTORY_KEYS = frozenset({"available", "error", "driver_version", "nvml_version", "cuda_driver_version",
                                "devices", "pairs"})


@pytest.fixture
def listening() -> Iterator[int]:
    """A port this test listens on, so that the inventory has at least one listening port to describe."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        yield int(server.getsockname()[1])


def test_inventory_of_this_host(env: dict[str, str], tmp_path: Path, listening: int) -> None:
    probed = tmp_path / "probed"
    probed.mkdir()
    (probed / "model-00001-of-00001.safetensors").write_bytes(b"\0" * 10)
    code, doc = rigctl_json("inventory", str(probed), "--json", env=env)
    assert code == 0
    check_envelope(doc, "inventory", True)
    check_keys(doc, INVENTORY_KEYS, "inventory")
    check_keys(doc["gpu"], GPU_INVENTORY_KEYS, "inventory.gpu")
    check_keys(doc["shm"], {"path", "total_bytes", "free_bytes", "error"}, "inventory.shm")
    paths = check_items(doc["paths"], {"path", "exists", "is_dir", "probed", "free_bytes", "total_bytes", "files",
                                       "files_truncated", "error"}, "inventory.paths")
    (mine,) = [p for p in paths if p["path"] == str(probed)]
    check_items(mine["files"], {"name", "size", "mtime_ns"}, "inventory.paths[].files")
    check_keys(doc["podman"], {"installed", "version", "api_socket", "api_ok", "quadlet", "quadlet_version",
                               "quadlet_scope", "quadlet_elsewhere",  # the other manager's generator
                               "images_via", "images", "error"}, "inventory.podman")
    check_keys(doc["cdi"], {"dirs", "specs", "driver_library", "driver_installed_ns"}, "inventory.cdi")
    check_keys(doc["systemd"], {"system_manager", "user_manager", "user", "uid", "linger", "error"},
               "inventory.systemd")
    check_keys(doc["ports"], {"listening", "error", "owners_of"}, "inventory.ports")
    ports = check_items(doc["ports"]["listening"], {"address", "port", "pid", "process"}, "inventory.ports.listening")
    assert listening in {p["port"] for p in ports}
    assert isinstance(doc["licenses"], list) and isinstance(doc["probe_errors"], dict)


def test_inventory_podman_images(env: dict[str, str], need: Callable[[bool, str], None]) -> None:
    code, doc = rigctl_json("inventory", "--json", env=env)
    assert code == 0
    images = doc["podman"]["images"]
    need(bool(images), "podman lists no image here (.ci/testbed.sh up builds the test engine's)")
    # env (#34): the image config's Env, where its CUDA and NCCL versions are declared
    check_items(images, {"id", "digest", "repo_digests", "names", "env"}, "inventory.podman.images")


# The GPU part needs NVML: the same command with NVML answering from a captured box (tests/fixtures/inventory),
# the one thing faked. pro6000-busy has a process on a GPU; the H200 pair capture has an NVML call unsupported.


def _inventory_with_nvml(capture: Path, env: dict[str, str]) -> dict[str, Any]:
    done = rigctl_on_capture(capture, "inventory", "--json", env=env, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    check_envelope(doc, "inventory", True)
    check_keys(doc, INVENTORY_KEYS, "inventory")
    check_keys(doc["gpu"], GPU_INVENTORY_KEYS, "inventory.gpu")
    return doc


def test_inventory_gpu_devices_and_pairs(env: dict[str, str]) -> None:
    busy = _inventory_with_nvml(FIXTURES / "boxes" / "pro6000-busy.json", env)
    pair = _inventory_with_nvml(FIXTURES / "nvml-h200x2-capture.json", env)
    devices = [d for doc in (busy, pair) for d in doc["gpu"]["devices"]]
    check_items(devices, {
        "index", "uuid", "name", "pci_bus_id", "pci_device_id", "pci_vendor_id", "memory_total_bytes",
        "memory_free_bytes", "memory_used_bytes", "compute_capability", "architecture", "power", "persistence_mode",
        "ecc_enabled", "mig_enabled", "mig_pending", "compute_mode", "pcie_generation", "pcie_generation_max",
        "pcie_width", "pcie_width_max", "numa_node", "nvlink", "processes", "unsupported",
    }, "inventory.gpu.devices")
    check_items([d["power"] for d in devices], {"current_mw", "enforced_mw", "default_mw", "min_mw", "max_mw"},
                "inventory.gpu.devices[].power")
    check_items([d["nvlink"] for d in devices], {"supported", "active", "inactive", "version"},
                "inventory.gpu.devices[].nvlink")
    processes = [p for d in devices for p in d["processes"]]
    check_items(processes, {"pid", "used_memory_bytes", "name", "kind"}, "inventory.gpu.devices[].processes")
    check_words([p["kind"] for p in processes], {"compute", "graphics"}, "inventory.gpu.devices[].processes[].kind")
    check_items([u for d in devices for u in d["unsupported"]], {"call", "error", "message"},
                "inventory.gpu.devices[].unsupported")
    pairs = check_items([p for doc in (busy, pair) for p in doc["gpu"]["pairs"]],
                        {"a", "b", "p2p_read", "topology", "p2p_nvlink", "link", "nvlink_links", "nvlink_version",
                         "unsupported"}, "inventory.gpu.pairs")
    check_words([p["link"] for p in pairs], {"nvlink", "pcie"}, "inventory.gpu.pairs[].link")


# --- doctor ------------------------------------------------------------------------------------------


def test_doctor_of_this_host(env: dict[str, str]) -> None:
    code, doc = rigctl_json("doctor", "--json", env=env)
    assert code in (0, 1)  # whatever serves on this box; the shape is the same
    check_envelope(doc, "doctor", code == 0)
    check_keys(doc, DOCTOR_KEYS, "doctor")
    check_keys(doc["counts"], DOCTOR_COUNTS_KEYS, "doctor.counts")
    for i, finding in enumerate(doc["findings"]):
        check_keys(finding, UNIT_FINDING_KEYS, f"doctor.findings[{i}]")
    for i, skipped in enumerate(doc["skipped"]):
        check_keys(skipped, SKIPPED_KEYS, f"doctor.skipped[{i}]")


def test_doctor_fix_on_a_directory(env: dict[str, str], tmp_path: Path) -> None:
    units = tmp_path / "units"
    units.mkdir()
    for name in ("rigctl-qwen3-8b.container", "glm53-flash.container"):  # rigctl's (rewritten) and someone's (patch)
        shutil.copy(UNITS / name, units / name)
    (units / "huge.container").write_text("[Container]\nImage=x\n" + "#" * (2 * 1024 * 1024))  # not read: skipped
    code, doc = rigctl_json("doctor", "--path", str(units), "--fix", "--json", env=env)
    assert code == 1  # the unit rigctl does not manage still fails
    check_envelope(doc, "doctor", False)
    check_keys(doc, DOCTOR_KEYS | {"fix"}, "doctor --fix")
    findings = check_items(doc["findings"], UNIT_FINDING_KEYS, "doctor.findings")
    check_words([f["severity"] for f in findings], UNIT_SEVERITIES, "doctor.findings[].severity")
    check_keys(doc["counts"], DOCTOR_COUNTS_KEYS, "doctor.counts")
    check_items(doc["skipped"], SKIPPED_KEYS, "doctor.skipped")
    check_keys(doc["fix"], FIX_KEYS, "doctor.fix")
    check_items(doc["fix"]["applied"], APPLIED_KEYS, "doctor.fix.applied")
    check_items(doc["fix"]["patches"], PATCH_KEYS, "doctor.fix.patches")
    check_items(doc["fix"]["remaining"], UNIT_FINDING_KEYS, "doctor.fix.remaining")


# --- the error paths: still one object ---------------------------------------------------------------


def test_a_recipe_not_found_is_one_error_object(env: dict[str, str]) -> None:
    code, doc = rigctl_json("show", "contract-no-such-recipe", "--json", env=env)
    assert code == 3
    check_error(doc, "show", ERROR_KEYS_INVALID, "recipe-not-found")


def test_a_usage_error_rigctl_finds_is_one_error_object(env: dict[str, str]) -> None:
    code, doc = rigctl_json("verify", "--json", env=env)  # neither a recipe nor --url/--model
    assert code == 2
    check_error(doc, "verify", ERROR_KEYS_USAGE_WITH_FIX, "usage")
    code, doc = rigctl_json("status", "--user", "--system", "--json", env=env)
    assert code == 2
    check_error(doc, "status", ERROR_KEYS_BARE, "usage")


def test_a_usage_error_of_the_command_line_is_one_error_object(env: dict[str, str]) -> None:
    code, doc = rigctl_json("show", "--json", env=env)  # RECIPE missing: the parser's own usage error
    assert code == 2
    # the keys of its error object are pinned once it prints one: today there is none to pin
    check_envelope(doc, "show", False)
    check_keys(doc, ENVELOPE | {"error"}, "show")
    assert doc["error"]["code"] == "usage" and doc["error"]["message"]
