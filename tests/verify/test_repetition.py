"""The loop detector: the story's word salad is caught, ordinary prose is not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rigctl.verify.repetition import detect_repetition

STORY_SALAD = " the capital France capital France capital France capital France capital France capital France " \
    "capital France capital France capital France capital France capital France capital France capital France"

PROSE = [
    "Paris is the capital and largest city of France. It lies on the Seine, in the north of the country, "
    "and has been a centre of finance, diplomacy, commerce, fashion and science for centuries. The city is "
    "known for its museums and architecture, and for the Eiffel Tower, built for the 1889 World's Fair.",
    "The printing press, developed by Johannes Gutenberg around 1440, used movable metal type. It made books "
    "cheaper and faster to produce, which spread literacy and new ideas across Europe. Within fifty years "
    "presses were running in more than two hundred cities, and millions of volumes had been printed.",
    "A refrigerator moves heat from inside the cabinet to the room. A refrigerant evaporates in coils inside, "
    "absorbing heat; a compressor squeezes the vapour, which then condenses in coils at the back and gives "
    "the heat away. The cycle repeats, and a thermostat switches the compressor on and off as needed.",
    # Repetition that is legitimate: a list with a repeated frame, but no phrase covers most of it.
    "1. Preheat the oven. 2. Mix the flour and the sugar. 3. Add the eggs. 4. Pour the batter into the tin. "
    "5. Bake for the time given. 6. Let the cake cool. 7. Serve the cake with the cream.",
    "From locklocklock to 262K Context: GLM-5.3-Flash on two RTX PRO 6000 cards under my desk.",
]


def test_story_word_salad_is_caught() -> None:
    finding = detect_repetition(STORY_SALAD)
    assert finding is not None
    assert finding.kind == "ngram"
    assert finding.unit in {"capital france", "france capital", "capital france capital", "france capital france"}
    assert finding.coverage >= 0.6


@pytest.mark.parametrize("text", PROSE)
def test_ordinary_prose_passes(text: str) -> None:
    assert detect_repetition(text) is None


def test_glued_subword_loop() -> None:
    finding = detect_repetition("The answer is " + "lock" * 9 + " done")
    assert finding is not None and finding.kind == "subword" and finding.unit == "lock"
    assert finding.count == 9


def test_seven_glued_repeats_are_not_a_loop() -> None:
    # The regex needs the unit plus seven more: eight in all.
    assert detect_repetition("x " + "lock" * 7 + " y") is None


def test_character_run() -> None:
    finding = detect_repetition("Well" + "!" * 32)
    assert finding is not None and finding.kind == "char" and finding.unit == "!"
    assert detect_repetition("Well" + "!" * 31) is None


def test_ngram_needs_twelve_repeats() -> None:
    assert detect_repetition(" ".join(["is it"] * 11)) is None
    finding = detect_repetition(" ".join(["is it"] * 12))
    assert finding is not None and finding.count >= 12


def test_long_ngram_with_prose_around_it() -> None:
    loop = " ".join(["we should go to the market now"] * 14)
    finding = detect_repetition("Sure. " + loop + " and then we rest.")
    assert finding is not None and finding.kind == "ngram"


def test_loop_under_sixty_percent_passes() -> None:
    # 12 repeats of a 2-gram (24 words) inside 60 words of varied prose: 40% coverage.
    varied = " ".join(f"word{i}" for i in range(36))
    assert detect_repetition(varied + " " + " ".join(["red fox"] * 12)) is None


VOCAB = ("the", "a", "river", "town", "market", "old", "new", "bright", "cold", "ship", "harbor", "keeper",
         "counted", "bread", "sold", "every", "morning", "north", "south", "stone", "bridge", "road", "quiet")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(VOCAB), min_size=0, max_size=200))
def test_shuffled_vocabulary_rarely_loops(words: list[str]) -> None:
    # Random draws from 25 words: any bigram covering 60% of the text would be a bug in the coverage maths.
    finding = detect_repetition(" ".join(words))
    if finding is not None:
        assert finding.coverage >= 0.6 and finding.count >= 12
