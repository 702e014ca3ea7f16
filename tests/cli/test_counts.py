"""Counts read as counts: `1 shard`, `8 shards` (a one-shard checkpoint was "1 shards")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.fakes import small_recipe_file

from rigctl.recipe.load import load
from rigctl.util.text import counted

pytestmark = pytest.mark.timeout(60)


def test_counted() -> None:
    assert [counted(n, "shard") for n in (0, 1, 2)] == ["0 shards", "1 shard", "2 shards"]
    assert counted(1, "match", "matches") == "1 match" and counted(3, "match", "matches") == "3 matches"


def test_a_one_shard_checkpoint_is_one_shard(tmp_path: Path) -> None:
    path = small_recipe_file(tmp_path, "one-shard", port=18431)
    (name,) = load(str(path)).recipe.checkpoint.shard_names()
    (tmp_path / "ckpt" / name).write_bytes(b"\0" * 1000)
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    done = subprocess.run([sys.executable, "-m", "rigctl", "preflight", str(path), "--json"], capture_output=True,
                          text=True, env=env, timeout=50, check=False)
    finding = next(f for f in json.loads(done.stdout)["findings"] if f["id"] == "checkpoint")
    assert finding["message"].startswith("1 shard, 1,000 bytes (exact)"), finding
