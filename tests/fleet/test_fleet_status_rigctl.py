"""`fleet status` on a host with rigctl takes that rigctl's own judgement of its units (#25): a model that
does not serve (the host's `status` exits 7) makes the host fail, with the unit as a structured row, its
verdict and last exit, and the version of the rigctl that answered; a hostile answer stays one host's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fleet.test_fleet_doctor_fix import _hosts_file, _one_json, _rigctl

from rigctl.exitcodes import ExitCode


def _fake_status(where: Path, services: list[dict[str, Any]], failing: list[str], rc: int) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    doc = {"rigctl": "1", "command": "status", "ok": rc == 0, "services": services, "failing": failing,
           "version": "0.1.0"}
    (where / "out").write_text(json.dumps(doc))
    script = where / "rigctl"
    script.write_text(f"#!/bin/sh\n[ \"$1\" = status ] || exit 2\ncat '{where / 'out'}'\nexit {rc}\n")
    script.chmod(0o755)
    return script


def _row(unit: str, verdict: str, said: str | None = None) -> dict[str, Any]:
    return {"recipe": unit.removeprefix("rigctl-").removesuffix(".service"), "scope": "user", "unit": unit,
            "verdict": verdict, "verdict_detail": f"{verdict}\nFAIL forged line", "health": "down",
            "endpoint": "http://127.0.0.1:8000",
            "last_exit": {"said": said, "status": 137, "how": "killed", "at": None, "phase": "serving",
                          "source": "podman-events"} if said else None}


def test_a_host_whose_model_is_down_fails_with_structured_rows(ssh_fleet: Any, private_control_dir: Any,
                                                               tmp_path: Path) -> None:
    down, fine = ssh_fleet.hosts[0].name, ssh_fleet.hosts[1].name
    programs = {
        down: str(_fake_status(tmp_path / "down", [_row("rigctl-a.service", "failed", "signal 9"),
                                                   _row("rigctl-b.service", "serving")],
                               ["rigctl-a.service"], ExitCode.SERVICE_DOWN)),
        fine: str(_fake_status(tmp_path / "fine", [_row("rigctl-c.service", "serving")], [], ExitCode.OK)),
    }
    done = _rigctl("fleet", "status", "--hosts", str(_hosts_file(ssh_fleet, tmp_path, programs)), "--json")
    doc = _one_json(done)
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert hosts[down]["ok"] is False and done.returncode != ExitCode.OK, doc
    assert hosts[down]["rigctl_version"] == "0.1.0"
    rows = {r["unit"]: r for r in hosts[down]["data"]["rigctl_units"]}
    assert rows["rigctl-a.service"]["verdict"] == "failed" and rows["rigctl-a.service"]["last_exit"] == "signal 9"
    assert rows["rigctl-b.service"]["verdict"] == "serving"
    assert "\n" not in rows["rigctl-a.service"]["detail"]  # remote text stays one line
    assert any(line.startswith("FAIL 1 rigctl model(s) not serving") for line in hosts[down]["summary"])
    assert [r["verdict"] for r in hosts[fine]["data"]["rigctl_units"]] == ["serving"]
    assert not any("not serving" in line for line in hosts[fine]["summary"])


def test_a_status_answer_that_cannot_be_understood_fails_only_that_host(ssh_fleet: Any, private_control_dir: Any,
                                                                       tmp_path: Path) -> None:
    name = ssh_fleet.hosts[2].name
    where = tmp_path / "bad"
    where.mkdir()
    script = where / "rigctl"
    # ok: true with exit 7: the envelope disagrees with the exit status
    script.write_text("#!/bin/sh\necho '{\"rigctl\": \"1\", \"command\": \"status\", \"ok\": true, \"services\": []}'\n"
                      "exit 7\n")
    script.chmod(0o755)
    done = _rigctl("fleet", "status", "--hosts", str(_hosts_file(ssh_fleet, tmp_path, {name: str(script)})), "--json")
    (host,) = _one_json(done)["hosts"]
    assert host["ok"] is False and host["data"]["rigctl_units"] is None
    assert any(line.startswith(f"FAIL rigctl status on {name}") for line in host["summary"])
