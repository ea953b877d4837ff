"""``llm-bot bench retrieval``: memory search latency at 10k and 100k memories.

Measures the database side of a search (the hybrid SQL of :mod:`llm_bot.memory.search`), so
memories are bulk-loaded with synthetic unit vectors and texts through binary COPY into the
store's own tables, and queries use synthetic vectors: embedding cost is excluded on purpose,
it depends on the provider, not on us. Each size runs in a fresh schema of the given database.
"""

from __future__ import annotations

import random
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from pgvector.psycopg import register_vector_async
from psycopg import AsyncConnection
from psycopg.types.json import Jsonb

from llm_bot.memory.namespaces import namespace_text, user_namespace
from llm_bot.memory.schemas import scratch_schema
from llm_bot.memory.search import SearchMode, hybrid_search
from llm_bot.memory.store import MemoryStore, StoreOptions

WORDS = [
    *("tea", "coffee", "jazz", "chess", "sailing", "hiking", "violin", "cello", "tennis"),
    *("marathon", "python", "garden", "cats", "dogs", "pizza", "sushi", "vegan", "thriller"),
    *("comedy", "opera", "lisbon", "berlin", "tokyo", "painting", "poetry", "climbing"),
    *("surfing", "cycling", "baking", "knitting", "astronomy", "birds", "history", "cricket"),
]
DIMENSIONS = 384


@dataclass(frozen=True)
class LatencyReport:
    memories: int
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
        cuts = statistics.quantiles(timings, n=100)
        reports.append(
            LatencyReport(
                memories,
                users,
                mode,
                queries,
                round(statistics.median(timings), 2),
                round(cuts[94], 2),
                round(cuts[98], 2),
            )
        )
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
                reports += await measure_search(
                    connection, size, users, ("hybrid", "dense", "lexical"), queries, rng
                )
                progress(
                    f"{size}: " + ", ".join(f"{r.mode} p95 {r.p95_ms} ms" for r in reports[-3:])
                )
    return reports
