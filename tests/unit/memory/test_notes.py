"""Notes document operations: each one, sections by Markdown header, and the size cap."""

from __future__ import annotations

import pytest

from llm_bot.memory.notes import NotesError, apply_operation

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
