"""The one executor of the hybrid statements: a user's memories (:mod:`llm_bot.memory.memories`)
and recall over their turns (:mod:`llm_bot.memory.turns.recall`). Each is one statement that
returns the user's nearest rows by vector and best rows by their words, with both ranks; the
owner of the table writes it and names the rows' type, and this sends it with the parameters
both share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from psycopg import AsyncConnection, AsyncCursor, AsyncRawCursor, ProgrammingError
from psycopg.rows import AsyncRowFactory, RowMaker

from llm_bot.db.sql_text import positional, values
from llm_bot.db.vectors import vector_param
from llm_bot.llm.embeddings import MAX_CHARS

# Which sides find candidates: both, or one alone (measurements, the operator console).
SearchMode = Literal["hybrid", "dense", "lexical"]
# A query's words are read from as much of it as the embedder reads.
QUERY_MAX_CHARS = MAX_CHARS


# A named tuple whose fields are the statement's columns, in order.
Row = TypeVar("Row", bound=tuple[Any, ...])


def query_text(text: str) -> str:
    """What of a query its words are read from: its first ``QUERY_MAX_CHARS`` characters."""
    return text[:QUERY_MAX_CHARS]


async def hybrid_rows(
    connection: AsyncConnection[Any],
    sql: str,
    row: type[Row],
    scope: Mapping[str, object],
    text: str,
    vector: list[float],
    pool: int,
    mode: SearchMode,
    *,
    prepare: bool | None = None,
    binary: bool = False,
) -> list[Row]:
    """Rows of ``sql`` as ``row``, the ``pool`` best a side; ``scope`` names whose rows it may
    read (a user's). ``prepare=False`` plans the statement for its parameters every time (the
    connection's default is to prepare). Sent through a raw cursor (:mod:`llm_bot.db.sql_text`):
    psycopg would parse recall's long statement anew on every call. ``binary``: the rows come in
    Postgres's binary form, which psycopg reads in half the time of the text form for recall's
    hundreds of rows (a timestamp's text is parsed, its binary form is a number)."""
    parameters = {
        **scope,
        "text": query_text(text),
        "vector": vector_param(vector),
        "pool": pool,
        "use_dense": mode != "lexical",
        "use_lexical": mode != "dense",
    }
    statement, names = positional(sql)
    async with AsyncRawCursor(connection, row_factory=_tuples_of(row)) as cursor:
        await cursor.execute(statement, values(names, parameters), prepare=prepare, binary=binary)
        rows: list[Row] = await cursor.fetchall()
        return rows


def _tuples_of(row: type[Row]) -> AsyncRowFactory[Row]:
    """Each row made as ``row`` from its values as they come: a statement can return a few
    hundred rows per event, and building each through keywords cost ~4 us a row."""
    named: Any = row  # a named tuple's class: tuple's type says nothing of its fields
    fields: tuple[str, ...] = named._fields
    make: RowMaker[Row] = named._make

    def factory(cursor: AsyncCursor[Any]) -> RowMaker[Row]:
        columns = tuple(column.name for column in cursor.description or ())
        if columns != fields:
            raise ProgrammingError(f"columns {columns} are not {row.__name__}'s {fields}")
        return make

    return factory
