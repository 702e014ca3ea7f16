"""The engine table: a row for every engine kind, and a kind without one refused (never given another
engine's flags)."""

from __future__ import annotations

import json

import pytest
from tests.support.recipes import recipe_with
from typer.testing import CliRunner

from rigctl.errors import RigctlError
from rigctl.exitcodes import ExitCode
from rigctl.recipe.model import EngineKind, Recipe
from rigctl.render.engines import ENGINES, UnknownEngineError, engine_line
from rigctl.render.units import render_units

# what only each engine's own server parses: the flag naming the checkpoint
OWN_FLAG = {EngineKind.VLLM: "--model", EngineKind.TABBYAPI: "--model-dir", EngineKind.SGLANG: "--model-path"}


def _as(kind: str) -> Recipe:
    return recipe_with(engine__kind=kind, engine__env={}, engine__args=[])


def test_every_engine_kind_has_a_row_that_spells_its_own_flags() -> None:
    assert set(ENGINES) == set(EngineKind) == set(OWN_FLAG)
    for kind in EngineKind:
        argv = engine_line(_as(kind.value)).argv
        assert OWN_FLAG[kind] in argv, kind
        assert not [f for other, f in OWN_FLAG.items() if other is not kind and f in argv], kind
        assert argv[argv.index("--port") + 1] == "8001"


def test_a_kind_the_table_lacks_is_refused() -> None:
    recipe = _as("vllm")
    unknown = recipe.model_copy(update={"engine": recipe.engine.model_copy(update={"kind": "llamacpp"})})
    with pytest.raises(UnknownEngineError) as refused:
        render_units(unknown, podman_version=(5, 4))
    assert isinstance(refused.value, RigctlError) and refused.value.exit_code == ExitCode.INVALID_INPUT
    assert refused.value.code == "unknown-engine"
    assert refused.value.message.startswith("engine.kind 'llamacpp': rigctl has no flags for this engine")
    assert refused.value.fix == "set engine.kind to one of vllm, tabbyapi, sglang"


def test_an_engine_that_lost_its_row_is_refused_on_the_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """What used to happen to a kind nobody wrote flags for: TabbyAPI's flags. Now exit 3 and the reason."""
    from rigctl.cli.app import app  # every command registered

    monkeypatch.delitem(ENGINES, EngineKind.SGLANG)
    with pytest.raises(UnknownEngineError):
        engine_line(_as("sglang"))
    result = CliRunner().invoke(app, ["render", "glm53-flash", "--set", "engine.kind=sglang", "--set",
                                      "engine.env={}", "--json"])
    assert result.exit_code == 3, result.output
    error = json.loads(result.output)["error"]
    assert error["code"] == "unknown-engine" and "engine.kind 'sglang'" in error["message"]
    assert "Traceback" not in result.output
