"""Host probes against real temporary files, sockets and podman; inventory round trips; licenses."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
from pathlib import Path
from typing import Any

import pytest
from tests.support.nvml_fake import FakeNvml

from rigctl.errors import InvalidInputError
from rigctl.host.checksums import ChecksumCache, hash_files
from rigctl.host.facts import HostFacts
from rigctl.host.gather import facts_from_json, gather_facts, load_inventory
from rigctl.host.licenses import accept, read_acceptances
from rigctl.host.nvml import probe_gpus
from rigctl.host.probes import probe_cdi, probe_path, probe_podman, probe_ports, probe_systemd
from rigctl.util.text import VERSION, envelope

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"


def box(name: str) -> FakeNvml:
    return FakeNvml(json.loads((FIXTURES / "boxes" / f"{name}.json").read_text()))


@pytest.fixture(autouse=True)
def _isolated_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_gather_on_this_host_round_trips_through_json(tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "model-00001-of-00001.safetensors").write_bytes(b"x" * 10)
    facts = gather_facts([str(ckpt)], nvml=box("pro6000-mixed"), podman_sockets=[])
    assert facts.rigctl == "1" and facts.probe_errors == {}
    assert facts.gpu.devices[0].name.endswith("Max-Q Workstation Edition")
    probe = facts.path(str(ckpt))
    assert probe is not None and probe.exists and probe.file("model-00001-of-00001.safetensors").size == 10  # type: ignore[union-attr]
    assert facts.shm.total_bytes and facts.shm.total_bytes > 0
    again = HostFacts.model_validate_json(facts.model_dump_json())
    assert again == facts


def test_a_crashing_probe_costs_only_its_section() -> None:
    class Broken(FakeNvml):
        def nvmlInit(self) -> None:
            raise RuntimeError("boom")

    facts = gather_facts([], nvml=Broken({"devices": []}), podman_sockets=[])
    assert facts.gpu.available is False
    assert facts.probe_errors == {"gpu": "RuntimeError: boom"}
    assert facts.shm.total_bytes is not None


def test_inventory_replay_of_the_real_h200_capture() -> None:
    facts = load_inventory(FIXTURES / "h200.json")
    (gpu,) = facts.gpu.devices
    assert gpu.name == "NVIDIA H200" and gpu.compute_capability == "9.0" and facts.gpu.driver_version == "580.159.04"
    busy = load_inventory(FIXTURES / "h200-busy.json")
    (proc,) = busy.gpu.devices[0].processes
    assert proc.name == "python3" and proc.used_memory_bytes


def test_the_inventory_envelope_is_accepted_as_written_and_nothing_more() -> None:
    """`rigctl inventory --json` writes command, ok and version around the facts (util.text.envelope): all
    three are set aside; the same keys outside an envelope, or a version no rigctl writes, are refused."""
    facts = gather_facts([], nvml=box("pro6000-single"), podman_sockets=[])
    written = json.loads(json.dumps(envelope("inventory", True, facts.model_dump(mode="json"))))
    assert list(written)[-1] == "version" and written["version"] == VERSION
    assert facts_from_json(written, "x.json") == facts
    old = {k: v for k, v in written.items() if k != "version"}  # a capture made before `version` was added
    assert facts_from_json(old, "x.json") == facts
    bare = facts.model_dump(mode="json")  # the document alone, as a program may write it
    assert facts_from_json(bare, "x.json") == facts
    with pytest.raises(InvalidInputError, match="version: unknown key"):
        facts_from_json({**bare, "version": VERSION}, "x.json")  # no envelope: no envelope keys
    with pytest.raises(InvalidInputError, match="colour: unknown key"):
        facts_from_json({**written, "colour": "blue"}, "x.json")
    with pytest.raises(InvalidInputError, match="is not the version of a rigctl"):
        facts_from_json({**written, "version": {"major": 1}}, "x.json")


def test_inventory_schema_is_checked(tmp_path: Path) -> None:
    data = json.loads((FIXTURES / "h200.json").read_text())
    assert data["command"] == "inventory"  # the envelope `rigctl inventory --json` prints is accepted as is
    with pytest.raises(InvalidInputError, match="schema '2' is not supported"):
        facts_from_json({**data, "rigctl": "2"}, "x.json")
    with pytest.raises(InvalidInputError, match=r"gpu\.available"):
        facts_from_json({**data, "gpu": {"available": "perhaps"}}, "x.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InvalidInputError, match="not JSON"):
        load_inventory(bad)


def test_probe_path_missing_uses_nearest_parent(tmp_path: Path) -> None:
    probe = probe_path(str(tmp_path / "a" / "b"))
    assert not probe.exists and probe.probed == str(tmp_path) and probe.free_bytes and probe.files is None


def test_cdi_spec_devices_and_driver_version(tmp_path: Path) -> None:
    (tmp_path / "nvidia.yaml").write_text(
        "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: '0'\n- name: GPU-abc\n- name: all\n"
        "containerEdits:\n  mounts:\n  - hostPath: /usr/lib/x86_64-linux-gnu/libcuda.so.580.95.05\n")
    (tmp_path / "junk.yaml").write_text(": : :\n")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libnvidia-ml.so.580.95.05").write_bytes(b"")
    cdi = probe_cdi("580.95.05", dirs=[str(tmp_path)], lib_dirs=[str(lib)])
    spec = next(s for s in cdi.specs if s.path.endswith("nvidia.yaml"))
    assert spec.devices == ["0", "GPU-abc", "all"] and spec.driver_versions == ["580.95.05"]
    assert next(s for s in cdi.specs if s.path.endswith("junk.yaml")).error
    assert cdi.driver_library == str(lib / "libnvidia-ml.so.580.95.05") and cdi.driver_installed_ns


def _listening(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.listen(1)
    return sock


def test_systemd_managers_are_asked_not_inferred(tmp_path: Path) -> None:
    """A manager counts when its private socket answers; the marker directory, or a socket file whose
    manager is gone, is not enough (operator issue: `/run/systemd/system` existing made preflight say
    "system manager present" while nothing answered)."""
    run, rt = tmp_path / "run", tmp_path / "rt"
    (run / "system").mkdir(parents=True)
    (rt / "systemd").mkdir(parents=True)
    (tmp_path / "linger").mkdir()
    (rt / "systemd" / "private").write_text("")  # a plain file where the socket would be
    facts = probe_systemd(str(run), str(tmp_path / "linger"), str(rt))
    assert not facts.system_manager and not facts.user_manager
    (rt / "systemd" / "private").unlink()
    with _listening(run / "private"), _listening(rt / "systemd" / "private"):
        facts = probe_systemd(str(run), str(tmp_path / "linger"), str(rt))
        assert facts.system_manager and facts.user_manager and facts.linger is False
        (tmp_path / "linger" / str(facts.user)).write_text("")
        assert probe_systemd(str(run), str(tmp_path / "linger"), str(rt)).linger is True
    # the manager is gone, its socket file left behind: the connection is refused
    assert not probe_systemd(str(run), str(tmp_path / "linger"), str(rt)).system_manager
    (run / "system").rmdir()  # a socket that answers, on a host not booted by systemd
    (run / "private").unlink()
    with _listening(run / "private"):
        assert not probe_systemd(str(run), str(tmp_path / "linger"), str(rt)).system_manager


def test_ports_lists_a_real_listener() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        ports = probe_ports()
        holder = ports.holder(port, "127.0.0.1")
        assert holder is not None and holder.pid == os.getpid()
        assert ports.holder(port, "0.0.0.0") is not None and ports.holder(port, "10.9.9.9") is None


def test_real_podman_cli(need: Any) -> None:
    need(shutil.which("podman") is not None, "podman is not installed")
    facts = probe_podman(sockets=[])
    assert facts.installed and facts.version and facts.images_via == "cli"


def test_license_record_round_trip_and_fail_closed(tmp_path: Path) -> None:
    store = tmp_path / "licenses.json"
    assert read_acceptances(store) == ([], None)
    rec = accept("shapleymcg-license-1.0", recipe="glm53-flash", path=store)
    assert accept("shapleymcg-license-1.0", path=store) == rec  # idempotent
    records, problem = read_acceptances(store)
    assert [r.id for r in records] == ["shapleymcg-license-1.0"] and problem is None
    store.write_text("{broken")
    records, problem = read_acceptances(store)
    assert records == [] and problem and "not a license record" in problem
    with pytest.raises(InvalidInputError):
        accept("other", path=store)


def test_checksums_match_hashlib_and_are_cached(tmp_path: Path) -> None:
    files = []
    for i, size in enumerate((0, 1, 5 * 1024 * 1024 + 3, 9 * 1024 * 1024)):
        f = tmp_path / f"s{i}"
        f.write_bytes(os.urandom(size))
        files.append(f)
    cache = ChecksumCache(tmp_path / "c.json")
    seen: list[int] = []
    first = hash_files(files, workers=2, cache=cache, progress=seen.append)
    assert [h.sha256 for h in first] == [hashlib.sha256(f.read_bytes()).hexdigest() for f in files]
    assert sum(seen) == sum(f.stat().st_size for f in files) and not any(h.cached for h in first)
    second = hash_files(files, cache=ChecksumCache(tmp_path / "c.json"))
    assert all(h.cached for h in second) and [h.sha256 for h in second] == [h.sha256 for h in first]
    files[2].write_bytes(b"changed")
    third = hash_files(files, cache=ChecksumCache(tmp_path / "c.json"))
    assert not third[2].cached and third[2].sha256 == hashlib.sha256(b"changed").hexdigest()


def test_the_real_two_h200_inventory_of_an_older_rigctl_still_loads() -> None:
    facts = load_inventory(FIXTURES / "h200x2.json")  # made before rigctl recorded links: no link fields
    (pair,) = facts.gpu.pairs
    assert (pair.p2p_ok, pair.topology, pair.link, pair.nvlink_links) == (True, 30, None, None)
    assert all(g.nvlink is None for g in facts.gpu.devices)


def test_the_links_inventory_holds_what_the_fake_gathers_from_the_real_capture() -> None:
    """h200x2-links.json: a two-H200 inventory with link facts. Until a real recapture replaces it, it is
    h200x2.json with its gpu section gathered from the real NVML capture through the fake; either way its
    link facts must be what today's probe gathers from that capture."""
    capture = json.loads((FIXTURES / "boxes" / "h200x2-nvlink.json").read_text())
    gathered = probe_gpus(FakeNvml(capture), process_name=lambda pid: None)
    facts = load_inventory(FIXTURES / "h200x2-links.json")
    assert facts.gpu.pairs == gathered.pairs
    assert [g.nvlink for g in facts.gpu.devices] == [g.nvlink for g in gathered.devices]
    assert [(g.name, g.pcie_generation, g.pcie_width) for g in facts.gpu.devices] == [("NVIDIA H200", 5, 16)] * 2
    (pair,) = facts.gpu.pairs
    assert (pair.link, pair.nvlink_links, pair.nvlink_version) == ("nvlink", 18, 6)


