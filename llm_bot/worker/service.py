"""The worker's lifecycle: start, serve until SIGTERM/SIGINT/SIGHUP (or a broken stream), drain,
stop.

Start-up goes from the inside out: migrations (idempotent, advisory-locked), the database pool,
the publisher, the handler with the model client and graph (:func:`open_handler`), the health
listener, and the subscription last, so nothing is pulled before it can be processed. Shutdown
goes the other way, arq style: stop taking work, give in-flight work ``LLM_BOT_SHUTDOWN_GRACE_S``
to finish, cancel (nack) the rest, flush the publisher, close clients and the pool, and log the
counts.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from types import TracebackType
from typing import Any, Self

from google.cloud.pubsub_v1 import PublisherClient, SubscriberClient
from prometheus_client import CollectorRegistry
from psycopg_pool import AsyncConnectionPool

from llm_bot.answer.unit import Answerer
from llm_bot.bus_names import prefixed
from llm_bot.consolidation.derive import Consolidator
from llm_bot.consolidation.extraction import MAX_OUTPUT_TOKENS
from llm_bot.consolidation.sweep import Sweeper
from llm_bot.consolidation.unit import JobUnit
from llm_bot.db.group_commit import GroupCommitter
from llm_bot.db.leases import LeaseKeeper
from llm_bot.db.migrate import migrate
from llm_bot.db.pools import open_pool
from llm_bot.graph.assembly import context_from_settings, graph_from_settings
from llm_bot.llm.client import ModelClient
from llm_bot.memory.wiring import memory_services, open_memory_store
from llm_bot.platform_tools.client import McpClient, gateway_client
from llm_bot.platform_tools.ledger import PostgresToolLedger
from llm_bot.settings import Settings
from llm_bot.telemetry.loop_lag import watch_loop_lag
from llm_bot.telemetry.metrics import CountsCollector
from llm_bot.transport.clients import subscriber_client
from llm_bot.transport.consolidation import ConsolidationHandler
from llm_bot.transport.handler import EventHandler, dead_letter_topic
from llm_bot.transport.publisher import EventPublisher, Publisher
from llm_bot.transport.stats import WorkerStats
from llm_bot.transport.subscriber import Handler, StreamingSubscriber
from llm_bot.worker.exit_deadline import exit_after
from llm_bot.worker.health import HealthServer
from llm_bot.worker.preflight import dead_letter_problem

logger = logging.getLogger(__name__)

READY_CHECK_TIMEOUT_S = 2.0
# An abandoned start closes what it opened in well under a second; past this, a thread is stuck
# and the process exits anyway (Cloud Run's SIGKILL comes 10 s after its SIGTERM).
ABANDONED_START_DEADLINE_S = 3.0
# Closing what the worker opened, once its messages are finished or handed back: a close that
# blocks (a client's thread that never returns) must not keep a stopped worker alive, so past
# this the process exits, logging every thread's stack (:mod:`.exit_deadline`).
CLOSE_DEADLINE_S = 15.0


class WorkerError(RuntimeError):
    """The worker cannot start as configured."""


class Worker:
    def __init__(
        self,
        settings: Settings,
        *,
        metrics_registry: CollectorRegistry | None = None,
    ) -> None:
        self._settings = settings
        self._metrics_registry = metrics_registry
        self._resources = contextlib.AsyncExitStack()
        self._pool: AsyncConnectionPool[Any] | None = None
        self._subscriber: StreamingSubscriber | None = None
        # The tool-gateway's connection (MCP_GATEWAY_URL), or None: it never holds up readiness.
        self.gateway: McpClient | None = gateway_client(settings)
        self.stats = WorkerStats()
        # The consolidation jobs' subscription (LLM_BOT_CONSOLIDATION), or None.
        self._consolidating: StreamingSubscriber | None = None

    async def __aenter__(self) -> Self:
        try:
            await self.start()
        except BaseException:
            await self._resources.aclose()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.shutdown()

    async def start(self) -> None:
        settings, resources = self._settings, self._resources
        self._pool = await open_database(settings, resources)
        publisher = Publisher.from_settings(settings)
        resources.push_async_callback(asyncio.to_thread, publisher.close)
        handler, committer, leases = await open_handler(
            settings, self._pool, publisher, self.stats, resources, self.gateway
        )
        self._export_counts(committer, leases)
        if self.gateway is not None:
            self.gateway.start()
            resources.push_async_callback(self.gateway.aclose)
        health = HealthServer(self.readiness, settings.port, registry=self._metrics_registry)
        await health.start()
        resources.push_async_callback(health.close)
        lag_probe = asyncio.create_task(watch_loop_lag(), name="loop-lag")
        resources.push_async_callback(cancel_and_wait, lag_probe)
        client, path = subscription_of(settings, settings.subscription)
        topic = PublisherClient.topic_path(
            settings.google_cloud_project, dead_letter_topic(settings)
        )
        problem = await dead_letter_problem(client, path, settings.max_delivery_attempts, topic)
        if problem is not None and settings.require_dead_letter_policy:
            raise WorkerError(f"{problem} (LLM_BOT_REQUIRE_DEAD_LETTER_POLICY is set)")
        if problem is not None:
            logger.warning("subscription check: %s", problem)
        self._subscriber = start_pulling(
            settings, client, path, handler.handle, settings.max_in_flight, resources
        )
        if settings.consolidation:
            self._consolidating = await open_consolidation(
                settings, publisher, self.stats, resources
            )

    def _export_counts(self, committer: GroupCommitter, leases: LeaseKeeper) -> None:
        """The stats on ``/metrics`` while the worker runs, the group commit's transactions and
        the failed lease renewals as they stand (the stats take them when those close)."""
        registry = self._metrics_registry
        if registry is None:
            return

        def counts() -> dict[str, int]:
            live = {
                "transactions": committer.transactions,
                "committed": committer.committed,
                "batches_overtaken": committer.overtaken,
                "lease_renewals_failed": leases.failures.total(),
            }
            return self.stats.as_dict() | live

        collector = CountsCollector(counts)
        registry.register(collector)
        self._resources.callback(registry.unregister, collector)

    async def serve(self, stop: asyncio.Event) -> int:
        """Run until ``stop`` is set (exit code 0) or a stream ends by itself (1): the events'
        or, with ``LLM_BOT_CONSOLIDATION``, the jobs', whose end would otherwise leave every
        closed session unconsolidated without a word while the worker answered on."""
        subscribers = [self._require_subscriber()]
        if self._consolidating is not None:
            subscribers.append(self._consolidating)
        waiters = [asyncio.create_task(stop.wait())]
        waiters += [asyncio.create_task(each.stream_ended.wait()) for each in subscribers]
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()
        for subscriber in subscribers:
            error = subscriber.stream_error()
            if error is not None:
                logger.error("the stream of %s ended: %s", subscriber.path, error)
                return 1
        return 0

    async def shutdown(self) -> None:
        subscriber = self._subscriber
        finished = cancelled = 0
        if subscriber is not None:
            in_flight = subscriber.in_flight
            logger.info("stopping: %d event(s) in flight", in_flight)
            finished, cancelled = await subscriber.stop(self._settings.shutdown_grace_s)
        if self._consolidating is not None:  # a job handed back is delivered again
            jobs = await self._consolidating.stop(self._settings.shutdown_grace_s)
            logger.info("consolidation stopped: %d job(s) finished, %d handed back", *jobs)
        deadline = exit_after(CLOSE_DEADLINE_S, "closing the worker's resources")
        try:
            await self._resources.aclose()
        finally:
            deadline.set()
        logger.info(
            "worker stopped: %d in-flight finished, %d handed back; counts %s",
            finished,
            cancelled,
            self.stats.as_dict(),
        )

    async def readiness(self) -> tuple[bool, str]:
        subscriber, pool = self._subscriber, self._pool
        if subscriber is None or not subscriber.subscribed:
            return False, "not subscribed"
        if pool is None:
            return False, "no database pool"
        try:
            async with asyncio.timeout(READY_CHECK_TIMEOUT_S), pool.connection() as connection:
                await connection.execute("SELECT 1")
        except Exception as error:
            return False, f"database unreachable: {type(error).__name__}"
        return True, "subscribed, database reachable" + self._gateway_detail()

    def _gateway_detail(self) -> str:
        """Without its gateway the worker answers with its built-in tools, and says so."""
        if self.gateway is None:
            return ""
        status = self.gateway.status()
        if status["connected"]:
            return f"; tool-gateway connected ({status['tools']} tools)"
        return "; tool-gateway not connected (built-in tools only)"

    def _require_subscriber(self) -> StreamingSubscriber:
        if self._subscriber is None:
            raise WorkerError("worker not started")
        return self._subscriber


async def open_database(
    settings: Settings, resources: contextlib.AsyncExitStack
) -> AsyncConnectionPool[Any]:
    """The migrated database's pool, closed by ``resources``."""
    if settings.database_url is None:
        raise WorkerError("DATABASE_URL is not set")
    url = settings.database_url.get_secret_value()
    await asyncio.to_thread(migrate, url, settings.db_connect_timeout_s)
    return await resources.enter_async_context(open_pool(settings, "ledger"))


