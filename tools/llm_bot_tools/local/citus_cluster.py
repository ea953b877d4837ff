"""A local Citus cluster for tests: a coordinator and worker nodes on loopback ports.

Each node is its own PostgreSQL data directory under ``base_dir``, started with
``shared_preload_libraries='citus'`` and prepared transactions enabled (Citus commits a
transaction that writes on several nodes with two-phase commit). The nodes listen on
127.0.0.1 only and trust local connections, as the embedded server does; durability is
traded for speed (``fsync=off``) because the data dies with the test run.

``initdb`` and ``pg_ctl`` refuse to run as root. As pgserver does, a root process runs them as
the unprivileged ``pgserver`` user, owning the data directories; the directories above the
data and the install are opened for traversal (``o+x``) so that user can reach them.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Self
from urllib.parse import quote

import psycopg
from psycopg import sql

from llm_bot_tools.local.lifecycle import LocalService
from llm_bot_tools.local.pgserver_paths import ensure_user_exists
from llm_bot_tools.local.postgres_build import PostgresInstall
from llm_bot_tools.local.processes import as_user
from llm_bot_tools.local.pubsub_emulator import free_loopback_port
from llm_bot_tools.local.templates import create_statement, drop, seal

_log = logging.getLogger(__name__)

SUPERUSER = "postgres"
ADMIN_DATABASE = "postgres"
# How often a database's drop is tried while a session of Citus's own enters it.
DROP_ATTEMPTS = 20
LOOPBACK = "127.0.0.1"
_SYSTEM_USER = "pgserver"
_COMMAND_TIMEOUT_S = 120.0
_LOG_TAIL_CHARS = 4000
# Beyond the defaults: Citus, 2PC, loopback TCP only, and no fsync for throwaway data.
_SETTINGS = {
    "listen_addresses": f"'{LOOPBACK}'",
    "unix_socket_directories": "''",
    "shared_preload_libraries": "'citus'",
    "max_prepared_transactions": "100",
    "max_connections": "200",
    "fsync": "off",
    "full_page_writes": "off",
    # The nodes reach each other over loopback and have no TLS certificate.
    "citus.node_conninfo": "'sslmode=disable'",
    # Each line of a session names its database, so a test reads the lines of its own.
    "log_line_prefix": "'%m [%p] %q%d '",
}


_CITUS = "CREATE EXTENSION IF NOT EXISTS citus"
_SET_COORDINATOR = "SELECT citus_set_coordinator_host(%s, %s)"
_ADD_NODE = "SELECT citus_add_node(%s, %s)"
_REMOVE_NODE = "SELECT citus_remove_node(%s, %s)"


class CitusClusterError(RuntimeError):
    """A node did not start, stop or join; the message carries the node's log tail."""


@dataclass(frozen=True)
class CitusNode:
    name: str
    data_dir: Path
    port: int

    @property
    def log_path(self) -> Path:
        return self.data_dir.parent / f"{self.name}.log"

    def url_for(self, database: str) -> str:
        return f"postgresql://{SUPERUSER}@{LOOPBACK}:{self.port}/{quote(database, safe='')}"


def _system_user() -> str | None:
    """The user the servers run as: pgserver's when we are root, else ourselves."""
    if os.geteuid() != 0:
        return None
    ensure_user_exists(_SYSTEM_USER)
    return _SYSTEM_USER


def _open_for_traversal(directory: Path) -> None:
    """Let other users pass through ``directory`` and every one above it (not list them)."""
    for each in [directory, *directory.parents]:
        mode = each.stat().st_mode
        if not mode & stat.S_IXOTH:
            each.chmod(mode | stat.S_IXOTH)


