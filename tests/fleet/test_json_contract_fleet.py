"""The JSON contract of the fleet commands (issue #11): fleet status, doctor (over ssh and through a remote
rigctl, with and without --fix), preflight and swap, and `--host NAME`, against real sshd hosts on 127.0.0.1
(sshd_hosts.py): one that answers and one that is down. tests/cli/contract_cases.py says why the key sets are
exact. The host's `nvidia-smi` is a stand-in printing one H200 (NVML is the one thing faked); the container
its podman lists is a real one, created (never started) for the test."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from tests.cli.contract_cases import (
    APPLIED_KEYS,
    DOCTOR_COUNTS_KEYS,
    ENVELOPE,
    FINDING_KEYS,
    FIX_KEYS,
    PATCH_KEYS,
    PREFLIGHT_KEYS,
    RECIPES_KEYS,
    UNIT_FINDING_KEYS,
    UNIT_SEVERITIES,
    check_envelope,
    check_items,
    check_keys,
    check_words,
    rigctl_json,
)
from tests.conftest import require_or_skip
from tests.deploy import conftest as testbed
from tests.fleet.conftest import sshd_hosts

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

UNITS = Path(__file__).parent / "units"
REMOTE_RIGCTL = str(Path(sys.executable).with_name("rigctl"))  # this checkout's rigctl, as installed on a host
CONTAINER = "contract-fleet-probe"
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
FAKE_NVIDIA_SMI = "#!/bin/sh\necho '0, NVIDIA H200, 512, 143771'\n"  # --query-gpu=index,name,memory.used,memory.total

FLEET_KEYS = ENVELOPE | {"hosts", "elapsed_s", "counts", "versions"}
VERSIONS_KEYS = frozenset({"local", "skew"})
COUNTS_KEYS = frozenset({"hosts", "ok", "unreachable"})
HOST_KEYS = frozenset({"name", "destination", "ok", "reachable", "via", "rigctl_version", "elapsed_s", "error",
                       "summary", "findings", "data"})
VIA = frozenset({"ssh", "rigctl"})
STATUS_DATA_KEYS = frozenset({"hostname", "containers", "units", "unit_rows", "gpus", "podman_error"})
CONTAINER_KEYS = frozenset({"name", "image", "state", "status", "managed", "recipe"})
GPU_ROW_KEYS = frozenset({"index", "name", "memory_used_mib", "memory_total_mib"})
SSH_DOCTOR_DATA_KEYS = frozenset({"units", "driver_version", "skipped"})
RIGCTL_DOCTOR_DATA_KEYS = frozenset({"units", "driver_version", "counts"})


@dataclass
class Fleet:
    over_ssh: Path  # hosts file whose `rigctl:` is missing: fleet reads podman, systemctl and files over ssh
    through_rigctl: Path  # hosts file whose `rigctl:` is this checkout's
    home: Path  # the answering host's HOME
    env: dict[str, str]  # for the rigctl that drives the fleet: its own runtime dir for ssh control sockets


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    ok, why = sshd_hosts.sshd_available()
    require_or_skip(ok, why)
    env = testbed.testbed_env()
    require_or_skip("RIGCTL_TEST_ENGINE_IMAGE" in env and shutil.which("podman") is not None,
                    "no podman with the test-engine image (.ci/testbed.sh up)")
    root = tmp_path_factory.mktemp("contract-fleet")
    bin_dir = root / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(FAKE_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    hosts = sshd_hosts.start_fleet(root, 1, session_env=f"PATH={bin_dir}:{SYSTEM_PATH}")
    run_dir = Path(tempfile.mkdtemp(prefix="rc-", dir="/tmp"))  # short: an ssh control socket path must fit
    subprocess.run(["podman", "rm", "-f", CONTAINER], env=env, capture_output=True, timeout=60, check=False)
    subprocess.run(["podman", "create", "--name", CONTAINER, "--label", "rigctl.managed=true", "--label",
                    "rigctl.recipe=contract-probe", env["RIGCTL_TEST_ENGINE_IMAGE"], "true"],
                   env=env, capture_output=True, timeout=60, check=True)
    try:
        yield Fleet(hosts.inventory(rigctl="/nonexistent/rigctl"), hosts.inventory(rigctl=REMOTE_RIGCTL),
                    hosts.hosts[0].home, {**os.environ, "XDG_RUNTIME_DIR": str(run_dir)})
    finally:
        subprocess.run(["podman", "rm", "-f", CONTAINER], env=env, capture_output=True, timeout=60, check=False)
        sshd_hosts.stop_fleet(hosts)
        shutil.rmtree(run_dir, ignore_errors=True)


def _place_units(home: Path) -> None:
    """rigctl's unit (which --fix rewrites) and someone else's (which gets a patch), fresh for each test."""
    units = home / ".config" / "containers" / "systemd"
    shutil.rmtree(units, ignore_errors=True)
    units.mkdir(parents=True)
    for name in ("rigctl-qwen3-8b.container", "glm53-flash.container"):
        shutil.copy(UNITS / name, units / name)


def _hosts(doc: dict[str, Any], command: str) -> dict[str, dict[str, Any]]:
    """The fleet envelope and counts checked; each host's result by name, its keys checked."""
    check_envelope(doc, command, False)  # in every case here a host is down or a unit fails
    check_keys(doc, FLEET_KEYS, command)
    check_keys(doc["counts"], COUNTS_KEYS, f"{command}.counts")
    check_keys(doc["versions"], VERSIONS_KEYS, f"{command}.versions")
    hosts = check_items(doc["hosts"], HOST_KEYS, f"{command}.hosts")
    check_words([h["via"] for h in hosts], VIA, f"{command}.hosts[].via")
    return {h["name"]: h for h in hosts}


