"""The local Citus cluster does what llm-bot's sharding by user relies on: a table distributed
by a user column spreads over both workers, pgvector and full-text indexes work on its shards,
and a transaction of one user commits on one node without two-phase commit."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

import psycopg
import pytest

from llm_bot_tools.local.citus_cluster import CitusCluster

pytestmark = [pytest.mark.integration, pytest.mark.citus]

USERS = 120
TURNS_PER_USER = 3
# Written by Citus (citus.log_remote_commands) when it commits across nodes.
PREPARE = "PREPARE TRANSACTION"


def distributed_turns(conn: psycopg.Connection) -> None:
    conn.execute(
        "CREATE TABLE turns (user_id text NOT NULL, seq bigint NOT NULL, body text NOT NULL,"
        " PRIMARY KEY (user_id, seq))"
    )
    conn.execute("SELECT create_distributed_table('turns', 'user_id')")


def node_port_of(conn: psycopg.Connection, user_id: str) -> int:
    row = conn.execute(
        "SELECT nodeport FROM citus_shards"
        " WHERE shardid = get_shard_id_for_distribution_column('turns', %s::text)",
        (user_id,),
    ).fetchone()
    assert row is not None
    return int(row[0])


def test_rows_of_many_users_are_placed_on_both_workers(
    citus_cluster: CitusCluster, citus_database_url: str
) -> None:
    rows = [
        (f"user-{u}", seq, f"turn {seq}") for u in range(USERS) for seq in range(TURNS_PER_USER)
    ]
    with psycopg.connect(citus_database_url, autocommit=True) as conn:
        distributed_turns(conn)
        with conn.cursor().copy("COPY turns (user_id, seq, body) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        shards: dict[int, int] = dict(
            conn.execute(
                "SELECT nodeport, count(*) FROM citus_shards"
                " WHERE table_name = 'turns'::regclass GROUP BY nodeport"
            ).fetchall()
        )
        rows_by_node: dict[int, int] = dict(
            conn.execute(
                "SELECT s.nodeport, sum(r.result::bigint)"
                " FROM run_command_on_shards('turns', 'SELECT count(*) FROM %s') r"
                " JOIN citus_shards s USING (shardid) GROUP BY s.nodeport"
            ).fetchall()
        )
    worker_ports = {worker.port for worker in citus_cluster.workers}
    assert set(shards) == worker_ports, "every shard placement is on a worker, and both have some"
    assert set(rows_by_node) == worker_ports
    assert all(rows > 0 for rows in rows_by_node.values()), rows_by_node
    assert sum(rows_by_node.values()) == len(rows)


def test_vector_and_full_text_indexes_answer_on_the_shards(citus_database_url: str) -> None:
    with psycopg.connect(citus_database_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        conn.execute(
            "CREATE TABLE notes (user_id text NOT NULL, id bigint NOT NULL, body text NOT NULL,"
            " embedding vector(3) NOT NULL,"
            " search tsvector GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED,"
            " PRIMARY KEY (user_id, id))"
        )
        conn.execute("SELECT create_distributed_table('notes', 'user_id')")
        conn.execute("CREATE INDEX notes_embedding ON notes USING hnsw (embedding vector_l2_ops)")
        conn.execute("CREATE INDEX notes_search ON notes USING gin (search)")
        with conn.cursor().copy("COPY notes (user_id, id, body, embedding) FROM STDIN") as copy:
            copy.write_row(("alice", 1, "likes green tea", "[1,0,0]"))
            copy.write_row(("alice", 2, "plays the cello", "[0,1,0]"))
            copy.write_row(("alice", 3, "green tea again", "[0,0,1]"))
            copy.write_row(("bob", 1, "likes green tea too", "[0.9,0.1,0]"))
        nearest = "SELECT user_id, id FROM notes ORDER BY embedding <-> '[0,0.9,0.1]' LIMIT 1"
        matching = (
            "SELECT user_id, id FROM notes WHERE search @@ to_tsquery('simple', 'green & tea')"
        )
        alices = f"{matching} AND user_id = 'alice'"
        assert conn.execute(nearest).fetchall() == [("alice", 2)]
        assert sorted(conn.execute(matching).fetchall()) == [("alice", 1), ("alice", 3), ("bob", 1)]
        assert sorted(conn.execute(alices).fetchall()) == [("alice", 1), ("alice", 3)]
        with conn.transaction():
            # A few rows: without this the shards would scan rather than use their indexes.
            conn.execute("SET LOCAL citus.propagate_set_commands = 'local'")
            conn.execute("SET LOCAL enable_seqscan = off")
            vector_plan, text_plan, alices_plan = (
                plan(conn, q) for q in (nearest, matching, alices)
            )
    # Each shard's own copy of an index answers; a query of one user goes to one shard.
    assert "Index Scan using notes_embedding_" in vector_plan, vector_plan
    assert "Bitmap Index Scan on notes_search_" in text_plan, text_plan
    assert "Task Count: 1\n" in alices_plan, alices_plan


def plan(conn: psycopg.Connection, query: str) -> str:
    return "\n".join(str(row[0]) for row in conn.execute(f"EXPLAIN {query}"))


def two_phase_commits(conn: psycopg.Connection) -> int:
    """Two-phase commits the coordinator recorded (creating a distributed table makes some)."""
    row = conn.execute("SELECT count(*) FROM pg_dist_transaction").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def remote_commands(citus_database_url: str) -> Iterator[tuple[psycopg.Connection, list[str]]]:
    """A connection on which Citus reports each command it sends to a worker."""
    with psycopg.connect(citus_database_url, autocommit=True) as conn:
        distributed_turns(conn)
        logged: list[str] = []
        conn.add_notice_handler(lambda notice: logged.append(notice.message_primary or ""))
        conn.execute("SET citus.log_remote_commands = on")
        yield conn, logged


def test_a_transaction_of_one_user_commits_on_one_node_without_two_phase_commit(
    citus_cluster: CitusCluster,
    citus_database_url: str,
    remote_commands: tuple[psycopg.Connection, list[str]],
) -> None:
    conn, logged = remote_commands
    recorded_before = two_phase_commits(conn)
    seqs = count()
    with conn.transaction():
        for _ in range(3):
            conn.execute("INSERT INTO turns VALUES ('alice', %s, 'hi')", (next(seqs),))
        conn.execute("UPDATE turns SET body = 'edited' WHERE user_id = 'alice' AND seq = 0")
    assert any(line.startswith("issuing COMMIT") for line in logged), logged
    assert not any(PREPARE in line for line in logged), logged
    assert two_phase_commits(conn) == recorded_before
    for worker in citus_cluster.workers:
        with psycopg.connect(worker.url_for(conn.info.dbname)) as direct:
            prepared = direct.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
        assert prepared == (0,), worker.name


def test_a_transaction_of_users_on_both_workers_uses_two_phase_commit(
    remote_commands: tuple[psycopg.Connection, list[str]],
) -> None:
    """The evidence above can show a two-phase commit: one spanning both workers does."""
    conn, logged = remote_commands
    users = [f"user-{u}" for u in range(USERS)]
    by_port: dict[int, str] = {}
    for user in users:
        by_port.setdefault(node_port_of(conn, user), user)
    assert len(by_port) == 2, by_port
    with conn.transaction():
        for user in by_port.values():
            conn.execute("INSERT INTO turns VALUES (%s, 0, 'hi')", (user,))
    assert sum(PREPARE in line for line in logged) == 2, logged
