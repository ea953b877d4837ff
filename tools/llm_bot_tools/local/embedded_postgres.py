"""Embedded Postgres with pgvector for tests and `llm-bot dev`, managed by pgserver.

It runs the install :func:`~llm_bot_tools.local.postgres_build.embedded_install` names (the
wheel's PostgreSQL with a portable pgvector, built on first use), never the wheel's own
``vector.so`` on a CPU that cannot run it. pgserver shares one server per data directory
between processes and stops it when the last handle goes away. This wrapper keeps that sharing,
but makes stop() dependable: handles left by crashed processes do not keep the server alive,
and the in-process handle cache is cleared so the same directory can be started again.
"""

from __future__ import annotations

import atexit
import logging
import os
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Self
from urllib.parse import quote, urlencode

import psycopg
from psycopg import sql

from llm_bot_tools.local.crash_watch import CrashWatch
from llm_bot_tools.local.lifecycle import LocalService
from llm_bot_tools.local.pgserver_paths import (
    PostgresServer,
    PostmasterInfo,
    get_server,
    run_servers_from,
    servers_bin_dir,
)
from llm_bot_tools.local.postgres_build import Progress, embedded_install
from llm_bot_tools.local.processes import as_user, running
from llm_bot_tools.local.templates import create_statement, drop, seal

_log = logging.getLogger(__name__)

SUPERUSER = "postgres"
ADMIN_DATABASE = "postgres"
_STOP_TIMEOUT_S = 30.0


class EmbeddedPostgresError(RuntimeError):
    """The embedded server is not in the state a caller needs."""


def _wait_for_exit(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while running(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def connection_url(
    info: PostmasterInfo, database: str, *, search_path: Sequence[str] | None = None
) -> str:
    """A libpq URI for the server's unix socket; the server listens on no TCP address."""
    if info.socket_dir is None:
        raise EmbeddedPostgresError("embedded postgres has no unix socket directory")
    query = {"host": str(info.socket_dir), "port": str(info.port)}
    if search_path:
        query["options"] = f"-csearch_path={','.join(search_path)}"
    encoded = urlencode(query, safe="/,", quote_via=quote)
    return f"postgresql://{SUPERUSER}@/{quote(database, safe='')}?{encoded}"


class EmbeddedPostgres(LocalService):
    """One pgserver-managed cluster in `data_dir`; use one instance per directory per process."""

    def __init__(self, data_dir: Path, progress: Progress | None = None) -> None:
        """``progress``: where the lines of a first build go (stderr by default)."""
        self._data_dir = data_dir.expanduser().resolve()
        self._progress = progress
        self._server: PostgresServer | None = None
        self._info: PostmasterInfo | None = None
        self._watch: CrashWatch | None = None
        self.startup_seconds: float | None = None

    @property
    def data_dir(self) -> Path:
        return self._data_dir

    @property
    def postmaster_pid(self) -> int:
        return self._postmaster().pid

    @property
    def log_path(self) -> Path:
        return self._data_dir / "log"

    @property
    def url(self) -> str:
        """URL of the admin database, which also has the vector extension."""
        return self.url_for(ADMIN_DATABASE)

    def url_for(self, database: str, *, search_path: Sequence[str] | None = None) -> str:
        return connection_url(self._postmaster(), database, search_path=search_path)

    def _postmaster(self) -> PostmasterInfo:
        if self._info is None:
            raise EmbeddedPostgresError("embedded postgres not started")
        return self._info

    def start(self) -> Self:
        if self._server is not None:
            return self
        began = time.monotonic()
        run_servers_from(embedded_install(self._progress).root)
        self._data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._forget_stale_handle()
        self._server = get_server(self._data_dir, cleanup_mode="stop")
        self._info = self._server.get_postmaster_info()
        self._create_vector_extension(ADMIN_DATABASE)
        self.startup_seconds = time.monotonic() - began
        _log.info(
            "embedded postgres ready in %.1fs (pid %s, data %s)",
            self.startup_seconds,
            self._info.pid,
            self._data_dir,
        )
        return self

    def watch_crashes(self, on_crash: Callable[[str], None]) -> None:
        """Call ``on_crash`` with the log line that tells of it, from a thread of its own, the
        moment the server crashes or restarts (until :meth:`stop`)."""
        self._watch = CrashWatch(self.log_path, self.postmaster_pid, on_crash)
        self._watch.start()

    def _forget_stale_handle(self) -> None:
        """pgserver caches handles per directory and would hand back one whose server is gone."""
        cached = PostgresServer._instances.get(self._data_dir)
        if cached is not None and not cached.get_postmaster_info().is_running():
            del PostgresServer._instances[self._data_dir]

    def _create_vector_extension(self, database: str) -> None:
        with psycopg.connect(self.url_for(database), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS vector")

    def create_database(self, name: str, template: str | None = None) -> str:
        """A new database with pgvector, for tests that need a whole database to themselves: a
        copy of ``template`` (sealed by :meth:`seal_template`) where one is named."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(create_statement(name, template))
        if template is None:
            self._create_vector_extension(name)
        return self.url_for(name)

    def seal_template(self, name: str) -> None:
        """Keep database ``name`` as it is, for :meth:`create_database` to copy."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            seal(conn, name)

    def drop_database(self, name: str) -> None:
        """Drop even while connections are open, so a leaked pool cannot block cleanup."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            drop(conn, name)

    def create_schema(self, name: str) -> str:
        """A schema in the admin database; `public` stays on the path for the vector type."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(name)))
        return self.url_for(ADMIN_DATABASE, search_path=[name, "public"])

    def drop_schema(self, name: str) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(name)))

    def stop(self) -> None:
        """Release our handle; the server stops unless another live process still holds one.
        A server that crashed is stopped at once (``-m immediate``): one that restarts after a
        crash may never finish a fast shutdown asked for during its recovery (seen with 18)."""
        crashed = self._watch is not None and self._watch.crash_line is not None
        if self._watch is not None:
            self._watch.stop()
        server, self._server = self._server, None
        info, self._info = self._info, None
        if server is None or info is None:
            return
        self._drop_dead_handles(server)
        if crashed:
            self._pg_ctl_stop(server, "immediate")
        server.cleanup()
        atexit.unregister(server._cleanup)
        PostgresServer._instances.pop(self._data_dir, None)
        others = [pid for pid in server.global_process_id_list.get() if pid != os.getpid()]
        if others:
            _log.info("embedded postgres left running for processes %s", others)
            return
        if running(info.pid):
            self._pg_ctl_stop(server, "fast")
        if not _wait_for_exit(info.pid, _STOP_TIMEOUT_S):
            raise EmbeddedPostgresError(f"postgres (pid {info.pid}) did not stop")
        _log.info("embedded postgres stopped (data %s)", self._data_dir)

    def _drop_dead_handles(self, server: PostgresServer) -> None:
        """A crashed process leaves its pid in pgserver's handle list, which blocks any stop."""
        with PostgresServer._lock:
            handles = server.global_process_id_list
            handles.put([pid for pid in handles.get() if running(pid)])

    def _pg_ctl_stop(self, server: PostgresServer, mode: str) -> None:
        pg_ctl = str(servers_bin_dir() / "pg_ctl")
        command = [pg_ctl, "-D", str(self._data_dir), "-m", mode, "-w", "stop"]
        subprocess.run(
            as_user(command, server.system_user),
            check=False,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=_STOP_TIMEOUT_S,
        )
