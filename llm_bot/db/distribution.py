"""The schema on a Citus cluster: which tables are spread over the nodes, by what, and which
every node holds whole (docs/citus.md, "The shard key").

``llm-bot migrate`` creates plain tables (:mod:`llm_bot.db.migrate`), then, on a database with
the ``citus`` extension, makes what every node reads reference tables and distributes the
others by their tenant column, all in one colocation group, so the rows of one tenant value are
on one shard whatever the table and a statement naming one tenant goes to one node. Each table
is distributed once (``pg_dist_partition`` says which are), so a database that grew on one
PostgreSQL and moved onto Citus is distributed by the same command, and a second run does
nothing. On PostgreSQL without Citus there is nothing to do.

Distributing a table copies its rows into its shards; the coordinator's own copy of them is
then emptied (it would only take space: queries read the shards). A function that statements
sent to the shards call is made to exist on every node: one created before the database had
Citus is on the coordinator only (those created since, Citus copies to the workers itself).
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

logger = logging.getLogger(__name__)

# Read by every node: small, rarely written (a write goes to every node).
REFERENCE_TABLES = ("personalities", "embedding_space", "schema_migrations")
# Each table's tenant column; the first is the colocation group's anchor.
DISTRIBUTED_TABLES = (
    ("processed_events", "user_id"),
    ("tool_calls", "user_id"),
    ("conversation_turns", "user_id"),
    ("conversation_threads", "tenant"),
    ("channel_turns", "thread_id"),
    ("memories", "user_id"),
    ("memory_versions", "user_id"),
    ("agent_notes", "user_id"),
    ("console_views", "user_id"),
    ("answer_explanations", "user_id"),
)
ANCHOR = DISTRIBUTED_TABLES[0][0]
# Called by statements that run on the shards (a table's own dependencies, such as the function
# of an index, go with the table).
WORKER_FUNCTIONS = ("relation_rows(oid)",)

_HAS_CITUS = "SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')"
_DISTRIBUTED = """
SELECT c.relname FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
 WHERE c.relnamespace = current_schema()::regnamespace
"""


_ON_WORKERS = """
SELECT f FROM unnest(%s::text[]) AS f
 WHERE EXISTS (SELECT FROM pg_dist_object WHERE objid = f::regprocedure)
"""


def undistributed(connection: psycopg.Connection[Any]) -> list[str]:
    """The tables still to distribute and the functions still to copy to the workers: none
    without Citus."""
    row = connection.execute(_HAS_CITUS).fetchone()
    if not (row and row[0]):
        return []
    done = {name for (name,) in connection.execute(_DISTRIBUTED)}
    done |= {name for (name,) in connection.execute(_ON_WORKERS, (list(WORKER_FUNCTIONS),))}
    every = [*REFERENCE_TABLES, *(table for table, _ in DISTRIBUTED_TABLES), *WORKER_FUNCTIONS]
    return [each for each in every if each not in done]


def distribute(connection: psycopg.Connection[Any]) -> list[str]:
    """Distribute the tables and functions not yet distributed, on an autocommit
    ``connection`` holding the migration lock; what was distributed now."""
    pending = undistributed(connection)
    for name in pending:
        if name in WORKER_FUNCTIONS:
            connection.execute("SELECT create_distributed_function(%s)", (name,))
        else:
            _distribute_table(connection, name)
        logger.info("distributed %s", name)
    return pending


def _distribute_table(connection: psycopg.Connection[Any], table: str) -> None:
    column = dict(DISTRIBUTED_TABLES).get(table)
    if column is None:
        connection.execute("SELECT create_reference_table(%s)", (table,))
    else:
        colocate_with = "none" if table == ANCHOR else ANCHOR
        connection.execute(
            "SELECT create_distributed_table(%s, %s, colocate_with => %s)",
            (table, column, colocate_with),
        )
    connection.execute("SELECT truncate_local_data_after_distributing_table(%s)", (table,))