async def open_handler(
    settings: Settings,
    pool: AsyncConnectionPool[Any],
    publisher: EventPublisher,
    stats: WorkerStats,
    resources: contextlib.AsyncExitStack,
    gateway: McpClient | None = None,
) -> tuple[EventHandler, GroupCommitter, LeaseKeeper]:
    """Everything between a delivery and a publish (model, memory, group committer, claim
    leases), each closed by ``resources``, and the committer and the lease keeper, for their
    live counts. Nothing here depends on where deliveries come from, so the handler's tests
    hand it deliveries and a publisher of their own, without Pub/Sub. The graph offers
    ``gateway``'s allowed tools, as it lists them at each event, beside the built-ins, and
    records their calls in the database's ledger, so a retried event does not send them
    again."""
    model = ModelClient.from_settings(settings)
    resources.push_async_callback(model.close)
    services = await resources.enter_async_context(memory_services(settings))
    context = context_from_settings(
        settings,
        model,
        services.retriever,
        services.memory_tools,
        services.personalities,
        gateway,
        PostgresToolLedger.from_settings(pool, settings),
    )
    committer = GroupCommitter.from_settings(pool, settings)
    resources.callback(_count_commits, stats, committer)  # runs after it closed
    await resources.enter_async_context(committer)
    leases = LeaseKeeper.from_settings(pool, settings, committer)
    resources.callback(_count_renewals, stats, leases)  # runs after it closed
    await resources.enter_async_context(leases)
    handler = EventHandler(
        settings=settings,
        answerer=Answerer(graph_from_settings(settings), context, services.commit),
        pool=pool,
        group=committer,
        publisher=publisher,
        stats=stats,
        leases=leases,
    )
    return handler, committer, leases


