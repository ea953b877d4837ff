"""``llm-bot bench retrieval``: memory search at 10k and 100k memories, history recall at 100k
turns, over 1,000 users.

Measures the database side of a search (the SQL of :mod:`llm_bot.memory.search` and
:mod:`llm_bot.memory.recall`), so data is bulk-loaded with synthetic unit vectors and texts
through binary COPY into the real tables, and queries use synthetic vectors: embedding cost is
excluded on purpose, it depends on the provider, not on us. Each size runs in a fresh schema.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from llm_bot.db.migrate import migrate
from llm_bot.db.schemas import scratch_schema
from llm_bot.memory.namespaces import namespace_text, user_namespace
from llm_bot.memory.recall import recall_turns
from llm_bot.memory.search import SearchMode, hybrid_search
from llm_bot.memory.store import MemoryStore, StoreOptions

WORDS = [
    *("tea", "coffee", "jazz", "chess", "sailing", "hiking", "violin", "cello", "tennis"),
    *("marathon", "python", "garden", "cats", "dogs", "pizza", "sushi", "vegan", "thriller"),
    *("comedy", "opera", "lisbon", "berlin", "tokyo", "painting", "poetry", "climbing"),
    *("surfing", "cycling", "baking", "knitting", "astronomy", "birds", "history", "cricket"),
]
DIMENSIONS = 384
MODES: tuple[SearchMode, ...] = ("hybrid", "dense", "lexical")


@dataclass(frozen=True)
class LatencyReport:
    kind: str  # "memories" or "history"
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


async def load_memories(
    connection: AsyncConnection[object],
    memories: int,
    users: int,
    rng: random.Random,
    progress: Callable[[str], None],
) -> None:
    """Fill ``store`` and ``store_vectors`` of the current schema by binary COPY."""
    await register_vector_async(connection)
    async with connection.cursor() as cursor:
        async with cursor.copy(
            "COPY store (prefix, key, value) FROM STDIN (FORMAT BINARY)"
        ) as store_copy:
            store_copy.set_types(["text", "text", "jsonb"])
            keys: list[tuple[str, str]] = []
            for index in range(memories):
                prefix = namespace_text(user_namespace(f"user-{index % users}"))
                key = str(uuid.UUID(int=rng.getrandbits(128)))
                text = f"likes {rng.choice(WORDS)} and {rng.choice(WORDS)}, fact {index}"
                await store_copy.write_row((prefix, key, Jsonb({"content": text, "metadata": {}})))
                keys.append((prefix, key))
        async with cursor.copy(
            "COPY store_vectors (prefix, key, field_name, embedding) FROM STDIN (FORMAT BINARY)"
        ) as vector_copy:
            vector_copy.set_types(["text", "text", "text", "vector"])
            for done, (prefix, key) in enumerate(keys, start=1):
                await vector_copy.write_row((prefix, key, "content", unit_vector(rng)))
                if done % 20_000 == 0:
                    progress(f"loaded {done}/{memories} memories")
    await connection.execute("ANALYZE store")
    await connection.execute("ANALYZE store_vectors")


async def measure_search(
    connection: AsyncConnection[object],
    memories: int,
    users: int,
    modes: Sequence[SearchMode],
    queries: int,
    rng: random.Random,
) -> list[LatencyReport]:
    reports = []
    for mode in modes:
        timings = []
        for _ in range(queries):
            prefix = namespace_text(user_namespace(f"user-{rng.randrange(users)}"))
            text = f"does the user like {rng.choice(WORDS)}?"
            began = time.perf_counter()
            await hybrid_search(
                connection, prefix, text, unit_vector(rng), limit=10, threshold=-1.0, mode=mode
            )
            timings.append((time.perf_counter() - began) * 1000)
        reports.append(_report("memories", memories, users, mode, timings))
    return reports


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
    """Each size in its own fresh schema: load, rebuild the ANN index, measure every mode."""
    rng = random.Random(seed)  # noqa: S311 (synthetic data, reproducible on purpose)
    reports: list[LatencyReport] = []
    for size in sizes:
        async with scratch_schema(database_url, f"bench_retrieval_{size}") as url:
            store_context = MemoryStore.open(url, SyntheticEmbedder(rng), StoreOptions())
            async with store_context as store, store.connection() as connection:
                progress(f"loading {size} memories over {users} users")
                began = time.perf_counter()
                # Building the ANN index once after the load is far cheaper than per row.
                index = await connection.execute(
                    "SELECT indexdef FROM pg_indexes WHERE schemaname = current_schema()"
                    " AND indexname = 'store_vectors_embedding_idx'"
                )
                definition = await index.fetchone()
                await connection.execute("DROP INDEX IF EXISTS store_vectors_embedding_idx")
                await load_memories(connection, size, users, rng, progress)
                if definition is not None:
                    await connection.execute("SET maintenance_work_mem = '1GB'")
                    await connection.execute(definition["indexdef"])
                progress(f"loaded and indexed in {time.perf_counter() - began:.1f} s; searching")
                reports += await measure_search(connection, size, users, MODES, queries, rng)
                progress(
                    f"{size}: " + ", ".join(f"{r.mode} p95 {r.p95_ms} ms" for r in reports[-3:])
                )
    return reports


async def load_history(
    connection: AsyncConnection[object],
    turns: int,
    users: int,
    rng: random.Random,
    progress: Callable[[str], None],
) -> None:
    """``turns`` messages in alternating pairs over five threads per user."""
    await register_vector_async(connection)
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
            user = f"user-{(index // 2) % users}"
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
                f"e{index // 2}",
                unit_vector(rng),
            )
            await copy.write_row(row)
            if (index + 1) % 20_000 == 0:
                progress(f"loaded {index + 1}/{turns} turns")
    await connection.execute("ANALYZE conversation_turns")


async def run_recall_bench(
    database_url: str,
    turns: int,
    users: int,
    queries: int,
    progress: Callable[[str], None],
    seed: int = 11,
) -> list[LatencyReport]:
    rng = random.Random(seed)  # noqa: S311 (synthetic data, reproducible on purpose)
    reports = []
    async with scratch_schema(database_url, f"bench_recall_{turns}") as url:
        await asyncio.to_thread(migrate, url)
        async with await AsyncConnection.connect(url, autocommit=True) as connection:
            progress(f"loading {turns} history turns over {users} users")
            await load_history(connection, turns, users, rng, progress)
            for mode in MODES:
                timings = []
                for _ in range(queries):
                    user = f"user-{rng.randrange(users)}"
                    text = f"what did I say about {rng.choice(WORDS)}?"
                    began = time.perf_counter()
                    await recall_turns(
                        connection,
                        user,
                        text,
                        unit_vector(rng),
                        exclude=(),
                        limit=5,
                        threshold=-1.0,
                        mode=mode,
                    )
                    timings.append((time.perf_counter() - began) * 1000)
                reports.append(_report("history", turns, users, mode, timings))
            progress(f"{turns} turns: " + ", ".join(f"{r.mode} p95 {r.p95_ms} ms" for r in reports))
    return reports


def _report(kind: str, size: int, users: int, mode: str, timings: list[float]) -> LatencyReport:
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
