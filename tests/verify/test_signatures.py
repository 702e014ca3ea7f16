"""Crash signatures from a recipe matched against engine output."""

from __future__ import annotations

from pathlib import Path

from rigctl.recipe.load import load
from rigctl.recipe.model import CrashSignature
from rigctl.verify.signatures import match_signatures

LOG = """\
INFO 11-29 10:26:49 [api_server.py:1] Starting vLLM API server on http://0.0.0.0:8001
ERROR [core.py:1043] EngineCore encountered a fatal error.
ValueError: ReplaySSM prefill source/state row count mismatch
vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue.
INFO:     Shutting down
"""


def test_bundled_recipe_signatures_match_the_story_crash() -> None:
    recipe = load("glm53-flash-k3-dflash2").recipe
    hits = match_signatures(recipe.known_issues.signatures, LOG)
    ids = [h.id for h in hits]
    assert "replayssm-row-mismatch" in ids and "engine-dead" in ids
    replay = next(h for h in hits if h.id == "replayssm-row-mismatch")
    assert replay.line_number == 3
    assert replay.line.startswith("ValueError: ReplaySSM")
    assert "USE_REPLAYSSM" in replay.remedy


def test_first_only_and_iterables(tmp_path: Path) -> None:
    sig = CrashSignature(id="oom", pattern=r"CUDA out of memory", meaning="m", remedy="r")
    path = tmp_path / "log"
    path.write_text("a\nCUDA out of memory\nb\nCUDA out of memory\n")
    with path.open() as lines:
        assert [h.line_number for h in match_signatures([sig], lines)] == [2, 4]
    assert len(match_signatures([sig], path.read_text(), first_only=True)) == 1
    assert match_signatures([sig], "all good\n") == []