async def open_consolidation(
    settings: Settings,
    publisher: EventPublisher,
    stats: WorkerStats,
    resources: contextlib.AsyncExitStack,
) -> StreamingSubscriber:
    """The consolidation jobs' subscription (:mod:`llm_bot.transport.consolidation`) and the
    sweep that publishes them (:mod:`llm_bot.consolidation.sweep`), on a model client, a
    database pool and flow
    control of their own, each closed by ``resources``."""
    model = ModelClient.from_settings(
        settings, model=settings.consolidation_model, max_tokens=MAX_OUTPUT_TOKENS
    )
    resources.push_async_callback(model.close)
    store = await resources.enter_async_context(open_memory_store(settings))
    sweeper = Sweeper(store, publisher.publish, settings)
    sweeping = asyncio.create_task(sweeper.run(), name="consolidation-sweep")
    resources.push_async_callback(cancel_and_wait, sweeping)
    handler = ConsolidationHandler(
        settings=settings,
        unit=JobUnit(Consolidator(store, model)),
        store=store,
        publisher=publisher,
        stats=stats,
    )
    client, path = subscription_of(settings, settings.consolidation_subscription)
    return start_pulling(
        settings, client, path, handler.handle, settings.consolidation_max_in_flight, resources
    )


def subscription_of(settings: Settings, name: str) -> tuple[SubscriberClient, str]:
    """A client of its own for the subscription ``name`` (prefixed), and its path."""
    client = subscriber_client(settings.pubsub_emulator_host)
    path = client.subscription_path(
        settings.google_cloud_project, prefixed(name, settings.bus_prefix)
    )
    return client, path


