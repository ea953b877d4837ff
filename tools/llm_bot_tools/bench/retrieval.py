"""``llm-bot bench retrieval``: memory search at 10k and 100k memories, history recall at 100k
turns, over 1,000 users; then depth (:mod:`llm_bot_tools.bench.depth`).

Measures the database side of a search (the SQL of :mod:`llm_bot.memory.search` and
:mod:`llm_bot.memory.recall`), so data is bulk-loaded with synthetic unit vectors and texts
through binary COPY into the real tables, and queries use synthetic vectors: embedding cost is
excluded on purpose, it depends on the provider, not on us. Each size runs in a fresh schema.
Spread and depth are different costs: a search reads one user's rows, so 100k rows over 1,000
users is 100 rows a search, while one long-lived user makes every one of their searches read
all of theirs.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection, sql
from psycopg.rows import tuple_row
from psycopg.types.json import Jsonb

from llm_bot.db.hybrid import SearchMode
from llm_bot.db.migrate import migrate
from llm_bot.db.vectors import register_vectors
from llm_bot.memory.budget import recall_candidates
from llm_bot.memory.context import ContextLimits
from llm_bot.memory.recall import recall_turns
from llm_bot.memory.search import hybrid_search
from llm_bot.memory.store import MemoryStore
from llm_bot.settings import Settings, load_settings
from llm_bot_tools.local.scratch_schemas import scratch_schema

WORDS = [
    *("tea", "coffee", "jazz", "chess", "sailing", "hiking", "violin", "cello", "tennis"),
    *("marathon", "python", "garden", "cats", "dogs", "pizza", "sushi", "vegan", "thriller"),
    *("comedy", "opera", "lisbon", "berlin", "tokyo", "painting", "poetry", "climbing"),
    *("surfing", "cycling", "baking", "knitting", "astronomy", "birds", "history", "cricket"),
]
DIMENSIONS = 384
MODES: tuple[SearchMode, ...] = ("hybrid", "dense", "lexical")
# The candidates recall ranks for the worker at its default budgets: the recall section's and
# the memories', which it takes where they leave it.
WORKER_RECALL = recall_candidates(
    ContextLimits.from_settings(Settings.model_construct()).memory_and_recall_tokens
)


@dataclass(frozen=True)
class LatencyReport:
    kind: str  # "memories" or "history"; "memories-depth", "history-depth": one user's
    # (``size`` is then that user's count and ``users`` the users besides them)
    size: int
    users: int
    mode: str
    queries: int
    p50_ms: float
    p95_ms: float
    p99_ms: float

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def unit_vector(rng: random.Random, dimensions: int = DIMENSIONS) -> list[float]:
    vector = [rng.gauss(0.0, 1.0) for _ in range(dimensions)]
    norm = sum(x * x for x in vector) ** 0.5
    return [x / norm for x in vector]


async def register_copy_and_search(connection: AsyncConnection[Any]) -> None:
    """The loaders' two vector adapters: pgvector's for the numpy arrays COPY writes, and the
    worker's (:func:`llm_bot.db.vectors.register_vectors`) for the searches' parameters."""
    await register_vector_async(connection)
    register_vectors(connection)


async def load_memories(
    connection: AsyncConnection[Any],
    memories: int,
    users: int,
    rng: random.Random,
    progress: Callable[[str], None],
    owner: str = "user",
) -> None:
    """Fill ``memories`` of the current schema by binary COPY, round robin over the users
    ``{owner}-0`` to ``{owner}-{users - 1}``."""
    await register_copy_and_search(connection)
    at = datetime(2026, 1, 1, tzinfo=UTC)
    columns = "user_id, key, content, metadata, visibility, embedding, created_at, updated_at"
    async with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY memories ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(
            ["text", "text", "text", "jsonb", "text", "vector", "timestamptz", "timestamptz"]
        )
        for index in range(memories):
            user = f"{owner}-{index % users}"
            key = str(uuid.UUID(int=rng.getrandbits(128)))
            text = f"likes {rng.choice(WORDS)} and {rng.choice(WORDS)}, fact {index}"
            await copy.write_row((user, key, text, Jsonb({}), "dm", unit_vector(rng), at, at))
            if (index + 1) % 10_000 == 0:
                progress(f"loaded {index + 1}/{memories} memories")
    await connection.execute("ANALYZE memories")


async def measure_search(
    connection: AsyncConnection[Any],
    memories: int,
    users: int,
    modes: Sequence[SearchMode],
    queries: int,
    rng: random.Random,
    *,
    pick_user: Callable[[], str] | None = None,
    kind: str = "memories",
) -> list[LatencyReport]:
    """``queries`` searches per mode, each for the user ``pick_user`` names (by default a
    random one of ``user-0`` ... ``user-{users - 1}``)."""
    pick = pick_user or (lambda: f"user-{rng.randrange(users)}")
    reports = []
    for mode in modes:

        async def search(mode: SearchMode = mode) -> object:
            text = f"does the user like {rng.choice(WORDS)}?"
            return await hybrid_search(
                connection, pick(), text, unit_vector(rng), limit=10, threshold=-1.0, mode=mode
            )

        reports.append(latency_report(kind, memories, users, mode, await timed(queries, search)))
    return reports


async def measure_recall(
    connection: AsyncConnection[Any],
    turns: int,
    users: int,
    queries: int,
    rng: random.Random,
    *,
    pick_user: Callable[[], str] | None = None,
    kind: str = "history",
) -> list[LatencyReport]:
    """As :func:`measure_search`, for history recall (as many candidates as the worker ranks
    at its default recall budget: :data:`WORKER_RECALL`)."""
    pick = pick_user or (lambda: f"user-{rng.randrange(users)}")
    reports = []
    for mode in MODES:

        async def recall(mode: SearchMode = mode) -> object:
            text = f"what did I say about {rng.choice(WORDS)}?"
            vector = unit_vector(rng)
            return await recall_turns(
                connection,
                pick(),
                text,
                vector,
                exclude=(),
                limit=WORKER_RECALL,
                threshold=-1.0,
                mode=mode,
            )

        reports.append(latency_report(kind, turns, users, mode, await timed(queries, recall)))
    return reports


async def timed(queries: int, search: Callable[[], Awaitable[object]]) -> list[float]:
    """Milliseconds of each of ``queries`` calls. The query's vector and text are made inside
    the call but cost microseconds against the milliseconds of the statement."""
    timings = []
    for _ in range(queries):
        began = time.perf_counter()
        await search()
        timings.append((time.perf_counter() - began) * 1000)
    return timings


@asynccontextmanager
async def indexes_built_after(
    connection: AsyncConnection[Any], table: str, progress: Callable[[str], None]
) -> AsyncIterator[None]:
    """Drop ``table``'s secondary indexes for the load and build them again afterwards: once
    over the loaded rows is far cheaper than row by row (a GIN index above all)."""
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(
            "SELECT i.indexname, i.indexdef FROM pg_indexes i"
            " WHERE i.schemaname = current_schema() AND i.tablename = %s"
            " AND NOT EXISTS (SELECT FROM pg_constraint c"
            "  WHERE c.conindid = format('%%I.%%I', i.schemaname, i.indexname)::regclass)",
            (table,),
        )
        definitions: list[tuple[str, str]] = await cursor.fetchall()
    for name, _ in definitions:
        await connection.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(name)))
    yield
    await connection.execute("SET maintenance_work_mem = '2GB'")
    for name, definition in definitions:
        began = time.perf_counter()
        await connection.execute(definition)
        progress(f"built {name} in {time.perf_counter() - began:.1f} s")
    await connection.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(table)))


class SyntheticEmbedder:
    """Random unit vectors: the store needs an embedder, the benchmark excludes its cost."""

    model = "synthetic"

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    async def dimensions(self) -> int:
        return DIMENSIONS

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [unit_vector(self._rng) for _ in texts]


async def run_retrieval_bench(
    database_url: str,
    sizes: Sequence[int],
    users: int,
    queries: int,
    progress: Callable[[str], None],
    seed: int = 7,
) -> list[LatencyReport]:
    """Each size in its own fresh schema: load, rebuild the indexes, measure every mode."""
    rng = random.Random(seed)  # noqa: S311 (synthetic data, reproducible on purpose)
    reports: list[LatencyReport] = []
    for size in sizes:
        async with scratch_schema(database_url, f"bench_retrieval_{size}") as url:
            await asyncio.to_thread(migrate, url)
            store_context = MemoryStore.open(
                load_settings(DATABASE_URL=url), SyntheticEmbedder(rng), role="setup"
            )
            async with store_context as store, store.connection() as connection:
                progress(f"loading {size} memories over {users} users")
                began = time.perf_counter()
                async with indexes_built_after(connection, "memories", progress):
                    await load_memories(connection, size, users, rng, progress)
                progress(f"loaded and indexed in {time.perf_counter() - began:.1f} s; searching")
                reports += await measure_search(connection, size, users, MODES, queries, rng)
                progress(f"{size}: " + p95s(reports[-3:]))
    return reports


async def load_history(
    connection: AsyncConnection[Any],
    turns: int,
    users: int,
    rng: random.Random,
    progress: Callable[[str], None],
    owner: str = "user",
) -> None:
    """``turns`` messages in alternating pairs over five threads per user, users named
    ``{owner}-0`` to ``{owner}-{users - 1}``."""
    await register_copy_and_search(connection)
    next_seq: dict[str, int] = {}
    columns = "thread_id, seq, user_id, session_id, pair_index, role, content, created_at,"
    columns += " source_event, embedding"
    async with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY conversation_turns ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(
            [
                "text",
                "int8",
                "text",
                "int8",
                "int8",
                "text",
                "text",
                "timestamptz",
                "text",
                "vector",
            ]
        )
        for index in range(turns):
            user = f"{owner}-{(index // 2) % users}"
            thread = f"thread-{user}-{(index // (2 * users)) % 5}"
            seq = next_seq.get(thread, 0) + 1
            next_seq[thread] = seq
            role = "user" if index % 2 == 0 else "assistant"
            text = f"{role} says something about {rng.choice(WORDS)} and {rng.choice(WORDS)}"
            at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=index)
            row = (
                thread,
                seq,
                user,
                1,
                (seq + 1) // 2,
                role,
                text,
                at,
                f"{owner}-e{index // 2}",
                unit_vector(rng),
            )
            await copy.write_row(row)
            if (index + 1) % 20_000 == 0:
                progress(f"loaded {index + 1}/{turns} turns")


async def run_recall_bench(
    database_url: str,
    turns: int,
    users: int,
    queries: int,
    progress: Callable[[str], None],
    seed: int = 11,
) -> list[LatencyReport]:
    rng = random.Random(seed)  # noqa: S311 (synthetic data, reproducible on purpose)
    async with scratch_schema(database_url, f"bench_recall_{turns}") as url:
        await asyncio.to_thread(migrate, url)
        async with await _connect(url) as connection:
            progress(f"loading {turns} history turns over {users} users")
            async with indexes_built_after(connection, "conversation_turns", progress):
                await load_history(connection, turns, users, rng, progress)
            reports = await measure_recall(connection, turns, users, queries, rng)
            progress(f"{turns} turns: " + p95s(reports))
    return reports


async def _connect(url: str) -> AsyncConnection[Any]:
    """A connection as the worker's pool makes them (:class:`MemoryStore`): every statement
    prepared from its first run, so the plans measured are the ones the worker gets."""
    return await AsyncConnection.connect(url, autocommit=True, prepare_threshold=0)


def p95s(reports: Sequence[LatencyReport]) -> str:
    return ", ".join(f"{r.mode} p95 {r.p95_ms} ms" for r in reports)


def latency_report(
    kind: str, size: int, users: int, mode: str, timings: list[float]
) -> LatencyReport:
    cuts = statistics.quantiles(timings, n=100)
    return LatencyReport(
        kind,
        size,
        users,
        mode,
        len(timings),
        round(statistics.median(timings), 2),
        round(cuts[94], 2),
        round(cuts[98], 2),
    )