@pytest.mark.parametrize(("where", "change", "field"), [
    ("pair", {"link": "nvlink", "nvlink_links": None}, "nvlink_links"),
    ("pair", {"link": "pcie", "nvlink_links": 18}, "nvlink_links"),
    ("pair", {"nvlink_links": 10**9, "link": "nvlink"}, "nvlink_links"),
    ("pair", {"link": "infiniband"}, "link"),
    ("pair", {"p2p_nvlink": -1}, "p2p_nvlink"),
    ("gpu", {"nvlink": {"supported": False, "active": 18}}, "supported"),
    ("gpu", {"nvlink": {"supported": True, "active": 1000}}, "active"),
    ("gpu", {"nvlink": {"supported": True, "active": -2}}, "active"),
])
def test_impossible_link_facts_are_refused(where: str, change: dict[str, Any], field: str) -> None:
    data = json.loads((FIXTURES / "h200x2-links.json").read_text())
    target = data["gpu"]["pairs"][0] if where == "pair" else data["gpu"]["devices"][0]
    target.update(change)
    with pytest.raises(InvalidInputError, match=field):
        facts_from_json(data, "x.json")


def test_refresh_probes_gpus_and_ports_again_and_keeps_the_rest(monkeypatch: pytest.MonkeyPatch) -> None:
    """What swap plans TO on once FROM stopped: the ports and GPUs as they are now, podman as gathered."""
    from rigctl.host import gather
    from rigctl.host.facts import GpuInventory, PodmanFacts, Ports

    old = HostFacts(gpu=GpuInventory(available=False, error="before"), podman=PodmanFacts(installed=True,
                    version="5.4.2"), ports=Ports(), probe_errors={"ports": "stale", "podman": "kept"})
    calls: list[str] = []
    monkeypatch.setattr(gather, "_probe_gpus", lambda *_: calls.append("gpu") or GpuInventory(available=False,
                                                                                              error="now"))
    monkeypatch.setattr(gather.probes, "probe_ports", lambda **_: calls.append("ports") or Ports())
    new = gather.refresh_facts(old, owners_of=[8000])
    assert sorted(calls) == ["gpu", "ports"]
    assert new.gpu.error == "now" and new.podman == old.podman
    assert new.probe_errors == {"podman": "kept"}