def start_pulling(
    settings: Settings,
    client: SubscriberClient,
    path: str,
    handle: Handler,
    max_in_flight: int,
    resources: contextlib.AsyncExitStack,
) -> StreamingSubscriber:
    """Pull ``path`` into ``handle``, ``max_in_flight`` at once, until ``resources`` close."""
    subscriber = StreamingSubscriber(
        client,
        path,
        handle,
        max_in_flight=max_in_flight,
        max_message_bytes=settings.max_message_bytes,
        lease_extension_s=settings.lease_extension_s,
    )
    resources.push_async_callback(asyncio.to_thread, subscriber.close)
    subscriber.start()
    logger.info("worker pulling from %s", path)
    return subscriber


def _count_commits(stats: WorkerStats, committer: GroupCommitter) -> None:
    stats.transactions += committer.transactions
    stats.committed += committer.committed
    stats.batches_overtaken += committer.overtaken


def _count_renewals(stats: WorkerStats, leases: LeaseKeeper) -> None:
    stats.lease_renewals_failed += leases.failures.total()


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def install_signal_handlers(stop: asyncio.Event) -> None:
    """SIGTERM (Cloud Run), SIGINT (Ctrl-C) and SIGHUP (the terminal a worker was started from
    closed) all mean: stop taking work and drain. Left to its default, SIGHUP would end the
    process where it stands: its model calls lost, its messages and claims held until their
    leases run out."""
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(signum, stop.set)


async def run_worker(
    settings: Settings, *, metrics_registry: CollectorRegistry | None = None
) -> int:
    """Serve until SIGTERM/SIGINT/SIGHUP. A signal during start-up (migrations, a slow database or
    model) abandons the start at once and exits 0: the platform is stopping an instance that
    never took work, and waiting for it to finish starting only delays the stop."""
    stop, started = asyncio.Event(), asyncio.Event()
    install_signal_handlers(stop)

    async def serve() -> int:
        async with Worker(settings, metrics_registry=metrics_registry) as worker:
            started.set()
            # What start-up built (modules, models' schemas, the graph, pools) lives as long as
            # the process: frozen out of the cyclic collector's sight, each full collection
            # walks what events made since instead of ~260k objects, ~0.2 s each and a tenth
            # of the worker's CPU at load (docs/performance.md).
            gc.freeze()
            return await worker.serve(stop)

    serving = asyncio.create_task(serve(), name="worker")
    stopping = asyncio.create_task(stop.wait(), name="stop-signal")
    await asyncio.wait({serving, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if stop.is_set() and not started.is_set():
        logger.info("stop requested during start-up: abandoning the start")
        exit_after(ABANDONED_START_DEADLINE_S, "abandoning the start")
        await cancel_and_wait(serving)  # the worker closes what it had opened
        return 0
    return await serving  # drains after a stop; raises what a failed start raised
