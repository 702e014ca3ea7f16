"""The escaping filters on their own: what they produce and what they refuse."""

from __future__ import annotations

import pytest

from rigctl.render.escape import RenderError, raw, text, word


@pytest.mark.parametrize(("value", "expected"), [
    ("--port", "--port"),
    ("a b", '"a b"'),
    ("100%", '"100%%"'),
    ("$HOME", '"$$HOME"'),
    ('q"q', '"q\\"q"'),
    ("b\\s", '"b\\\\s"'),
    ("it's", '"it\'s"'),
    ("--x=;", '"--x=;"'),
])
def test_word(value: str, expected: str) -> None:
    assert word(value) == expected


@pytest.mark.parametrize("value", ["", ";", "a\nb", "tab\there", "\x7f"])
def test_word_refuses(value: str) -> None:
    with pytest.raises(RenderError):
        word(value)


def test_raw_doubles_specifiers_and_dollars_only() -> None:
    assert raw('/srv/a b/%$"x') == '/srv/a b/%%$$"x'


@pytest.mark.parametrize("value", [" /srv", "/srv ", "/srv\\", "a\rb"])
def test_raw_refuses(value: str) -> None:
    with pytest.raises(RenderError):
        raw(value)


def test_text_doubles_specifiers() -> None:
    assert text("50% of $x") == "50%% of $x"
