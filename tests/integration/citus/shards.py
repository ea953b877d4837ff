"""What the tests of this folder read of the cluster, on the coordinator or each node directly:
which node holds a tenant's shard, what each node holds, which prepared transactions are left,
what the worker nodes were sent, and the events the tests send by kind of thread."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg
from psycopg import sql

from llm_bot.events.identity import thread_id_of
from llm_bot.events.models import InternalEventV2
from llm_bot_tools.local.citus_cluster import CitusCluster, CitusNode
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.scan import counted

# A line of a node's log (log_line_prefix '%m [%p] %q%d '): time, pid, database, level, message.
_LOGGED = re.compile(r"^\S+ \S+ \S+ \[\d+\] (\S+) (\w+):  (.*)$")
# What Citus sends a worker node to commit a transaction that wrote on more than one node.
PREPARE = "PREPARE TRANSACTION"
# A statement that writes rows, as a worker node logs what the coordinator sends it.
WRITE = re.compile(r"^(?:statement|execute [^:]*): (?:INSERT|UPDATE|DELETE)\b")


def dm(text: str, *, user: str, channel: str, egress_topic: str) -> InternalEventV2:
    """``user`` to the bot alone: the thread and everything the event writes are the user's."""
    event = prompt_event(text, user=user, thread=channel, egress_topic=egress_topic)
    event.egress.type = "dm"
    return event


def said_in(text: str, *, user: str, channel: str, egress_topic: str) -> InternalEventV2:
    """``user`` in the shared ``channel``: the turns are the user's, the window the channel's."""
    return prompt_event(text, user=user, thread=channel, egress_topic=egress_topic)


def node_port_of(conn: psycopg.Connection, table: str, tenant: str) -> int:
    """The port of the worker node holding ``tenant``'s shard of ``table``."""
    row = conn.execute(
        "SELECT nodeport FROM citus_shards"
        " WHERE shardid = get_shard_id_for_distribution_column(%s, %s::text)",
        (table, tenant),
    ).fetchone()
    assert row is not None, f"{table} is not distributed"
    return int(row[0])


def first_on(conn: psycopg.Connection, table: str, port: int, tenants: Iterable[str]) -> str:
    """The first of ``tenants`` whose shard of ``table`` is on the node at ``port``."""
    return next(tenant for tenant in tenants if node_port_of(conn, table, tenant) == port)


def shared_channel_on(conn: psycopg.Connection, port: int, prefix: str) -> str:
    """A shared channel named after ``prefix`` whose thread (its tenant) has its shard on the
    node at ``port``."""
    names = (f"{prefix}-{n}" for n in range(1000))
    by_tenant = {thread_of(name): name for name in names}
    return by_tenant[first_on(conn, "conversation_threads", port, by_tenant)]


def thread_of(channel: str) -> str:
    return thread_id_of(said_in("", user="anyone", channel=channel, egress_topic="unused"))


def shard_name(conn: psycopg.Connection, table: str, tenant: str) -> str:
    row = conn.execute(
        "SELECT shard_name FROM citus_shards"
        " WHERE shardid = get_shard_id_for_distribution_column(%s, %s::text)",
        (table, tenant),
    ).fetchone()
    assert row is not None, f"{table} is not distributed"
    return str(row[0])


@contextmanager
def at_commit(node: CitusNode, database: str, shard: str, body: str) -> Iterator[None]:
    """Until the block ends, ``body`` (PL/pgSQL, ``NEW`` the row) runs on ``node`` for each row
    a transaction inserted into ``shard``, when that transaction commits there: at its
    ``PREPARE TRANSACTION`` when it wrote another node too, after that node's writes. A fault of
    this node alone: nothing of it reaches the others."""
    function = f"CREATE FUNCTION at_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {body}"
    with psycopg.connect(node.url_for(database), autocommit=True) as conn:
        conn.execute("SET citus.enable_ddl_propagation = off")
        conn.execute("SET citus.enable_manual_changes_to_shards = on")
        conn.execute(f"{function} RETURN NULL; END $$")
        table = sql.Identifier(shard)
        conn.execute(
            sql.SQL(
                "CREATE CONSTRAINT TRIGGER at_commit AFTER INSERT ON {} DEFERRABLE INITIALLY"
                " DEFERRED FOR EACH ROW EXECUTE FUNCTION at_commit()"
            ).format(table)
        )
        try:
            yield
        finally:
            conn.execute(sql.SQL("DROP TRIGGER at_commit ON {}").format(table))
            conn.execute("DROP FUNCTION at_commit()")


