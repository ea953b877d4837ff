"""What ``bench capacity`` reads from a database server, checked against the embedded Postgres:
each statement's time from the server's own log, and the server's CPU from ``/proc``."""

from __future__ import annotations

import time
from pathlib import Path

import psycopg
import pytest

from llm_bot_tools.bench.dbserver import ServerNode, log_statements, statement_costs
from llm_bot_tools.bench.procfs import server_cpu_seconds
from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres

pytestmark = pytest.mark.integration

WAIT_S = 30.0
MARKER = "a-user-wrote-this-0f3c"


def node_of(postgres: EmbeddedPostgres) -> ServerNode:
    return ServerNode(postgres.url, postgres.postmaster_pid, postgres.data_dir / "log")


def test_statement_costs_are_read_from_the_servers_log(
    embedded_postgres: EmbeddedPostgres, fresh_database_url: str, unique_name: str
) -> None:
    node = node_of(embedded_postgres)
    log_statements(node, unique_name)
    offset = node.log_path.stat().st_size
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        for _ in range(3):  # the extended protocol: parse, bind, execute
            connection.execute("SELECT length(%s::text) + 1", (MARKER,))
        for _ in range(2):
            connection.execute("SELECT %s::int\n     AS two_lines", (7,))
        connection.pgconn.exec_(b"SELECT 42")  # the simple protocol
    costs = {c.statement: c for c in statement_costs(node.log_path, offset, events=2)}
    assert costs["SELECT length($1::text) + 1"].calls_per_event == 1.5
    assert costs["SELECT $1::int AS two_lines"].calls_per_event == 1.0
    assert costs["SELECT 42"].calls_per_event == 0.5
    assert all(c.plan_ms >= 0 and c.execute_ms >= 0 for c in costs.values())
    # Parameters, what users wrote, stay out of the log.
    assert MARKER not in node.log_path.read_text(errors="replace")[offset:]


def test_server_cpu_counts_the_backends_that_ended(
    embedded_postgres: EmbeddedPostgres, fresh_database_url: str
) -> None:
    postmaster = embedded_postgres.postmaster_pid
    before = server_cpu_seconds(postmaster)
    with psycopg.connect(fresh_database_url, autocommit=True) as connection:
        backend = connection.info.backend_pid
        connection.execute("SELECT count(*) FROM generate_series(1, 5000000)")
    reaped_by = time.monotonic() + WAIT_S
    while Path(f"/proc/{backend}").exists():  # until the postmaster has reaped it
        assert time.monotonic() < reaped_by, "the backend was not reaped"
        time.sleep(0.05)
    # Counting five million rows takes a backend well over 0.1 s of CPU on any machine; the
    # backend has ended, so only the postmaster's count of its reaped children holds that.
    assert server_cpu_seconds(postmaster) - before > 0.1