def test_fleet_status(fleet: Fleet) -> None:
    code, doc = rigctl_json("fleet", "status", "--hosts", str(fleet.over_ssh), "--json", env=fleet.env)
    assert code == 1
    hosts = _hosts(doc, "fleet status")
    box, down = hosts["box00"], hosts["down"]
    check_keys(box["data"], STATUS_DATA_KEYS, "fleet status.hosts[].data")
    containers = check_items(box["data"]["containers"], CONTAINER_KEYS, "fleet status.hosts[].data.containers")
    (probe,) = [c for c in containers if c["name"] == CONTAINER]
    assert probe["managed"] is True and probe["recipe"] == "contract-probe"
    check_items(box["data"]["gpus"], GPU_ROW_KEYS, "fleet status.hosts[].data.gpus")
    assert down["reachable"] is False and isinstance(down["error"], str)
    check_keys(down["data"], set(), "fleet status.hosts[down].data")


def test_fleet_doctor_over_ssh(fleet: Fleet) -> None:
    _place_units(fleet.home)
    code, doc = rigctl_json("fleet", "doctor", "--hosts", str(fleet.over_ssh), "--json", env=fleet.env)
    assert code == 1
    box = _hosts(doc, "fleet doctor")["box00"]
    assert box["via"] == "ssh"
    check_keys(box["data"], SSH_DOCTOR_DATA_KEYS, "fleet doctor.hosts[ssh].data")
    findings = check_items(box["findings"], UNIT_FINDING_KEYS, "fleet doctor.hosts[].findings")
    check_words([f["severity"] for f in findings], UNIT_SEVERITIES, "fleet doctor.hosts[].findings[].severity")

    code, doc = rigctl_json("fleet", "doctor", "--fix", "--hosts", str(fleet.over_ssh), "--json", env=fleet.env)
    assert code == 1
    box = _hosts(doc, "fleet doctor")["box00"]
    check_keys(box["data"], SSH_DOCTOR_DATA_KEYS | {"fix"}, "fleet doctor --fix.hosts[ssh].data")
    fix = box["data"]["fix"]
    check_keys(fix, FIX_KEYS, "fleet doctor --fix.hosts[ssh].data.fix")
    assert fix["applied"] == [] and fix["remaining"] is None and fix["error"]  # nothing changed without rigctl
    check_items(fix["patches"], PATCH_KEYS, "fleet doctor --fix.hosts[ssh].data.fix.patches")


