"""Where the console's check of a query string draws its lines: what it refuses is walked on
every route in ``tests/integration/console/test_console_inputs.py``; here, what it must still
serve next to each line."""

from __future__ import annotations

from urllib.parse import quote

from llm_bot.console.inputs import refusal
from llm_bot.events.limits import MAX_ID_BYTES


def test_an_id_of_the_bound_is_served_and_one_byte_more_is_not() -> None:
    assert refusal(b"id=" + b"a" * MAX_ID_BYTES) is None
    assert refusal(b"id=" + b"a" * (MAX_ID_BYTES + 1)) == (
        f"'id' is over {MAX_ID_BYTES} bytes, longer than any id"
    )


def test_a_recall_query_has_no_bound_of_an_id() -> None:
    assert refusal(b"q=" + b"a" * (MAX_ID_BYTES * 20)) is None


def test_text_beyond_ascii_and_the_replacement_character_itself_are_served() -> None:
    assert refusal(b"id=" + quote("Ada Lovelace \u00e9\u4e2d\U0001f375").encode()) is None
    assert refusal(b"id=%EF%BF%BD") is None  # U+FFFD sent as such, not made of a bad escape


def test_a_refusal_names_the_parameter_in_ascii_whatever_it_is_called() -> None:
    assert refusal(b"%FF%00=%00") == r"'\udcff\x00' holds NUL, which no stored text can"
    assert refusal(b"scope=private") == "'scope' is neither dm nor shared"
    assert refusal(b"scope=dm&scope=shared&id=") is None
