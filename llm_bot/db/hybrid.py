"""The one executor of the hybrid statements: a user's memories (:mod:`llm_bot.memory.memories`)
and recall over their turns (:mod:`llm_bot.memory.turns.recall`). Each is one statement that
returns the user's nearest rows by vector and best rows by their words, with both ranks; the
owner of the table writes it and names the rows' type, and this sends it with the parameters
both share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from psycopg import AsyncConnection
from psycopg.rows import class_row

from llm_bot.db.vectors import vector_param
from llm_bot.llm.embeddings import MAX_CHARS

# Which sides find candidates: both, or one alone (measurements, the operator console).
SearchMode = Literal["hybrid", "dense", "lexical"]
# A query's words are read from as much of it as the embedder reads.
QUERY_MAX_CHARS = MAX_CHARS

Row = TypeVar("Row")


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
) -> list[Row]:
    """Rows of ``sql`` as ``row``, the ``pool`` best a side; ``scope`` names whose rows it may
    read (a user's). ``prepare=False`` plans the statement for its parameters every time (the
    connection's default is to prepare)."""
    parameters = {
        **scope,
        "text": query_text(text),
        "vector": vector_param(vector),
        "pool": pool,
        "use_dense": mode != "lexical",
        "use_lexical": mode != "dense",
    }
    async with connection.cursor(row_factory=class_row(row)) as cursor:
        await cursor.execute(sql, parameters, prepare=prepare)
        return await cursor.fetchall()