def test_fleet_doctor_through_the_remote_rigctl(fleet: Fleet) -> None:
    _place_units(fleet.home)
    args = ["--hosts", str(fleet.through_rigctl), "--only", "box00", "--json"]
    code, doc = rigctl_json("fleet", "doctor", *args, env=fleet.env)
    assert code == 1
    (box,) = _hosts(doc, "fleet doctor").values()
    assert box["via"] == "rigctl"
    check_keys(box["data"], RIGCTL_DOCTOR_DATA_KEYS, "fleet doctor.hosts[rigctl].data")
    check_keys(box["data"]["counts"], DOCTOR_COUNTS_KEYS, "fleet doctor.hosts[rigctl].data.counts")
    check_items(box["findings"], UNIT_FINDING_KEYS, "fleet doctor.hosts[rigctl].findings")

    code, doc = rigctl_json("fleet", "doctor", "--fix", *args, env=fleet.env)
    assert code == 1  # the unit rigctl does not manage still fails
    (box,) = _hosts(doc, "fleet doctor").values()
    check_keys(box["data"], RIGCTL_DOCTOR_DATA_KEYS | {"fix"}, "fleet doctor --fix.hosts[rigctl].data")
    fix = box["data"]["fix"]
    check_keys(fix, FIX_KEYS, "fleet doctor --fix.hosts[rigctl].data.fix")
    check_items(fix["applied"], APPLIED_KEYS, "fleet doctor --fix.hosts[rigctl].data.fix.applied")
    check_items(fix["patches"], PATCH_KEYS, "fleet doctor --fix.hosts[rigctl].data.fix.patches")
    check_items(fix["remaining"], UNIT_FINDING_KEYS, "fleet doctor --fix.hosts[rigctl].data.fix.remaining")


def test_fleet_preflight(fleet: Fleet) -> None:
    code, doc = rigctl_json("fleet", "preflight", "qwen3-8b-vllm", "--hosts", str(fleet.through_rigctl), "--json",
                            env=fleet.env)
    assert code == 1
    hosts = _hosts(doc, "fleet preflight")
    box = hosts["box00"]
    assert box["via"] == "rigctl" and box["reachable"] is True
    check_keys(box["data"], PREFLIGHT_KEYS, "fleet preflight.hosts[].data")  # the host's own preflight document
    check_items(box["data"]["findings"], FINDING_KEYS, "fleet preflight.hosts[].data.findings")
    assert hosts["down"]["reachable"] is False


def test_fleet_swap(fleet: Fleet) -> None:
    # nothing is deployed on the host: its swap refuses with an error object, which comes back as the host's data
    code, doc = rigctl_json("fleet", "swap", "qwen3-8b-vllm", "glm53-flash", "--hosts", str(fleet.through_rigctl),
                            "--json", env=fleet.env)
    assert code == 1
    box = _hosts(doc, "fleet swap")["box00"]
    assert box["via"] == "rigctl" and box["ok"] is False and isinstance(box["error"], str)
    check_keys(box["data"], ENVELOPE | {"error"}, "fleet swap.hosts[].data")
    check_keys(box["data"]["error"], {"code", "message", "fix"}, "fleet swap.hosts[].data.error")
    assert box["data"]["command"] == "swap" and box["data"]["error"]["code"] == "deploy-failed"


def test_host_option(fleet: Fleet) -> None:
    code, doc = rigctl_json("--hosts", str(fleet.through_rigctl), "--host", "box00", "recipes", "--json",
                            env=fleet.env)
    assert code == 0, doc
    check_envelope(doc, "recipes", True)
    check_keys(doc, RECIPES_KEYS | {"host"}, "--host box00 recipes")  # the remote document, and which host said it
    assert doc["host"] == "box00"
