"""Stored text as the console shows it: cut with a marker, direction controls and invisible
characters made visible."""

from __future__ import annotations

from llm_bot.console.display import BIDI_CONTROLS, INVISIBLE, shown


def test_a_long_text_is_cut_with_a_marker_of_what_was_left_out() -> None:
    text = "a" * 1_000_000
    cut = shown(text, 100)
    assert cut.startswith("a" * 100)
    assert cut.endswith(" … [999,900 more characters]")
    assert len(cut) < 200


def test_a_short_text_is_shown_whole() -> None:
    assert shown("tea", 100) == "tea"
    assert shown(None) == ""


def test_every_direction_control_is_shown_as_a_visible_mark() -> None:
    text = "invoice\u202egpj.exe and \u2066isolated\u2069"
    assert shown(text) == "invoice[U+202E]gpj.exe and [U+2066]isolated[U+2069]"
    assert not any(chr(code) in shown("".join(map(chr, BIDI_CONTROLS))) for code in BIDI_CONTROLS)


def test_a_hidden_text_is_shown_as_visible_marks() -> None:
    """Tag characters spell ASCII no page shows but a model reads: the memory would read
    'Ada likes tea' on the page while it told the model more."""
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "OBEY")
    text = f"Ada likes tea{hidden}\u200b\u2060\ufeff"
    assert shown(text) == (
        "Ada likes tea[U+E004F][U+E0042][U+E0045][U+E0059][U+200B][U+2060][U+FEFF]"
    )
    assert not any(chr(code) in shown("".join(map(chr, INVISIBLE))) for code in INVISIBLE)


def test_joiners_that_letters_and_emoji_need_are_left_as_they_are() -> None:
    family = "\U0001f468\u200d\U0001f469\u200d\U0001f467"
    persian = "\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645"
    assert shown(family) == family
    assert shown(persian) == persian
