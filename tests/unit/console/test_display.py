"""Stored text as the console shows it: cut with a marker, direction controls made visible."""

from __future__ import annotations

from llm_bot.console.display import BIDI_CONTROLS, shown


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
