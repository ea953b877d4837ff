"""The notes document: one Markdown text per (user, agent), edited by whole operations.

The model curates it with ``manage_long_term_memory``; sections are Markdown headers, and a
section runs from its header to the next header of the same or a higher level. Operations are
pure functions on the text so they are easy to reason about and to test; storage is elsewhere.

Headers are read with string methods, in time linear in the line: the text is the model's, so
hostile, and a regular expression for a header's optional closing run of ``#`` between
optional spaces tries every split of a long run of spaces and ``#``, cubic in its length: one
line of 3,000 characters held the event loop for a minute on every later section operation.
"""

from __future__ import annotations

from typing import Literal, get_args

NotesOperation = Literal[
    "read",
    "overwrite",
    "append",
    "prepend",
    "delete_section_by_header",
    "replace_section_by_header",
    "delete_all_notes",
]
OPERATIONS: tuple[NotesOperation, ...] = get_args(NotesOperation)
MAX_HEADER_LEVEL = 6


class NotesError(ValueError):
    """The operation cannot be applied as asked; the message is for the model."""


def apply_operation(
    notes: str, operation: str, content: str | None, header: str | None, max_chars: int
) -> str:
    """The notes after ``operation``; raises :class:`NotesError` for a bad request or size."""
    if operation not in OPERATIONS:
        raise NotesError(f"unknown operation {operation!r}; use one of {', '.join(OPERATIONS)}")
    if operation == "read":
        return notes
    if operation == "delete_all_notes":
        return ""
    if operation == "delete_section_by_header":
        start, end = _section(notes, _required(header, "header"))
        updated = _join(notes[:start], notes[end:])
    else:
        text = _required(content, "content")
        if operation == "overwrite":
            updated = text
        elif operation == "append":
            updated = _join(notes, text)
        elif operation == "prepend":
            updated = _join(text, notes)
        else:  # replace_section_by_header
            start, end = _section(notes, _required(header, "header"))
            updated = _join(notes[:start], text, notes[end:])
    if len(updated) > max_chars:
        raise NotesError(
            f"notes would be {len(updated)} characters, over the limit of {max_chars};"
            " shorten or delete sections first"
        )
    return updated


def _required(value: str | None, name: str) -> str:
    if value is None or not value.strip():
        raise NotesError(f"this operation needs a non-empty {name}")
    return value.strip()


def _join(*parts: str) -> str:
    return "\n\n".join(part.strip("\n") for part in parts if part.strip())


def header_of(line: str) -> tuple[int, str] | None:
    """(level, title) of a Markdown ATX header line, else None: one to six ``#``, whitespace,
    the title, then optionally a closing run of ``#`` and whitespace (``## Food ##``)."""
    level = len(line) - len(line.lstrip("#"))
    rest = line[level:]
    if not 1 <= level <= MAX_HEADER_LEVEL or not rest[:1].isspace():
        return None
    return level, rest.strip().rstrip("#").rstrip()


def _section(notes: str, header: str) -> tuple[int, int]:
    """Character span of the section titled ``header`` (with or without its ``#`` marks)."""
    wanted = header.lstrip("#").strip().casefold()
    lines = notes.splitlines(keepends=True)
    offset, start, level = 0, -1, 0
    for line in lines:
        found = header_of(line.rstrip("\n"))
        if found:
            depth, title = found
            if start >= 0 and depth <= level:
                return start, offset
            if start < 0 and title.casefold() == wanted:
                start, level = offset, depth
        offset += len(line)
    if start < 0:
        titles = [found[1] for found in map(header_of, (x.rstrip("\n") for x in lines)) if found]
        raise NotesError(f"no section {header!r}; sections: {', '.join(titles) or 'none'}")
    return start, offset
