"""Arbitrary strings through render and the real quadlet generator: the argv systemd would hand to
podman must carry exactly the recipe's value, or render must refuse it with a RigctlError.

Refusing is allowed, so a property could pass while testing nothing (every example refused, or thrown
away by the recipe model). Each property therefore counts the examples that were carried into a unit
and checked, and fails when fewer than ``MIN_CHECKED`` were (observed: 37 to 60 of 60 per property)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pytest
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from rigctl.errors import InvalidInputError, RigctlError
from rigctl.recipe.load import load, validate_data
from rigctl.recipe.model import Recipe
from rigctl.render.engines import engine_line
from rigctl.render.units import render_units

_SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # not encodable as UTF-8
# Characters that matter to one of the parsers involved, plus any printable unicode.
_SPECIAL = list(' %$"\'\\;:,=#&|*?~`{}[]()<>!@^\u00a0\u2028\u3000é😀\u0085')
_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(_SPECIAL),
        st.characters(blacklist_categories=_SURROGATES, blacklist_characters=[chr(c) for c in range(32)] + ["\x7f"]),
    ),
    max_size=24,
)
MAX_EXAMPLES = 60
MIN_CHECKED = MAX_EXAMPLES // 4  # examples each property must have carried into a unit and checked
_SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None)


@dataclass
class Tally:
    """What one property's examples came to: checked (carried into the unit, value compared) or refused."""

    checked: int = 0
    refused: int = 0

    def require_enough_checked(self) -> None:
        assert self.checked >= MIN_CHECKED, (
            f"only {self.checked} example(s) were carried into a unit and checked ({self.refused} refused by "
            f"render, the rest by the recipe model); at least {MIN_CHECKED} must be, or the property tests nothing"
        )


def _base() -> dict[str, Any]:
    return load("qwen3-8b-vllm").recipe.model_dump(mode="json")


def _validate_or_skip(data: dict[str, Any]) -> Recipe:
    try:
        return validate_data(data, "property")
    except InvalidInputError:
        assume(False)  # the recipe model refuses it first (control characters, relative paths, ...)
        raise


def _generate_argv(recipe: Recipe, generate: Callable[..., Any], exec_argv: Callable[[str], list[str]],
                   tmp: Path, tally: Tally, **kwargs: Any) -> list[str] | None:
    try:
        rendered = render_units(recipe, podman_version=(5, 4), **kwargs)
    except RigctlError as err:
        event(f"refused: {err.message.split(':')[0]}")
        tally.refused += 1
        return None  # refused: an allowed outcome, as long as it is a RigctlError and not a crash
    event("carried")
    return exec_argv(generate(rendered, tmp, False).exec_start())


def _after(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


@pytest.mark.integration
def test_environment_value(tmp_path: Path, generate: Callable[..., Any],
                           exec_argv: Callable[[str], list[str]]) -> None:
    tally = Tally()

    @_SETTINGS
    @given(value=_TEXT)
    def environment_value(value: str) -> None:
        data = _base()
        data["container"]["env"]["PROBE"] = value
        argv = _generate_argv(_validate_or_skip(data), generate, exec_argv, tmp_path, tally)
        if argv is not None:
            assert f"PROBE={value}" in _after(argv, "--env")
            tally.checked += 1

    environment_value()
    tally.require_enough_checked()


@pytest.mark.integration
def test_engine_arguments(tmp_path: Path, generate: Callable[..., Any],
                          exec_argv: Callable[[str], list[str]]) -> None:
    tally = Tally()

    @_SETTINGS
    @given(values=st.lists(_TEXT, min_size=1, max_size=4))
    def engine_arguments(values: list[str]) -> None:
        data = _base()
        data["engine"]["args"] = ["--probe", *values]
        recipe = _validate_or_skip(data)
        argv = _generate_argv(recipe, generate, exec_argv, tmp_path, tally)
        if argv is not None:
            image_at = argv.index(recipe.image)
            assert argv[image_at + 1 :] == engine_line(recipe).argv
            assert argv[-len(values) :] == values
            tally.checked += 1

    engine_arguments()
    tally.require_enough_checked()


@pytest.mark.integration
def test_volume_path(tmp_path: Path, generate: Callable[..., Any], exec_argv: Callable[[str], list[str]]) -> None:
    tally = Tally()

    @_SETTINGS
    @given(name=_TEXT, read_only=st.booleans())
    def volume_path(name: str, read_only: bool) -> None:
        data = _base()
        host = f"/srv/{name}"
        data["container"]["volumes"].append({"host": host, "container": f"/mnt/{name}x", "read_only": read_only})
        argv = _generate_argv(_validate_or_skip(data), generate, exec_argv, tmp_path, tally)
        if argv is not None:
            assert f"{host}:/mnt/{name}x:{'ro' if read_only else 'rw'}" in _after(argv, "-v")
            tally.checked += 1

    volume_path()
    tally.require_enough_checked()


@pytest.mark.integration
def test_label_value(tmp_path: Path, generate: Callable[..., Any], exec_argv: Callable[[str], list[str]]) -> None:
    tally = Tally()

    @_SETTINGS
    @given(value=_TEXT)
    def label_value(value: str) -> None:
        recipe = _validate_or_skip(_base())
        argv = _generate_argv(recipe, generate, exec_argv, tmp_path, tally, labels_extra={"example.probe": value})
        if argv is not None:
            assert f"example.probe={value}" in _after(argv, "--label")
            tally.checked += 1

    label_value()
    tally.require_enough_checked()


@pytest.mark.parametrize("value", ["a b", "100%", "$HOME", 'say "hi"', "back\\slash", "it's", "é😀", "--x=;"])
def test_ordinary_special_values_are_not_refused(value: str) -> None:
    data = _base()
    data["container"]["env"]["PROBE"] = value
    data["engine"]["args"] = ["--probe", value]
    render_units(validate_data(data, "test"), podman_version=(5, 4))
