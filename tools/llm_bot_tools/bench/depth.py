"""``llm-bot bench retrieval``'s depth part: recall for users from 1k turns to the deepest asked
for, for a typical user beside them, and window + recall in a busy shared channel; memory
search for one user with many memories.

History vectors are not uniform noise: in 384 dimensions every random vector is about equally
far from every other, so there are no nearest neighbours to find, and an approximate index
returns a near-random 5 % of the exact top 40 (measured). A turn's vector is the sum of a unit
"topic" vector for each of its two words and noise of the same norm as a topic, normalised, and
a question about a word is that word's topic plus noise: turns on the same subjects are near
each other, as sentence embeddings of a conversation are. Vectors are drawn with numpy in
blocks, so a million turns load in minutes (binary COPY, indexes built once afterwards).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray
from psycopg import AsyncConnection

from llm_bot.db.migrate import migrate
from llm_bot.db.placements import tenant_of_thread
from llm_bot.db.turn_index import SEARCH_SETTINGS
from llm_bot.lifecycle.turn_backfill import index_deep_users
from llm_bot.memory.recall import Depth, recall_turns
from llm_bot.memory.store import MemoryStore, settle_space
from llm_bot.memory.turns.window import read_window
from llm_bot.settings import Settings, load_settings
from llm_bot_tools.bench.retrieval import (
    DIMENSIONS,
    MODES,
    WORDS,
    WORKER_RECALL,
    LatencyReport,
    SyntheticEmbedder,
    indexes_built_after,
    latency_report,
    load_memories,
    measure_search,
    p95s,
    register_copy_and_search,
    timed,
)
from llm_bot_tools.local.scratch_schemas import scratch_schema

# Everyone else: as many users as in the spread runs, each of a typical depth, so the deep
# users sit among others as in production, for the planner too.
TYPICAL_TURNS = 100
TYPICAL_MEMORIES = 10
DEEP_USER = "deep-0"
DEPTH_STEPS = (1_000, 10_000, 100_000, 1_000_000)
CHANNEL = "bench:channel-0"
CHANNEL_SPEAKERS = 2_000  # a 1M-turn channel: 500 turns a speaker
START = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW_PAIRS: int = Settings.model_fields["context_pairs"].default
SESSION_IDLE = timedelta(seconds=Settings.model_fields["session_idle_seconds"].default)
BLOCK = 10_000
MAINTAIN_BATCH: int = Settings.model_fields["retention_batch_rows"].default
COPY_TYPES = ["text", "int8", "text", "int8", "int8", "text", "text", "timestamptz", "text"]
COPY_TYPES += ["vector", "text"]
Progress = Callable[[str], None]


def depths_up_to(turns: int) -> list[int]:
    """The depths measured on the way to ``turns``, for the plot of cost against depth."""
    return [depth for depth in DEPTH_STEPS if depth < turns] + [turns]


class Topics:
    """Unit topic vectors, one per word of :data:`WORDS`, and vectors made of them."""

    def __init__(self, generator: np.random.Generator, dimensions: int = DIMENSIONS) -> None:
        self._generator, self._dimensions = generator, dimensions
        self._topics = self._unit(generator.standard_normal((len(WORDS), dimensions)))

    def turns(self, words: NDArray[np.int64]) -> NDArray[np.float32]:
        """One vector per row of ``words`` (indexes into WORDS, two a turn)."""
        size = self._dimensions
        noise = self._generator.standard_normal((len(words), size)) / np.sqrt(size)
        return self._unit(self._topics[words].sum(axis=1) + noise)

    def question(self, word: int) -> list[float]:
        size = self._dimensions
        noise = self._generator.standard_normal(size) / np.sqrt(size)
        return [float(x) for x in self._unit(self._topics[word] + noise)]

    @staticmethod
    def _unit(vectors: NDArray[np.float64]) -> NDArray[np.float32]:
        norms = np.linalg.norm(vectors, axis=-1, keepdims=True)
        unit: NDArray[np.float32] = (vectors / norms).astype(np.float32)
        return unit


async def load_turns(
    connection: AsyncConnection[Any],
    topics: Topics,
    generator: np.random.Generator,
    turns: int,
    speaker: Callable[[int], str],
    thread: Callable[[int], str],
    progress: Progress,
) -> None:
    """``turns`` messages in user/assistant pairs by binary COPY; pair ``i`` is ``speaker(i)``'s
    in ``thread(i)``, a minute after the one before."""
    await register_copy_and_search(connection)
    columns = "thread_id, seq, user_id, session_id, pair_index, role, content, created_at,"
    columns += " source_event, embedding, visibility"
    next_seq: dict[str, int] = {}
    report_every = max(BLOCK, turns // 10)
    async with (
        connection.cursor() as cursor,
        cursor.copy(f"COPY conversation_turns ({columns}) FROM STDIN (FORMAT BINARY)") as copy,
    ):
        copy.set_types(COPY_TYPES)
        for first in range(0, turns, BLOCK):
            count = min(BLOCK, turns - first)
            words = generator.integers(0, len(WORDS), size=(count, 2))
            for offset, (pair, vector) in enumerate(zip(words, topics.turns(words), strict=True)):
                index = first + offset
                at = START + timedelta(minutes=index // 2)
                user, where = speaker(index // 2), thread(index // 2)
                seq = next_seq[where] = next_seq.get(where, 0) + 1
                role = "user" if index % 2 == 0 else "assistant"
                text = f"{role} says something about {WORDS[pair[0]]} and {WORDS[pair[1]]}"
                event = f"{user}-e{index // 2}"
                row = (where, seq, user, 1, (seq + 1) // 2, role, text, at, event, vector)
                await copy.write_row((*row, "public"))
            if (first + count) % report_every == 0 or first + count == turns:
                progress(f"loaded {first + count}/{turns} turns")
    for where in next_seq:
        await connection.execute(
            "INSERT INTO conversation_threads"
            " (tenant, thread_id, last_seq, session_id, last_turn_at)"
            " VALUES (%s, %s, %s, 1, %s) ON CONFLICT (tenant, thread_id) DO UPDATE"
            " SET last_seq = excluded.last_seq, last_turn_at = excluded.last_turn_at",
            (tenant_of_thread(where), where, next_seq[where], START + timedelta(minutes=turns)),
        )


async def _index_deep_users(connection: AsyncConnection[Any], progress: Progress) -> None:
    """The deep users' turns marked for recall's index as ``llm-bot maintain`` marks them (COPY
    writes every turn unmarked), before the indexes are built: an HNSW insertion per marked
    row would take minutes. The job counts each user's turns through an index on the user,
    built here for it (the table's own are built after the load); the depth comes from the
    table's size, hence ANALYZE."""
    await connection.execute("CREATE INDEX bench_turns_by_user ON conversation_turns (user_id)")
    await connection.execute("ANALYZE conversation_turns")
    await index_deep_users(connection, MAINTAIN_BATCH, progress)
    await connection.execute("DROP INDEX bench_turns_by_user")


async def _connect(url: str) -> AsyncConnection[Any]:
    """A connection as the worker's pool makes them (:mod:`llm_bot.db.pools`): statements
    prepared from their first run, the HNSW walk of the worker."""
    connection = await AsyncConnection.connect(url, autocommit=True, prepare_threshold=0)
    await connection.execute("SELECT set_config(%s, %s, false)", SEARCH_SETTINGS)
    return connection


async def _typical_users(
    connection: AsyncConnection[Any], topics: Topics, generator: np.random.Generator, users: int
) -> None:
    def owner(pair: int) -> str:
        return f"user-{pair % users}"

    def thread(pair: int) -> str:
        return f"thread-{owner(pair)}-{(pair // users) % 5}"

    await load_turns(connection, topics, generator, TYPICAL_TURNS * users, owner, thread, _quiet)


def _deep_user(depth: int) -> tuple[Callable[[int], str], Callable[[int], str]]:
    """The owner and thread of each pair of the user ``depth`` turns deep (five threads)."""

    def owner(_pair: int) -> str:
        return f"deep-{depth}"

    def thread(pair: int) -> str:
        return f"thread-deep-{depth}-{pair % 5}"

    return owner, thread


def _quiet(line: str) -> None:
    """Progress of the small loads is left out."""


async def measure_recall(
    connection: AsyncConnection[Any],
    topics: Topics,
    rng: random.Random,
    queries: int,
    pick_user: Callable[[], str],
    report: Callable[[str, list[float]], LatencyReport],
    modes: tuple[str, ...] = MODES,
) -> list[LatencyReport]:
    """``queries`` recalls per mode (as many candidates as the worker ranks) for
    ``pick_user()``."""
    reports = []
    for mode in modes:

        async def recall(mode: Any = mode) -> object:
            word = rng.randrange(len(WORDS))
            text = f"what did I say about {WORDS[word]}?"
            return await recall_turns(
                connection,
                pick_user(),
                text,
                topics.question(word),
                exclude=(),
                limit=WORKER_RECALL,
                threshold=-1.0,
                mode=mode,
            )

        reports.append(report(mode, await timed(queries, recall)))
    return reports


async def ann_recall(
    connection: AsyncConnection[Any],
    topics: Topics,
    rng: random.Random,
    queries: int,
    depth: int,
    progress: Progress,
) -> None:
    """How many of the exact five nearest turns the index finds for the user ``depth`` deep
    (dense mode: the other side would mask a miss)."""
    found = 0
    for _ in range(queries):
        word = rng.randrange(len(WORDS))
        ask = partial(
            recall_turns,
            connection,
            f"deep-{depth}",
            f"what did I say about {WORDS[word]}?",
            topics.question(word),
            exclude=(),
            limit=5,
            threshold=-1.0,
            mode="dense",
        )
        near = {(turn.thread_id, turn.seq) for turn in await ask()}
        exact = {(turn.thread_id, turn.seq) for turn in await ask(depth=Depth(depth + 1))}
        found += len(near & exact)
    progress(
        f"one user, {depth} turns: the index finds {found / (5 * queries):.2f} of the exact five"
    )


async def history_depths(
    url: str, turns: int, users: int, queries: int, seed: int, progress: Progress
) -> list[LatencyReport]:
    """One user at each depth up to ``turns`` and the typical users, in one schema."""
    generator, rng = np.random.default_rng(seed), random.Random(seed)  # noqa: S311
    topics = Topics(generator)
    depths = depths_up_to(turns)
    reports: list[LatencyReport] = []
    async with scratch_schema(url, f"bench_depth_history_{turns}") as schema_url:
        await asyncio.to_thread(migrate, schema_url)
        async with await _connect(schema_url) as connection:
            await settle_space(connection, SyntheticEmbedder.model, DIMENSIONS)
            progress(f"loading users of {', '.join(map(str, depths))} turns among {users} users")
            began = time.perf_counter()
            async with indexes_built_after(connection, "conversation_turns", progress):
                await _typical_users(connection, topics, generator, users)
                for depth in depths:
                    owner, thread = _deep_user(depth)
                    await load_turns(connection, topics, generator, depth, owner, thread, progress)
                await _index_deep_users(connection, progress)
            await connection.execute("VACUUM ANALYZE conversation_turns")
            progress(f"loaded and indexed in {time.perf_counter() - began:.0f} s; recalling")
            for depth in depths:
                reports += await measure_recall(
                    connection,
                    topics,
                    rng,
                    queries,
                    partial(str, f"deep-{depth}"),
                    partial(latency_report, "history-depth", depth, users),
                )
                progress(f"one user, {depth} turns: " + p95s(reports[-3:]))
            await ann_recall(connection, topics, rng, queries, depths[-1], progress)
            reports += await measure_recall(
                connection,
                topics,
                rng,
                queries,
                lambda: f"user-{rng.randrange(users)}",
                partial(latency_report, "history", TYPICAL_TURNS, users),
            )
            progress(f"a typical user, {TYPICAL_TURNS} turns: " + p95s(reports[-3:]))
    return reports


async def shared_channel(
    url: str, turns: int, users: int, queries: int, seed: int, progress: Progress
) -> list[LatencyReport]:
    """What a shared channel of ``turns`` turns costs the worker before the model: its window
    and the requesting speaker's recall, for a random one of its speakers."""
    generator, rng = np.random.default_rng(seed), random.Random(seed)  # noqa: S311
    topics = Topics(generator)
    speakers = min(CHANNEL_SPEAKERS, max(1, turns // 200))
    async with scratch_schema(url, f"bench_depth_channel_{turns}") as schema_url:
        await asyncio.to_thread(migrate, schema_url)
        async with await _connect(schema_url) as connection:
            progress(f"loading a channel of {turns} turns, {speakers} speakers")
            async with indexes_built_after(connection, "conversation_turns", progress):
                await _typical_users(connection, topics, generator, users)
                await load_turns(
                    connection,
                    topics,
                    generator,
                    turns,
                    lambda pair: f"speaker-{pair % speakers}",
                    lambda _pair: CHANNEL,
                    progress,
                )
            await _copy_window(connection, CHANNEL)
            await connection.execute("VACUUM ANALYZE conversation_turns")
            now = START + timedelta(minutes=turns)

            async def window_and_recall() -> object:
                word = rng.randrange(len(WORDS))
                window = await read_window(connection, CHANNEL, WINDOW_PAIRS, now, SESSION_IDLE)
                return await recall_turns(
                    connection,
                    f"speaker-{rng.randrange(speakers)}",
                    f"what did I say about {WORDS[word]}?",
                    topics.question(word),
                    exclude={(turn.thread_id, turn.seq) for turn in window},
                    limit=WORKER_RECALL,
                    threshold=-1.0,
                )

            timings = await timed(queries, window_and_recall)
            report = latency_report("channel", turns, speakers, "hybrid", timings)
            progress(f"a channel of {turns} turns, window + recall p95 {report.p95_ms} ms")
    return [report]


async def _copy_window(connection: AsyncConnection[Any], channel: str) -> None:
    """The shared channel's window as the writer keeps it (llm_bot.memory.turns.window): a copy of
    its newest turns, which COPY into conversation_turns does not make."""
    await connection.execute(
        "INSERT INTO channel_turns (thread_id, seq, user_id, session_id, role, content,"
        " created_at, source_event, visibility)"
        " SELECT thread_id, seq, user_id, session_id, role, content, created_at, source_event,"
        " visibility FROM conversation_turns WHERE thread_id = %s ORDER BY seq DESC LIMIT %s",
        (channel, WINDOW_PAIRS * 2),
    )


async def run_depth_bench(
    database_url: str,
    turns: int,
    memories: int,
    users: int,
    queries: int,
    progress: Progress,
    seed: int = 13,
) -> list[LatencyReport]:
    """Recall at every depth up to ``turns``, a channel of ``turns`` turns, and memory search
    for one user with ``memories`` memories (0 skips either), among ``users`` typical users."""
    reports: list[LatencyReport] = []
    if turns:
        reports += await history_depths(database_url, turns, users, queries, seed, progress)
        reports += await shared_channel(database_url, turns, users, queries, seed, progress)
    if memories:
        reports += await memory_depth(database_url, memories, users, queries, seed, progress)
    return reports


async def memory_depth(
    url: str, memories: int, users: int, queries: int, seed: int, progress: Progress
) -> list[LatencyReport]:
    rng = random.Random(seed)  # noqa: S311 (synthetic data, reproducible on purpose)
    async with scratch_schema(url, f"bench_depth_memories_{memories}") as schema_url:
        await asyncio.to_thread(migrate, schema_url)
        store_context = MemoryStore.open(
            load_settings(DATABASE_URL=schema_url), SyntheticEmbedder(rng), role="setup"
        )
        async with store_context as store, store.connection() as connection:
            progress(f"loading {memories} memories of one user among {users} users")
            async with indexes_built_after(connection, "memories", progress):
                await load_memories(connection, TYPICAL_MEMORIES * users, users, rng, progress)
                await load_memories(connection, memories, 1, rng, progress, owner="deep")
            reports = await measure_search(
                connection,
                memories,
                users,
                MODES,
                queries,
                rng,
                pick_user=lambda: DEEP_USER,
                kind="memories-depth",
            )
        progress(f"one user, {memories} memories: " + p95s(reports))
    return reports
