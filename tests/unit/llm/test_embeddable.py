"""What is embedded for a text, and what a cached vector costs."""

from __future__ import annotations

from llm_bot.llm.embeddings import cache_key, embeddable, entry_bytes


def test_a_text_is_cut_to_max_chars() -> None:
    assert embeddable("x" * 20_000, 8000) == "x" * 8000
    assert embeddable("short", 8000) == "short"


def test_lone_surrogates_and_nul_become_replacement_characters() -> None:
    text = embeddable("a\ud800b\udfffc\x00d", 100)

    assert text == "a\ufffdb\ufffdc\ufffdd"
    assert text.encode("utf-8").decode("utf-8") == text


def test_characters_beyond_the_basic_plane_are_kept() -> None:
    assert embeddable("tea \U0001f375", 100) == "tea \U0001f375"


def test_an_entry_costs_its_key_and_its_floats() -> None:
    assert entry_bytes([0.5] * 768) - entry_bytes([0.5] * 384) == 384 * 32


def test_a_cache_key_is_a_digest_of_model_and_text() -> None:
    key = cache_key("small", "k" * 1_000_000)

    assert len(key) == 32
    assert key != cache_key("large", "k" * 1_000_000)
    assert cache_key("small", "\ud800") != cache_key("small", "\ud801")  # no UTF-8 form needed