class CitusCluster(LocalService):
    """A coordinator and ``workers`` worker nodes; ``url`` is the coordinator's admin database."""

    def __init__(
        self,
        install: PostgresInstall,
        base_dir: Path,
        workers: int = 2,
        shard_count: int | None = None,
        settings: Mapping[str, str] | None = None,
    ) -> None:
        """``shard_count``: shards of each distributed table (``citus.shard_count``; None:
        Citus's 32). The tests take few: distributing a table and each DDL statement on it
        cost a command per shard, and with 32 those dominate a test's own database.
        ``settings``: more lines of each node's ``postgresql.conf`` (``wal_level = logical``
        for shard moves that do not block writes)."""
        self._install = install
        self._shard_count = shard_count
        self._settings = {**_SETTINGS, **(settings or {})}
        self._databases = [ADMIN_DATABASE]
        self._base_dir = base_dir.expanduser().resolve()
        self._worker_count = workers
        self._user: str | None = None
        self._nodes: list[CitusNode] = []
        self._stopped: set[str] = set()
        self.retired: list[CitusNode] = []
        self._starting: list[CitusNode] = []  # started, in no metadata yet
        self.startup_seconds: float | None = None

    @property
    def coordinator(self) -> CitusNode:
        if not self._nodes:
            raise CitusClusterError("citus cluster not started")
        return self._nodes[0]

    @property
    def workers(self) -> list[CitusNode]:
        return self._nodes[1:]

    @property
    def nodes(self) -> list[CitusNode]:
        return list(self._nodes)

    @property
    def url(self) -> str:
        return self.coordinator.url_for(ADMIN_DATABASE)

    def url_for(self, database: str) -> str:
        return self.coordinator.url_for(database)

    def start(self) -> Self:
        if self._nodes:
            return self
        began = time.monotonic()
        self._user = _system_user()
        self._base_dir.mkdir(parents=True, exist_ok=True)
        if self._user is not None:
            _open_for_traversal(self._install.root)
            _open_for_traversal(self._base_dir)
        atexit.register(self.stop)
        try:
            self._start_nodes()
        except BaseException:
            with contextlib.suppress(CitusClusterError):
                self.stop()  # what did start; the node that failed has nothing to stop
            raise
        self.startup_seconds = time.monotonic() - began
        _log.info("citus cluster ready in %.1fs: %s", self.startup_seconds, self._describe())
        return self

    def _start_nodes(self) -> None:
        names = ["coordinator", *(f"worker{i}" for i in range(1, self._worker_count + 1))]
        for name in names:
            node = CitusNode(name, self._base_dir / name, free_loopback_port())
            self._init_node(node)
            self._pg_ctl(node, "-w", "-l", str(node.log_path), "start")
            self._nodes.append(node)
        self._prepare_database(ADMIN_DATABASE)

    def _describe(self) -> str:
        return ", ".join(f"{node.name} on {node.port}" for node in self._nodes)

    def _init_node(self, node: CitusNode) -> None:
        node.data_dir.mkdir()
        node.log_path.touch()
        if self._user is not None:
            shutil.chown(node.data_dir, self._user, self._user)
            shutil.chown(node.log_path, self._user, self._user)
        initdb = [str(self._install.bin_dir / "initdb"), "-D", str(node.data_dir)]
        options = ["--auth=trust", "--encoding=utf8", "--no-sync", "-U", SUPERUSER]
        self._run(node, [*initdb, *options])
        settings = "".join(f"{key} = {value}\n" for key, value in self._settings.items())
        settings += f"port = {node.port}\n"
        if self._shard_count is not None:
            settings += f"citus.shard_count = {self._shard_count}\n"
        with (node.data_dir / "postgresql.conf").open("a") as conf:
            conf.write(settings)

    def _pg_ctl(self, node: CitusNode, *args: str) -> None:
        self._run(node, [str(self._install.bin_dir / "pg_ctl"), "-D", str(node.data_dir), *args])

    def _run(self, node: CitusNode, command: list[str]) -> None:
        result = subprocess.run(
            # The user's own group too: root's group, kept, would meet /root's group bits.
            as_user(command, self._user),
            env=self._install.environment(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_COMMAND_TIMEOUT_S,
            check=False,
        )
        if result.returncode != 0:
            log = node.log_path.read_text()[-_LOG_TAIL_CHARS:] if node.log_path.exists() else ""
            raise CitusClusterError(
                f"{Path(command[0]).name} failed for {node.name} ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}\n{log}"
            )

    def _run_sql(
        self, node: CitusNode, database: str, statement: str | sql.Composed, *params: object
    ) -> None:
        """One statement on ``node``'s ``database``, in autocommit (``CREATE DATABASE`` runs
        in no transaction)."""
        with psycopg.connect(node.url_for(database), autocommit=True) as conn:
            conn.execute(statement, params or None)

    def _prepare_database(self, database: str) -> None:
        """Citus in ``database`` on every node, and the workers registered in its metadata
        (each database keeps its own)."""
        for node in self._nodes:
            self._run_sql(node, database, _CITUS)
        coordinator = self.coordinator
        self._run_sql(coordinator, database, _SET_COORDINATOR, LOOPBACK, coordinator.port)
        for worker in self.workers:
            self._run_sql(coordinator, database, _ADD_NODE, LOOPBACK, worker.port)

    def start_worker(self) -> CitusNode:
        """A new node, started with the cluster's settings and every database of the cluster
        made on it with Citus, as an operator prepares a machine; not yet in any metadata
        (:meth:`add_worker`)."""
        self._worker_count += 1  # never a name again, whatever was removed
        name = f"worker{self._worker_count}"
        node = CitusNode(name, self._base_dir / name, free_loopback_port())
        self._init_node(node)
        self._pg_ctl(node, "-w", "-l", str(node.log_path), "start")
        self._starting.append(node)
        for database in self._databases:
            if database != ADMIN_DATABASE:
                self._run_sql(node, ADMIN_DATABASE, create_statement(database, None))
            self._run_sql(node, database, _CITUS)
        return node

    def add_worker(self, node: CitusNode) -> None:
        """``node`` (from :meth:`start_worker`) registered in every database of the cluster:
        ``citus_add_node``, which copies the roles and the distributed tables' definitions to
        it; it holds no shard until a rebalance moves some there."""
        for database in self._databases:
            self._run_sql(self.coordinator, database, _ADD_NODE, LOOPBACK, node.port)
        self._starting.remove(node)
        self._nodes.append(node)

    def remove_worker(self, node: CitusNode) -> None:
        """Take a drained worker node out of every database's metadata
        (``citus_remove_node``, which refuses while the node holds a shard). It keeps running,
        in ``retired``, until the cluster stops: what it still holds can be read."""
        for database in self._databases:
            self._run_sql(self.coordinator, database, _REMOVE_NODE, LOOPBACK, node.port)
        self._nodes.remove(node)
        self.retired.append(node)

    def create_database(self, name: str, template: str | None = None) -> str:
        """A new database with Citus on every node, its workers registered; the coordinator's
        URL for it. Where ``template`` is named (sealed by :meth:`seal_template`), each node's
        copy of it: its workers, tables and shards as they were."""
        for node in self._nodes:
            self._run_sql(node, ADMIN_DATABASE, create_statement(name, template))
        if template is None:
            self._prepare_database(name)
        self._databases.append(name)
        return self.url_for(name)

    def seal_template(self, name: str) -> None:
        """Keep database ``name`` as it is on every node, for :meth:`create_database` to copy."""
        for node in self._nodes:
            with psycopg.connect(node.url_for(ADMIN_DATABASE), autocommit=True) as conn:
                seal(conn, name)
        self._databases.remove(name)  # no node added later takes it: none may connect to it

    def drop_database(self, name: str) -> None:
        """Drop on every node even while connections are open, each node's copy once its
        sessions are ended (:func:`~llm_bot_tools.local.templates.drop`). A session that
        outlasts that makes the drop fail: it is tried again, at most ``DROP_ATTEMPTS`` times."""
        for node in self._nodes:
            for attempt in range(1, DROP_ATTEMPTS + 1):
                try:
                    with psycopg.connect(node.url_for(ADMIN_DATABASE), autocommit=True) as conn:
                        drop(conn, name)
                    break
                except psycopg.errors.ObjectInUse:
                    if attempt == DROP_ATTEMPTS:
                        raise
        if name in self._databases:
            self._databases.remove(name)

    def stop_node(self, node: CitusNode, mode: str = "immediate") -> None:
        """Stop one node while the others run, by default as a crash would (``pg_ctl -m
        immediate``: no shutdown checkpoint, open transactions die, prepared ones stay in its
        WAL); ``start_node`` brings it back on its port."""
        self._pg_ctl(node, "-w", "-m", mode, "stop")
        self._stopped.add(node.name)

    def start_node(self, node: CitusNode) -> None:
        self._pg_ctl(node, "-w", "-l", str(node.log_path), "start")
        self._stopped.discard(node.name)

    def stop(self) -> None:
        """Stop every running node (the coordinator first, so nothing new reaches the
        workers)."""
        nodes, self._nodes = [*self._nodes, *self._starting, *self.retired], []
        self.retired, self._starting = [], []
        atexit.unregister(self.stop)
        failures = []
        for node in (each for each in nodes if each.name not in self._stopped):
            try:
                self._pg_ctl(node, "-w", "-m", "fast", "stop")
            except CitusClusterError as error:
                failures.append(str(error))
        if failures:
            raise CitusClusterError("\n".join(failures))
        if nodes:
            _log.info("citus cluster stopped (%s)", self._base_dir)
