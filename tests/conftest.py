"""Shared fixtures: the real Pub/Sub emulator, embedded Postgres and a local Citus cluster,
each started once per session when a test needs it.

A test's own database (``fresh_database_url``, empty; ``migrated_database_url``, every
migration applied) is a copy of one the session made and sealed
(``llm_bot_tools.local.templates``): on Citus, making and migrating a database costs seconds,
copying one a fraction of a second.

``--database=citus`` puts every test's own database (``database_server``) on the Citus cluster
instead of the embedded Postgres, and runs only the tests that use one or are about Citus: the
suites that must hold on both run twice (``make test``). Without a built Citus those tests skip
with the reason; a test whose subject exists only on a single plain Postgres says so with
``@pytest.mark.not_on_citus(reason)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol
from uuid import uuid4

import pytest

from llm_bot.db.migrate import migrate
from llm_bot_tools.local.citus_cluster import CitusCluster
from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.postgres_build import CLUSTER, find_install, unavailable_reason
from llm_bot_tools.local.pubsub_emulator import PubSubEmulator
from llm_bot_tools.local.pubsub_front import PubSubFront

pytest_plugins = ["pytester", "tests.support.hang_watch"]

EMBEDDED = "embedded"
CITUS = "citus"
NOT_ON_CITUS = "not_on_citus"


class DatabaseServer(Protocol):
    """Where a test's own database is made: the embedded Postgres or the Citus cluster."""

    def create_database(self, name: str, template: str | None = None) -> str: ...

    def seal_template(self, name: str) -> None: ...

    def drop_database(self, name: str) -> None: ...


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--database",
        choices=(EMBEDDED, CITUS),
        default=EMBEDDED,
        help="where each test's own database is made: the embedded Postgres (default), or a"
        " local Citus cluster of a coordinator and two workers, running only the tests that use"
        " a database (docs/citus.md)",
    )


def on_citus(config: pytest.Config) -> bool:
    return bool(config.getoption("database") == CITUS)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On Citus: only the tests that use a database or are about Citus (marked ``citus``),
    less those marked ``not_on_citus``."""
    if not on_citus(config):
        return
    kept, deselected = [], []
    for item in items:
        uses_database = "database_server" in getattr(item, "fixturenames", ())
        about_citus = item.get_closest_marker("citus") is not None
        (kept if uses_database or about_citus else deselected).append(item)
        marker = item.get_closest_marker(NOT_ON_CITUS)
        if marker is not None:
            item.add_marker(pytest.mark.skip(reason=f"not on Citus: {marker.args[0]}"))
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


@pytest.fixture(scope="session")
def pubsub_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PubSubEmulator]:
    with PubSubEmulator(tmp_path_factory.mktemp("pubsub"), project="llm-bot-test") as emulator:
        yield emulator


@pytest.fixture(scope="session")
def pubsub_front(pubsub_emulator: PubSubEmulator) -> Iterator[PubSubFront]:
    """Where workers under test reach the emulator: it releases the stream of a worker that
    stopped or was killed, as real Pub/Sub does (see :mod:`llm_bot_tools.local.pubsub_front`)."""
    with PubSubFront(pubsub_emulator.host) as front:
        yield front


# Crash lines of the session's embedded Postgres, as its watch heard them.
_POSTGRES_CRASHES: list[str] = []


@pytest.fixture(scope="session")
def embedded_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    with EmbeddedPostgres(tmp_path_factory.mktemp("postgres") / "pgdata") as postgres:
        postgres.watch_crashes(_POSTGRES_CRASHES.append)
        yield postgres


def pytest_runtest_teardown(item: pytest.Item) -> None:
    """After a crash of the shared Postgres every later test would fail on a closed
    connection: end the run with the server's own line instead."""
    if _POSTGRES_CRASHES:
        pytest.exit(f"the embedded Postgres crashed: {_POSTGRES_CRASHES[0]}", returncode=3)


@pytest.fixture(scope="session")
def citus_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CitusCluster]:
    """A coordinator and two workers; the test skips, with the reason, where Citus is not
    built (a bare clone without ``../shared/vendor``; ``make test`` builds it when it is). Four
    shards a table, two on each worker: the placements, routing and two-phase commits of 32,
    at a fraction of the cost of distributing and altering tables."""
    install = find_install(CLUSTER)
    if install is None:
        pytest.skip(unavailable_reason(CLUSTER) or "Citus is not built")
    with CitusCluster(install, tmp_path_factory.mktemp("citus"), shard_count=4) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def database_server(request: pytest.FixtureRequest) -> DatabaseServer:
    """The embedded Postgres, or the Citus cluster under ``--database=citus``."""
    server: DatabaseServer = request.getfixturevalue(
        "citus_cluster" if on_citus(request.config) else "embedded_postgres"
    )
    return server


@pytest.fixture
def unique_name() -> str:
    """Pub/Sub and Postgres both accept this shape: starts with a letter, no dots."""
    return f"t-{uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def empty_template(database_server: DatabaseServer) -> str:
    """A database as the server makes one, kept to be copied: a test's fresh database is a
    copy of it (on Citus a copy takes a tenth of the time of making one)."""
    return _template(database_server, "empty")


@pytest.fixture(scope="session")
def migrated_template(database_server: DatabaseServer) -> str:
    """A database migrated once, kept to be copied (:func:`migrated_database_url`)."""
    return _template(database_server, "migrated", migrate)


def _template(
    database_server: DatabaseServer, kind: str, prepare: Callable[[str], object] | None = None
) -> str:
    name = f"template-{kind}-{uuid4().hex[:10]}"
    url = database_server.create_database(name)
    if prepare is not None:
        prepare(url)
    database_server.seal_template(name)
    return name


@pytest.fixture
def fresh_database_url(
    database_server: DatabaseServer, empty_template: str, unique_name: str
) -> Iterator[str]:
    """A database of the test's own, as the server makes one: no table of ours."""
    url = database_server.create_database(unique_name, empty_template)
    yield url
    database_server.drop_database(unique_name)


@pytest.fixture
def migrated_database_url(
    database_server: DatabaseServer, migrated_template: str, unique_name: str
) -> Iterator[str]:
    """A database of the test's own with every migration applied (a copy of a database
    migrated once: on Citus, migrating distributes every table, seconds a test)."""
    url = database_server.create_database(unique_name, migrated_template)
    yield url
    database_server.drop_database(unique_name)


@pytest.fixture
def citus_database_url(citus_cluster: CitusCluster, unique_name: str) -> Iterator[str]:
    """A database of the test's own on every node of the cluster, Citus in each and the
    workers registered: the coordinator's URL for it. For the tests of Citus itself, whatever
    ``--database`` says."""
    url = citus_cluster.create_database(unique_name)
    yield url
    citus_cluster.drop_database(unique_name)
