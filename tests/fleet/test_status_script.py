"""`fleet status`'s script, run by a real `sh` with a stand-in podman, the way a host answers it: podman 5 on a
cgroup v1 host warns on stderr at every call ("Using cgroups-v1 which is deprecated ..."), and that warning must
not be read as part of `podman ps`'s JSON (seen on the Debian 13 testbed: every host said "podman ps answered
something that is not a JSON list"); a podman that fails is reported with what it said on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rigctl.fleet.host_status import host_status
from rigctl.fleet.inventory import Host
from rigctl.util.proc import Completed, run

WARNING = ('time="2026-12-02T18:27:27Z" level=warning msg="Using cgroups-v1 which is deprecated in favor of '
           'cgroups-v2 with Podman v5 and will be removed in a future version."')
CONTAINER = {"Id": "0123456789abcdef", "Names": ["vllm-a"], "State": "running", "Image": "x@sha256:" + "0" * 64,
             "Labels": {"rigctl.recipe": "a"}}


class LocalShell:
    """A Transport that runs the command with this machine's /bin/sh, the stand-in podman first on PATH."""

    def __init__(self, bindir: Path) -> None:
        self.env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(bindir)}

    def run(self, host: Host, command: str, *, timeout: float) -> Completed:
        return run(["/bin/sh", "-c", command], timeout=timeout, env=self.env)


def _podman(bindir: Path, *, stdout: str, stderr: str, rc: int) -> None:
    bindir.mkdir(parents=True, exist_ok=True)
    (bindir / "out").write_text(stdout)
    (bindir / "err").write_text(stderr + "\n")
    script = bindir / "podman"
    script.write_text(f"#!/bin/sh\ncat '{bindir}/out'\ncat '{bindir}/err' >&2\nexit {rc}\n")
    script.chmod(0o755)


@pytest.mark.parametrize("warned", [False, True])
def test_podman_stderr_is_not_its_json(tmp_path: Path, warned: bool) -> None:
    _podman(tmp_path, stdout=json.dumps([CONTAINER]), stderr=WARNING if warned else "", rc=0)
    result = host_status(Host(name="box", ssh="box"), LocalShell(tmp_path), timeout=30)
    assert result.error is None, result
    assert result.data["podman_error"] is None, result.data
    assert [c["name"] for c in result.data["containers"]] == ["vllm-a"]
    assert result.data["containers"][0]["state"] == "running"


def test_a_failing_podman_is_reported_with_what_it_said(tmp_path: Path) -> None:
    _podman(tmp_path, stdout="", stderr=f"{WARNING}\nError: cannot connect to the storage", rc=125)
    result = host_status(Host(name="box", ssh="box"), LocalShell(tmp_path), timeout=30)
    assert result.data["containers"] == []
    assert result.data["podman_error"].startswith("podman ps failed:"), result.data
    assert "cannot connect to the storage" in result.data["podman_error"]



def _systemctl(bindir: Path, rows: list[str]) -> None:
    (bindir / "units").write_text("".join(f"{row}\n" for row in rows))
    script = bindir / "systemctl"
    script.write_text(f"#!/bin/sh\ncase \"$*\" in *--user*) exit 0;; esac\ncat '{bindir}/units'\n")
    script.chmod(0o755)


def test_every_serving_unit_the_loader_knows_is_listed(tmp_path: Path) -> None:
    """A host without rigctl: its services are listed by the names of what the unit loader reads as serving
    (``SERVICE_HINT``: a container tool or a known engine), not a shorter list of its own (lmdeploy, trtllm,
    TGI and the like were left out)."""
    _podman(tmp_path, stdout="[]", stderr="", rc=0)
    engines = ["lmdeploy", "trtllm-serve", "text-generation-launcher", "aphrodite", "koboldcpp", "mistralrs-server",
               "vllm", "rigctl-qwen"]
    _systemctl(tmp_path, [f"{name}.service loaded active running {name}" for name in [*engines, "cron"]])
    result = host_status(Host(name="box", ssh="box"), LocalShell(tmp_path), timeout=30)
    listed = [row.split()[0] for row in result.data["units"]]
    assert listed == [f"{name}.service" for name in engines], result.data


def _rigctl_status(bindir: Path, services: list[dict[str, str]]) -> str:
    """A stand-in rigctl on the host whose `status --json` judges ``services`` (exit 0: none failing)."""
    doc = {"rigctl": "1", "command": "status", "ok": True, "services": services, "failing": [], "version": "0.1.0"}
    (bindir / "status.json").write_text(json.dumps(doc))
    script = bindir / "rigctl"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = status ] || exit 2\ncat '{bindir}/status.json'\n")
    script.chmod(0o755)
    return str(script)


def test_a_canary_between_runs_and_a_stopped_model_are_not_down(tmp_path: Path) -> None:
    """A canary's oneshot service is inactive between its runs, and a unit that `rigctl down` stopped is
    ``stopped`` in the host's own `rigctl status`: neither fails the host (both did: any rigctl-named unit
    not active was "not running"). A failed canary run, or a model the host's rigctl does not judge and that
    is not active, still does."""
    _podman(tmp_path, stdout="[]", stderr="", rc=0)
    _systemctl(tmp_path, ["rigctl-a.service loaded active running rigctl: a",
                          "rigctl-a-canary.service loaded inactive dead rigctl canary of a"])
    quiet = host_status(Host(name="box", ssh="box"), LocalShell(tmp_path), timeout=30)
    assert quiet.ok is True and not any(line.startswith("  FAIL") for line in quiet.summary), quiet.summary

    _systemctl(tmp_path, ["rigctl-a.service loaded active running rigctl: a",
                          "rigctl-a-canary.service loaded failed failed rigctl canary of a"])
    failed = host_status(Host(name="box", ssh="box"), LocalShell(tmp_path), timeout=30)
    assert failed.ok is False and "  FAIL system rigctl-a-canary.service: failed (failed)" in failed.summary

    _systemctl(tmp_path, ["rigctl-b.service loaded inactive dead rigctl: b"])
    unjudged = host_status(Host(name="box", ssh="box"), LocalShell(tmp_path), timeout=30)
    assert unjudged.ok is False  # no rigctl there to say it was stopped on purpose

    program = _rigctl_status(tmp_path, [{"unit": "rigctl-b.service", "scope": "system", "recipe": "b",
                                         "verdict": "stopped", "verdict_detail": "stopped by `rigctl down`"}])
    stopped = host_status(Host(name="box", ssh="box", rigctl=program), LocalShell(tmp_path), timeout=30)
    assert stopped.ok is True, stopped.summary
    assert "  ok   system rigctl-b.service: inactive (dead)" in stopped.summary
    assert stopped.data["rigctl_units"][0]["verdict"] == "stopped"
