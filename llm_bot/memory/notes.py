"""The notes document: one Markdown text per (user, agent), edited by whole operations.

The model curates it with ``manage_long_term_memory``; sections are Markdown headers, and a
section runs from its header to the next header of the same or a higher level. Operations are
pure functions on the text so they are easy to reason about and to test; storage is elsewhere.
"""

from __future__ import annotations

import re
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
HEADER = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


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


def _section(notes: str, header: str) -> tuple[int, int]:
    """Character span of the section titled ``header`` (with or without its ``#`` marks)."""
    wanted = header.lstrip("#").strip().casefold()
    lines = notes.splitlines(keepends=True)
    offset, start, level = 0, -1, 0
    for line in lines:
        match = HEADER.match(line.rstrip("\n"))
        if match:
            depth, title = len(match.group(1)), match.group(2).strip().casefold()
            if start >= 0 and depth <= level:
                return start, offset
            if start < 0 and title == wanted:
                start, level = offset, depth
        offset += len(line)
    if start < 0:
        titles = [m.group(2) for m in (HEADER.match(x.rstrip("\n")) for x in lines) if m]
        raise NotesError(f"no section {header!r}; sections: {', '.join(titles) or 'none'}")
    return start, offset