def shard_placements(conn: psycopg.Connection, table: str) -> dict[int, int]:
    """Shards of ``table`` by the port of the node holding them."""
    rows = conn.execute(
        "SELECT nodeport, count(*) FROM citus_shards WHERE table_name = %s::regclass"
        " GROUP BY nodeport",
        (table,),
    ).fetchall()
    return {int(port): int(shards) for port, shards in rows}


def tenants_by_node(conn: psycopg.Connection, table: str, column: str) -> dict[str, set[int]]:
    """Each value of ``column`` in ``table``'s rows, with the ports of the nodes whose shards
    hold rows of it, read from every shard where it lies."""
    per_shard = f"SELECT coalesce(json_agg(DISTINCT {column}), '[]') FROM %s"
    rows = conn.execute(
        "SELECT s.nodeport, r.result FROM run_command_on_shards(%s, %s) r"
        " JOIN citus_shards s USING (shardid)",
        (table, per_shard),
    ).fetchall()
    found: dict[str, set[int]] = {}
    for port, result in rows:
        for tenant in json.loads(result):
            found.setdefault(str(tenant), set()).add(int(port))
    return found


def prepared_transactions(cluster: CitusCluster, database: str) -> dict[str, int]:
    """Prepared transactions left on each node, by node name."""
    counts = {}
    for node in cluster.nodes:
        with psycopg.connect(node.url_for(database)) as conn:
            row = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
        counts[node.name] = int(row[0]) if row else -1
    return counts


@dataclass
class NodeLogs:
    """What each node logged for ``database`` (``log_statement = all`` on it) from here on."""

    nodes: list[CitusNode]
    database: str

    def __post_init__(self) -> None:
        self.mark()

    def mark(self) -> None:
        """Read from here on."""
        self._offsets = {node.name: node.log_path.stat().st_size for node in self.nodes}

    def messages(self) -> dict[str, list[str]]:
        """Each node's messages for the database since the mark, by node name."""
        found: dict[str, list[str]] = {}
        for node in self.nodes:
            with node.log_path.open("rb") as log:
                log.seek(self._offsets[node.name])
                text = log.read().decode(errors="replace")
            found[node.name] = [
                logged.group(3)
                for logged in map(_LOGGED.match, text.splitlines())
                if logged is not None and logged.group(1) == self.database
            ]
        return found


def on_node(node: CitusNode, database: str, needles: list[str]) -> dict[str, int]:
    """Rows holding each needle in the tables stored on ``node`` itself (its shards, hidden
    from the catalog unless asked for, and its local tables; not the distributed tables'
    shells, which read other nodes), over every column but vectors."""
    with psycopg.connect(node.url_for(database)) as conn:
        conn.execute("SET citus.override_table_visibility = off")
        columns = conn.execute(
            "SELECT c.table_name, c.column_name, c.udt_name FROM information_schema.columns c"
            " JOIN pg_class t ON t.oid = format('%I.%I', c.table_schema, c.table_name)::regclass"
            " WHERE c.table_schema = 'public' AND t.relkind = 'r' AND c.udt_name <> 'vector'"
            "   AND NOT EXISTS (SELECT FROM pg_dist_partition p WHERE p.logicalrelid = t.oid)"
        ).fetchall()
        return counted(conn, columns, needles)
