"""Where the notes document lives (``agent_notes``) and the tool that edits it.

One row per (user, agent). The tool keeps the document of the run in memory: reads see the
run's own edits, and the database gets at most one write per turn, at commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from psycopg import AsyncConnection

from llm_bot.llm.messages import ToolSpec
from llm_bot.memory.notes import OPERATIONS, NotesError, apply_operation
from llm_bot.memory.run_writes import LearnedIn, RunWrites
from llm_bot.memory.store import MemoryStore


@dataclass(frozen=True)
class Notes:
    """The document and where it was written: once edited in a DM, it is private for good."""

    content: str
    learned_in: LearnedIn


async def read_notes(connection: AsyncConnection[Any], user_id: str, agent: str) -> Notes:
    cursor = await connection.execute(
        "SELECT content, learned_in FROM agent_notes WHERE user_id = %s AND agent_name = %s",
        (user_id, agent),
    )
    row = await cursor.fetchone()
    if row is None:
        return Notes("", "public")
    content, learned_in = (row["content"], row["learned_in"]) if isinstance(row, dict) else row
    return Notes(str(content), "dm" if learned_in == "dm" else "public")


async def write_notes(
    connection: AsyncConnection[Any], user_id: str, agent: str, content: str, learned_in: LearnedIn
) -> None:
    await connection.execute(
        "INSERT INTO agent_notes (user_id, agent_name, content, learned_in, updated_at)"
        " VALUES (%s, %s, %s, %s, now()) ON CONFLICT (user_id, agent_name)"
        " DO UPDATE SET content = EXCLUDED.content, updated_at = now(),"
        " learned_in = CASE WHEN agent_notes.learned_in = 'dm' THEN 'dm'"
        " ELSE EXCLUDED.learned_in END",
        (user_id, agent, content, learned_in),
    )


PRIVATE_NOTES = (
    "error: your notes about this user were written in a private conversation;"
    " they cannot be read or changed in a shared channel"
)

MANAGE_NOTES = ToolSpec(
    name="manage_long_term_memory",
    description=(
        "Edit your notes about this user: one Markdown document you keep across conversations."
        " Use sections (# headers) and keep it short."
    ),
    parameters={
        "type": "object",
        "properties": {
            "operation": {"type": "string", "enum": list(OPERATIONS)},
            "content": {
                "type": "string",
                "description": "Text for overwrite/append/prepend/replace.",
            },
            "header": {"type": "string", "description": "Section header for *_section_by_header."},
        },
        "required": ["operation"],
    },
)


def run_notes_operation(notes: str, arguments: dict[str, Any], max_chars: int) -> tuple[str, str]:
    """(new notes, tool result text); a bad request leaves the notes as they were."""
    operation = str(arguments.get("operation", ""))
    try:
        updated = apply_operation(
            notes, operation, arguments.get("content"), arguments.get("header"), max_chars
        )
    except NotesError as error:
        return notes, f"error: {error}"
    if operation == "read":
        return notes, notes or "(no notes yet)"
    return updated, f"notes updated ({len(updated)} of {max_chars} characters)"


class ManageNotesTool:
    """``manage_long_term_memory``: edits the run's copy of the notes; the commit stores it."""

    spec = MANAGE_NOTES

    def __init__(self, store: MemoryStore, agent: str, max_chars: int) -> None:
        self._store = store
        self._agent = agent
        self._max_chars = max_chars

    async def run(self, arguments: dict[str, Any], run: RunWrites) -> str:
        if run.notes is None:
            async with self._store.connection() as connection:
                notes = await read_notes(connection, run.user_id, self._agent)
            if notes.learned_in == "dm" and run.learned_in == "public":
                return PRIVATE_NOTES
            run.notes = notes.content
        updated, result = run_notes_operation(run.notes, arguments, self._max_chars)
        if updated != run.notes:
            run.notes, run.notes_changed = updated, True
        return result
