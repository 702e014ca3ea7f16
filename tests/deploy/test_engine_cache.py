"""The engine cache on the host (#36): cold or warm at a start, its size, removing it with its last user
(never through a link, never under a directory another user controls), the boot history's cold and warm
times, and doctor's rule for a cache no unit mounts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rigctl.deploy import engine_cache, history
from rigctl.deploy.down import DownResult, _remove_engine_cache
from rigctl.deploy.state import DeploymentRecord, save
from rigctl.doctor.host_state import DoctorFacts
from rigctl.doctor.rules.host import engine_cache_orphan
from rigctl.places import Scope


def _file(path: Path, size: int = 10) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\0" * size)
    return path


def test_cold_until_the_engine_left_a_file(tmp_path: Path) -> None:
    cache = tmp_path / "cache" / "k"
    assert engine_cache.warmth(None) is None
    assert engine_cache.warmth(cache) == "cold"  # not made yet: systemd makes it at the start
    (cache / "vllm" / "torch_compile_cache").mkdir(parents=True)
    assert engine_cache.warmth(cache) == "cold"  # directories only
    outside = _file(tmp_path / "elsewhere" / "big.bin")
    (cache / "vllm" / "link").symlink_to(outside)
    assert engine_cache.warmth(cache) == "cold"  # a link is not the engine's artifact, and is not followed
    _file(cache / "vllm" / "torch_compile_cache" / "a" / "artifact.bin", 4096)
    assert engine_cache.warmth(cache) == "warm"


def test_size_is_bounded_and_says_when_it_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "k"
    for i in range(30):
        _file(cache / "triton" / f"{i:02d}" / "kernel.cubin", 100)
    found = engine_cache.size(cache)
    assert found is not None and found.bytes == 3000 and found.files == 30 and found.complete
    monkeypatch.setattr(engine_cache, "WALK_MOST", 10)
    partial = engine_cache.size(cache)
    assert partial is not None and not partial.complete and partial.files < 30
    assert engine_cache.size(tmp_path / "none") is None


def test_remove_takes_the_tree_and_never_what_a_link_leads_to(tmp_path: Path) -> None:
    root = tmp_path / "engine-cache"
    cache = root / "k"
    keep = _file(tmp_path / "precious" / "data.bin")
    _file(cache / "a" / "b.bin")
    (cache / "a" / "escape").symlink_to(keep.parent)
    os.chmod(tmp_path, 0o755)
    assert engine_cache.remove(cache) is None
    assert not cache.exists() and keep.exists()


def test_remove_refuses_under_a_directory_others_can_write(tmp_path: Path) -> None:
    root = tmp_path / "shared"
    _file(root / "k" / "x.bin")
    os.chmod(root, 0o777)  # not sticky: anyone could have swapped what is in it
    why = engine_cache.remove(root / "k")
    assert why is not None and (root / "k" / "x.bin").exists()


def _record(name: str, key: str) -> DeploymentRecord:
    return DeploymentRecord(recipe=name, scope=Scope.USER, unit=f"rigctl-{name}.service", container=f"rigctl-{name}",
                            unit_dir="/tmp", unit_files=[f"rigctl-{name}.container"], endpoint="http://127.0.0.1:1",
                            served_name="m", image="i@sha256:" + "0" * 64, engine_cache=key)


def test_down_remove_keeps_a_cache_another_deployment_mounts(tmp_path: Path) -> None:
    state, root = tmp_path / "state", tmp_path / "engine-cache"
    state.mkdir()
    _file(root / "k" / "x.bin")
    save(state, _record("other", "k"))
    result = DownResult(recipe="gone", unit="rigctl-gone.service", was_active="inactive", stopped=True,
                        container_gone=True)
    _remove_engine_cache(root / "k", "k", state, result)
    assert (root / "k").exists() and result.engine_cache_kept and "other" in result.engine_cache_kept
    (state / "other.json").unlink()
    again = DownResult(recipe="gone", unit="rigctl-gone.service", was_active="inactive", stopped=True,
                       container_gone=True)
    _remove_engine_cache(root / "k", "k", state, again)
    assert not (root / "k").exists() and again.removed == [str(root / "k")]


def test_a_record_naming_a_path_as_its_cache_is_refused() -> None:
    assert any("engine_cache" in p for p in _record("x", "../../etc").problems())


def test_the_boot_history_tells_cold_from_warm() -> None:
    boots = [history.Boot(at=1.0, recipe_digest="d", image="i", status="ready", total_s=95.0, phases=(), cache="cold"),
             history.Boot(at=2.0, recipe_digest="d", image="i", status="died", total_s=3.0, phases=(), cache="warm"),
             history.Boot(at=3.0, recipe_digest="d", image="i", status="ready", total_s=12.5, phases=(), cache="warm")]
    assert history.by_cache(boots) == {"cold": {"total_s": 95.0, "at": 1.0}, "warm": {"total_s": 12.5, "at": 3.0}}
    back = history.Boot.from_dict({**boots[0].to_dict(), "cache": "lukewarm"})
    assert back is not None and back.cache is None


def test_doctor_names_a_cache_no_unit_mounts() -> None:
    facts = DoctorFacts(engine_caches={"user": [("abc-gpu", 3 * 2**30), ("def-gpu", None)]})
    hits = engine_cache_orphan([], facts)
    assert [h.subject.rsplit("/", 1)[1] for h in hits] == ["abc-gpu", "def-gpu"]
    assert "3.0 GiB" in hits[0].message and "rm -rf" in hits[0].fix


def test_doctor_walks_and_names_only_the_caches_no_unit_mounts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache a unit mounts is neither named nor walked (it may hold gigabytes); one no unit mounts is."""
    from rigctl.doctor import host_state
    from rigctl.host.unit import Unit

    root = tmp_path / "engine-cache"
    _file(root / "mounted-key" / "k.bin", 100)
    _file(root / "left-key" / "k.bin", 200)
    unit = Unit.of("/u/rigctl-x.container", "[Container]\nImage=i\n[Service]\n"
                                            "CacheDirectory=rigctl/engine-cache/mounted-key\n")
    assert engine_cache.mounted_keys([unit]) == {"mounted-key"}
    walked: list[str] = []
    real_size = engine_cache.size
    monkeypatch.setattr(engine_cache, "size", lambda p: (walked.append(p.name), real_size(p))[1])
    monkeypatch.setattr("rigctl.places.engine_cache_root", lambda scope, env=None: root)
    found = host_state._caches(Scope.USER, [unit])
    assert found == [("left-key", 200)] and walked == ["left-key"]
    hits = engine_cache_orphan([], DoctorFacts(engine_caches={"user": found}))
    assert [h.subject.rsplit("/", 1)[1] for h in hits] == ["left-key"]
