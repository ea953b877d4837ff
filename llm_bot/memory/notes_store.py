"""Where the notes document lives (``agent_notes``) and the tool that edits it.

One row per (user, agent). The tool keeps the run's view of the document in memory, so reads
see the run's own edits, and records each edit. The commit locks the row, applies the edits
again to the document as it is then (another event of the user may have changed it since this
run read it: its edit is kept, not overwritten) and checks visibility again there: notes
written in a DM are never changed from a shared channel, whatever happened since the read.

Context assembly reads the notes with the thread's window in one statement
(:func:`read_notes_and_window`): the notes' query, the window's and the withheld memories', each
its table's owner's, read together (:mod:`llm_bot.db.queries`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import tuple_row

from llm_bot.clock import utc_now
from llm_bot.db.queries import Query, Row, read, read_together
from llm_bot.db.rows import Rows
from llm_bot.llm.messages import ToolSpec
from llm_bot.memory.memories import private_memories_query
from llm_bot.memory.notes import OPERATIONS, NotesError, apply_operation
from llm_bot.memory.run_writes import NotesEdit, RunWrites, Visibility
from llm_bot.memory.store import MemoryStore
from llm_bot.memory.turns.window import Turn, window_query

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Notes:
    """The document and where it was written: once edited in a DM, it is private for good."""

    content: str
    visibility: Visibility


# The user's notes row (none before the first edit): a query also read beside others in one
# statement (:func:`read_notes_and_window`).
_NOTES_SQL = (
    "SELECT content, visibility FROM agent_notes"
    " WHERE user_id = %(user_id)s AND agent_name = %(agent)s"
)


def _notes_query(user_id: str, agent: str) -> Query[Notes | None]:
    """The user's notes row; None before the first edit (or after an erasure)."""
    return Query(_NOTES_SQL, {"user_id": user_id, "agent": agent}, 2, _notes_of_rows)


def _notes_of_rows(rows: list[Row]) -> Notes | None:
    return notes_of(*rows[0]) if rows else None


def rows_of_user(user_id: str) -> Rows:
    """A user's rows, as erasure deletes and export reads them (:mod:`llm_bot.lifecycle`)."""
    return Rows("agent_notes", "FROM agent_notes WHERE user_id = %(user)s", {"user": user_id})


def notes_of(content: str | None, visibility: str | None) -> Notes:
    """The notes row's columns as the notes; no row (nulls) is no notes yet."""
    return Notes("", "public") if content is None else Notes(*_columns((content, visibility)))


NO_NOTES = notes_of(None, None)


async def read_notes(connection: AsyncConnection[Any], user_id: str, agent: str) -> Notes:
    return await stored_notes(connection, user_id, agent) or NO_NOTES


async def stored_notes(connection: AsyncConnection[Any], user_id: str, agent: str) -> Notes | None:
    """The user's notes row; None before the first edit (or after an erasure)."""
    return await read(connection, _notes_query(user_id, agent))


@dataclass(frozen=True)
class NotesAndWindow:
    """The notes, the window, and how many of the user's memories this thread may not show."""

    notes: Notes
    window: list[Turn]
    private_memories: int = 0


async def read_notes_and_window(
    connection: AsyncConnection[Any],
    user_id: str,
    agent: str,
    thread_id: str,
    *,
    pairs: int,
    now: datetime,
    idle: timedelta,
    withheld: bool,
    candidates: int,
) -> NotesAndWindow:
    """The notes, the window of the last ``pairs`` pairs as of ``now`` and, when ``withheld``
    (the thread may not show them), the count of the user's memories learned in DMs (up to
    ``candidates``), in one statement: context assembly reads them while the query is embedded,
    and one round trip is the shortest wait. In a DM all three are the user's rows; a shared
    channel's window is the channel's."""
    notes = _notes_query(user_id, agent)
    window = window_query(thread_id, pairs, now, idle)
    private = private_memories_query(user_id, withheld=withheld, candidates=candidates)
    together = await read_together(connection, notes, window, private)
    return NotesAndWindow(together.of(notes) or NO_NOTES, together.of(window), together.of(private))


async def apply_notes_edits(
    connection: AsyncConnection[Any], writes: RunWrites, agent: str, max_chars: int
) -> None:
    """The run's edits, applied in the caller's transaction to the row as it is now (locked).
    An edit that does not apply to it (its section is gone, the notes would be too long) is left
    out; the others still apply. Once written in a DM, the notes stay private. The time is the
    worker's, a parameter (Citus evaluates no clock function inside ``ON CONFLICT``/``UPDATE``
    of a distributed table)."""
    user = (writes.user_id, agent)
    now = utc_now()
    # The row as it is, locked until the transaction ends; created empty when there is none.
    # The no-op update is what takes the lock and returns an existing row's columns.
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(
            "INSERT INTO agent_notes (user_id, agent_name, content, visibility, updated_at)"
            " VALUES (%s, %s, '', %s, %s) ON CONFLICT (user_id, agent_name)"
            " DO UPDATE SET agent_name = EXCLUDED.agent_name RETURNING content, visibility",
            (*user, writes.visibility, now),
        )
        content, visibility = _columns(await cursor.fetchone())
    if visibility == "dm" and writes.visibility == "public":
        logger.warning(
            "notes edits from a shared channel refused: the notes are private",
            extra={"userId": writes.user_id},
        )
        return
    for edit in writes.notes_edits:
        try:
            content = apply_operation(content, edit.operation, edit.content, edit.header, max_chars)
        except NotesError as error:
            logger.info(
                "notes edit left out at commit",
                extra={"userId": writes.user_id, "cause": str(error)},
            )
    await connection.execute(
        "UPDATE agent_notes SET content = %s, updated_at = %s,"
        " visibility = CASE WHEN visibility = 'dm' THEN 'dm' ELSE %s END"
        " WHERE user_id = %s AND agent_name = %s",
        (content, now, writes.visibility, *user),
    )


def _columns(row: tuple[Any, ...] | None) -> tuple[str, Visibility]:
    """A row's content and where it was learned: anything but 'public' is private."""
    if row is None:
        return "", "dm"
    content, visibility = row
    return str(content), "public" if visibility == "public" else "dm"


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


def edit_of(arguments: dict[str, Any]) -> NotesEdit:
    """The model's arguments as an edit; anything but text is no text."""
    content, header = arguments.get("content"), arguments.get("header")
    return NotesEdit(
        str(arguments.get("operation", "")),
        content if isinstance(content, str) else None,
        header if isinstance(header, str) else None,
    )


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
            if notes.visibility == "dm" and run.visibility == "public":
                return PRIVATE_NOTES
            run.notes = notes.content
        edit = edit_of(arguments)
        if edit.operation == "read":
            return run.notes or "(no notes yet)"
        refusal = run.refusal()
        if refusal is not None:
            return refusal
        try:
            updated = apply_operation(
                run.notes, edit.operation, edit.content, edit.header, self._max_chars
            )
        except NotesError as error:
            return f"error: {error}"
        if updated != run.notes:
            run.edit_notes(edit, updated)
        return f"notes updated ({len(updated)} of {self._max_chars} characters)"
