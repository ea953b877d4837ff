"""Notes document operations: each one, sections by Markdown header, and the size cap."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_bot.memory.notes import NotesError, apply_operation, header_of

NOTES = """# Profile
Name: Ana

## Food
Vegetarian.

# Projects
Building a boat.
"""


def apply(
    operation: str, content: str | None = None, header: str | None = None, notes: str = NOTES
) -> str:
    return apply_operation(notes, operation, content, header, max_chars=500)


def test_read_returns_the_notes_unchanged() -> None:
    assert apply("read") == NOTES


def test_overwrite_append_prepend() -> None:
    assert apply("overwrite", "fresh") == "fresh"
    assert apply("append", "# Later\nMore.", notes="# A\nx\n") == "# A\nx\n\n# Later\nMore."
    assert apply("prepend", "Top line", notes="# A\nx") == "Top line\n\n# A\nx"
    assert apply("append", "first", notes="") == "first"


def test_delete_section_removes_it_and_its_subsections() -> None:
    assert apply("delete_section_by_header", header="Profile") == "# Projects\nBuilding a boat."


def test_delete_a_subsection_only() -> None:
    assert apply("delete_section_by_header", header="## Food") == (
        "# Profile\nName: Ana\n\n# Projects\nBuilding a boat."
    )


def test_replace_section_keeps_the_others_in_place() -> None:
    replaced = apply("replace_section_by_header", "## Food\nEats fish now.", header="food")
    assert (
        replaced
        == "# Profile\nName: Ana\n\n## Food\nEats fish now.\n\n# Projects\nBuilding a boat."
    )


def test_delete_all_notes() -> None:
    assert apply("delete_all_notes") == ""


@pytest.mark.parametrize(
    ("operation", "content", "header", "reason"),
    [
        ("shred", None, None, "unknown operation 'shred'"),
        ("append", None, None, "needs a non-empty content"),
        ("delete_section_by_header", None, None, "needs a non-empty header"),
        (
            "delete_section_by_header",
            None,
            "Hobbies",
            "no section 'Hobbies'; sections: Profile, Food, Projects",
        ),
        ("append", "x" * 500, None, "over the limit of 500"),
    ],
)
def test_bad_requests_are_named(
    operation: str, content: str | None, header: str | None, reason: str
) -> None:
    with pytest.raises(NotesError, match=reason):
        apply(operation, content, header)


# What a header line meant when it was read by this regular expression (cubic on hostile text,
# so kept here only as the reference for short lines).
REFERENCE_HEADER = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@given(st.text(alphabet="# \tx#\r\x0c\x1c\xa0\u2028a", max_size=14))
def test_headers_read_as_the_markdown_regex_reads_them(line: str) -> None:
    match = REFERENCE_HEADER.match(line)
    assert header_of(line) == (None if match is None else (len(match.group(1)), match.group(2)))


@pytest.mark.parametrize(
    ("line", "header"),
    [
        ("## Food ##", (2, "Food")),
        ("# C# ", (1, "C")),
        ("###### six", (6, "six")),
        ("####### seven", None),
        ("#no space", None),
        ("#   ##", (1, "")),
    ],
)
def test_header_lines(line: str, header: tuple[int, str] | None) -> None:
    assert header_of(line) == header


HOSTILE_LINE = "# x" + " " * 7000 + "#####x"
# In a child process: a regular expression in C cannot be interrupted, and the cubic one took
# minutes on this line (a timeout here only catches a blow-up, never a slow machine).
SECTION_OPERATION_ON_HOSTILE_NOTES = f"""
from llm_bot.memory.notes import apply_operation
notes = "# Food\\nVegan.\\n" + {HOSTILE_LINE!r} + "\\n# Work\\nBaker.\\n"
print(apply_operation(notes, "delete_section_by_header", None, "Work", max_chars=8000)[-9:])
"""


def test_a_hostile_header_line_costs_time_linear_in_its_length() -> None:
    done = subprocess.run(
        [sys.executable, "-c", SECTION_OPERATION_ON_HOSTILE_NOTES],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "#####x"
