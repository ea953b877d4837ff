"""The statements of thread history's tables, the one place their SQL is written:
``conversation_turns`` (each turn, its author's row), ``conversation_threads`` (each thread's
counter and session, its tenant's) and ``channel_turns`` (a shared channel's copy of its newest
turns, the channel's). The pair's append and the window (:mod:`llm_bot.memory.history`), recall
(:mod:`llm_bot.memory.recall`), retention (:mod:`llm_bot.lifecycle.retention`), the backfill of
recall's index (:mod:`llm_bot.lifecycle.turn_backfill`) and the re-embedding's fill
(:mod:`llm_bot.lifecycle.vector_slots`) run them; a change of the tables' columns, keys or
shard routing (docs/citus.md, "The shard key") is made here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any

from psycopg import AsyncConnection
from psycopg.rows import dict_row, tuple_row

from llm_bot.db.placements import tenant_of_thread
from llm_bot.db.turn_index import LIVE_COLUMN, in_space, near_distance
from llm_bot.db.vectors import vector_param
from llm_bot.events.identity import is_shared_thread
from llm_bot.memory.fusion import NEIGHBOUR_REACH, SUMMARY_EXPANSION

# One statement for the caller: migration 0019's ``append_pair`` (it says why a function). It
# appends the pair under the thread's tenant (:func:`thread_row`)
# unless the event's pair is there already (a batch rerun after a commit whose
# acknowledgement was lost). A concurrent write of the same event cannot get this far: its
# transaction stored the event's output first, under the claim's token
# (:mod:`llm_bot.db.processed_events`), and (user_id, source_event, role) is unique besides.
APPEND_PAIR = """
SELECT append_pair(%(tenant)s, %(thread_id)s, %(user_id)s, %(at)s, %(idle)s, %(source_event)s,
                   %(user_text)s, %(assistant_text)s, %(user_vector)s::vector,
                   %(assistant_vector)s::vector, %(visibility)s, %(indexed)s, %(window_turns)s)
"""

# What a deletion of turns took (:mod:`llm_bot.lifecycle.provenance`): erasure's and
# retention's name the turns they deleted, so that what was derived from them goes with them.
TAKEN = " RETURNING user_id, thread_id, seq"

# The newest turns of the thread's current session (newest first), unless it idled, from the
# tenant's shard: a DM's from its user's turns, a shared channel's from its copy of its newest
# turns (channel_turns). A query a caller may also compose with others into one statement
# (context assembly does): :func:`llm_bot.memory.history.window_sql` picks the thread's.
_WINDOW_SQL = """
SELECT t.thread_id, t.seq, t.user_id, t.session_id, t.role, t.content, t.created_at
  FROM conversation_threads th JOIN {table} t
    ON {same_rows} AND t.session_id = th.session_id
 WHERE th.tenant = %(tenant)s AND th.thread_id = %(thread_id)s AND th.last_turn_at >= %(since)s
 ORDER BY t.seq DESC LIMIT %(turns)s
"""
DM_WINDOW_SQL = _WINDOW_SQL.format(
    table="conversation_turns",
    same_rows="t.user_id = th.tenant AND t.thread_id = th.thread_id",
)
CHANNEL_WINDOW_SQL = _WINDOW_SQL.format(table="channel_turns", same_rows="t.thread_id = th.tenant")


# Recall's statement (:mod:`llm_bot.memory.recall` says how it ranks). BM25's statistics come
# from the user's this many most recent turns.
STATS_TURNS = 1000
# A user's nearest turns come from an exact scan of their vectors or from the HNSW index over
# deep users' turns (llm_bot.db.turn_index), whichever reads less. The scan reads the user's ``d``
# turns; the index walks about ``pool / share`` entries to find ``pool`` of theirs, ``share``
# being ``d / N`` of the table's ``N`` rows, each entry ~ANN_ROW_COST times a scanned row
# (fitted on the depth bench: 80 ms for 5,000 entries, 28 ms to scan 10,000 turns). So the
# index from ``d * d >= ANN_ROW_COST * pool * N`` (N from the table's statistics), never below
# DEEP_FROM turns: ~20k turns in a table of 1.2M, ~60k in one of 10M. The index holds only deep
# users' turns, fewer than N, so this overstates its walk: the depth errs towards the scan.
DEEP_FROM = 5000
ANN_ROW_COST = 8
BM25_K1 = 1.2  # the textbook saturation and length normalisation, not fitted to any data set
BM25_B = 0.75


def _deep_from_sql(rows: str, source: str) -> str:
    """The depth from which a user is deep, one row: ``%(deep_from)s`` when given (a test),
    else from ``rows``, the size of the table of turns, and ``%(pool)s`` (ANN_ROW_COST)."""
    return f"""
    SELECT coalesce(%(deep_from)s::bigint, greatest({DEEP_FROM}, ceil(sqrt(
        {ANN_ROW_COST} * %(pool)s * greatest({rows}, 0)))))::bigint AS turns
    FROM {source}
"""


# For every user (``llm-bot maintain``): the table's size from the catalog.
DEEP_FROM_SQL = _deep_from_sql("reltuples", "pg_class WHERE oid = 'conversation_turns'::regclass")
# For one user (recall): the size of the table holding the user's turns, read through one of
# them (none: no depth). On Citus that is the user's shard, whose own index recall reads, and
# the statement stays one Citus sends whole to that shard: one that also read the catalog would
# be planned in pieces, which Citus 14 fails on for recall's ("invalid attnum").
_USERS_DEEP_FROM = _deep_from_sql(
    "relation_rows(t.tableoid)", "conversation_turns t WHERE t.user_id = %(user)s LIMIT 1"
)


def _visible(visibility: str) -> str:
    """Turns the caller may see: all of them, or only those learned in public channels."""
    return f"(%(include_private)s OR {visibility} = 'public')"


# BM25 of the turn ``t`` for the query's weighted terms (a term's frequency is its positions).
_BM25 = f"""(
    SELECT sum(weights.idf * tf.n * {BM25_K1 + 1} / (tf.n + {BM25_K1} * (
        1 - {BM25_B} + {BM25_B} * length(t.search) / (SELECT avgdl FROM stats))))
    FROM unnest(t.search) AS word
    JOIN weights ON weights.lexeme = word.lexeme
    CROSS JOIN LATERAL (SELECT coalesce(array_length(word.positions, 1), 1) AS n) tf
)"""

# Each side keeps its best ``pool`` by a top-N sort (a heap of ``pool`` rows): numbering or
# materializing every row of a user would spill to disk at 100k turns.


@cache
def recall_sql(dimensions: int) -> str:
    """The statement for query vectors of ``dimensions`` (the index's size is part of it)."""
    return f"""
WITH terms AS (
    SELECT DISTINCT lexeme
    FROM unnest(tsvector_to_array(to_tsvector('english', %(text)s))) AS lexeme
    WHERE %(use_lexical)s
),
sample AS MATERIALIZED (
    SELECT search FROM conversation_turns
    WHERE user_id = %(user)s AND {_visible("visibility")} AND EXISTS (SELECT FROM terms)
    ORDER BY created_at DESC
    LIMIT {STATS_TURNS}
),
stats AS (SELECT count(*) AS n, greatest(avg(length(search)), 1) AS avgdl FROM sample),
weights AS (
    SELECT terms.lexeme, stats.n, held.df,
           ln(1 + (stats.n - held.df + 0.5) / (held.df + 0.5)) AS idf
    FROM terms CROSS JOIN stats
    CROSS JOIN LATERAL (
        SELECT count(*) AS df FROM sample
        WHERE sample.search @@ quote_literal(terms.lexeme)::tsquery
    ) held
),
-- The words that find candidates: all of them while the sample is the whole history; beyond,
-- only those held by at most half of it (a turn that shares nothing else with the query is
-- no evidence, and ranking all of a long history for one common word costs ~1 s at 100k).
query AS (
    SELECT to_tsquery('simple', coalesce(string_agg(quote_literal(lexeme), ' | '), '')) AS terms
    FROM weights
    WHERE n < {STATS_TURNS} OR df * 2 <= n
),
lexical_top AS (
    SELECT t.thread_id, t.seq
    FROM (
        SELECT thread_id, seq, search FROM conversation_turns
        WHERE user_id = %(user)s AND %(use_lexical)s AND {_visible("visibility")}
        ORDER BY created_at DESC
        LIMIT %(lexical_window)s
    ) t
    WHERE t.search @@ (SELECT terms FROM query)
    ORDER BY {_BM25} DESC, t.thread_id, t.seq
    LIMIT %(pool)s
),
-- The user's depth, counted no further than the depth from which the index reads less (an
-- index-only scan; see ANN_ROW_COST), picks one of the two dense sides below. The choice is a
-- LIMIT of 0 rather than a filter: a Limit node with nothing to return never starts its input,
-- where a filter was placed under a parallel sort whose workers started anyway (~9 ms).
deep_from AS ({_USERS_DEEP_FROM}),
depth AS (
    SELECT count(*) >= (SELECT turns FROM deep_from) AS deep
    FROM (
        SELECT FROM conversation_turns WHERE user_id = %(user)s
        LIMIT (SELECT turns FROM deep_from)
    ) mine
),
dense_exact AS (
    SELECT thread_id, seq FROM conversation_turns
    WHERE user_id = %(user)s AND embedding IS NOT NULL AND %(use_dense)s
      AND {_visible("visibility")}
    ORDER BY embedding <=> %(vector)s::vector, thread_id, seq
    LIMIT CASE WHEN (SELECT deep FROM depth) THEN 0 ELSE %(pool)s END
),
-- The index returns rows roughly in order of distance (pgvector's relaxed_order iterative
-- scan); the exact similarity of each is computed below.
dense_near AS MATERIALIZED (
    SELECT thread_id, seq FROM conversation_turns
    WHERE user_id = %(user)s AND {in_space(LIVE_COLUMN, dimensions)} AND %(use_dense)s
      AND {_visible("visibility")}
    ORDER BY {near_distance(LIVE_COLUMN, dimensions)}
    LIMIT CASE WHEN (SELECT deep FROM depth) THEN %(pool)s ELSE 0 END
),
-- A deep user's turns the index does not hold yet, exactly (none once maintain marked them).
dense_unindexed AS (
    SELECT thread_id, seq FROM conversation_turns
    WHERE user_id = %(user)s AND NOT indexed AND embedding IS NOT NULL AND %(use_dense)s
      AND {_visible("visibility")}
    ORDER BY embedding <=> %(vector)s::vector, thread_id, seq
    LIMIT CASE WHEN (SELECT deep FROM depth) THEN %(pool)s ELSE 0 END
),
hits AS (
    SELECT thread_id, seq FROM dense_exact UNION SELECT thread_id, seq FROM dense_near
    UNION SELECT thread_id, seq FROM dense_unindexed UNION SELECT thread_id, seq FROM lexical_top
),
-- A session's summary (seq < 0: minus the last seq it covers, its pair_index the seq before the
-- first) stands for the turns it covers: the {SUMMARY_EXPANSION} of them nearest the question
-- come with it, found or not by either side, each a primary-key range of at most a session.
covered AS (
    SELECT c.thread_id, c.seq
    FROM hits
    CROSS JOIN LATERAL (
        SELECT pair_index AS after_seq FROM conversation_turns
        WHERE user_id = %(user)s AND thread_id = hits.thread_id AND seq = hits.seq
        LIMIT 1
    ) summary
    CROSS JOIN LATERAL (
        SELECT thread_id, seq FROM conversation_turns
        WHERE user_id = %(user)s AND thread_id = hits.thread_id
          AND seq > summary.after_seq AND seq <= -hits.seq AND embedding IS NOT NULL
          AND {_visible("visibility")}
        ORDER BY embedding <=> %(vector)s::vector, seq
        LIMIT {SUMMARY_EXPANSION}
    ) c
    WHERE hits.seq < 0
),
around AS (
    SELECT hit.thread_id, hit.seq + step AS seq
    FROM hits hit, generate_series(-{NEIGHBOUR_REACH}, {NEIGHBOUR_REACH}) AS step
    WHERE hit.seq > 0
    UNION SELECT thread_id, seq FROM hits
    UNION SELECT thread_id, seq FROM covered
)
-- A primary-key lookup per candidate (LIMIT 1 keeps the planner from reading the user's whole
-- history by its index instead, which a generic plan of this statement chose). A neighbour in
-- a shared channel may be another speaker's turn: not the user's, so not found.
SELECT t.thread_id, t.seq, t.session_id, t.pair_index, t.role, t.content, t.created_at,
       1 - (t.embedding <=> %(vector)s::vector) AS similarity,
       coalesce({_BM25}, 0) AS keyword_score, (SELECT deep FROM depth) AS deep
FROM around
CROSS JOIN LATERAL (
    SELECT * FROM conversation_turns
    WHERE user_id = %(user)s AND thread_id = around.thread_id AND seq = around.seq
    LIMIT 1
) t
WHERE t.embedding IS NOT NULL AND {_visible("t.visibility")}
"""


# Retention's (:mod:`llm_bot.lifecycle.retention`), each one batch, naming the turns it took (as
# :data:`TAKEN`): turns past the history's age.
EXPIRED_TURNS = """
DELETE FROM conversation_turns t USING (
    SELECT user_id, thread_id, seq FROM conversation_turns WHERE created_at < %(cutoff)s
     LIMIT %(batch)s) old
 WHERE t.user_id = old.user_id AND t.thread_id = old.thread_id AND t.seq = old.seq
RETURNING t.user_id, t.thread_id, t.seq
"""

# The copies of a shared channel's newest turns (its window) expire with the turns.
EXPIRED_CHANNEL_TURNS = """
DELETE FROM channel_turns t USING (
    SELECT thread_id, seq FROM channel_turns WHERE created_at < %(cutoff)s
     LIMIT %(batch)s) old
 WHERE t.thread_id = old.thread_id AND t.seq = old.seq
"""

# seq is gap-free per thread, so the newest N turns are those above last_seq - N. A shared
# channel's row and its turns are on different shards (the channel's, the authors'), which
# Citus joins only through a result it computes first: the threads over the cap. A session's
# summary (seq minus the last seq it covers) goes with that last turn.
TURNS_BEYOND_CAP = """
WITH th AS (SELECT thread_id, last_seq - %(cap)s AS last_dropped FROM conversation_threads
             WHERE last_seq > %(cap)s)
DELETE FROM conversation_turns t USING (
    SELECT u.user_id, u.thread_id, u.seq FROM th
      JOIN conversation_turns u ON u.thread_id = th.thread_id
       AND u.seq BETWEEN -th.last_dropped AND th.last_dropped
     LIMIT %(batch)s) old
 WHERE t.user_id = old.user_id AND t.thread_id = old.thread_id AND t.seq = old.seq
RETURNING t.user_id, t.thread_id, t.seq
"""

# A thread row whose turns are all gone; a new message starts it again. Every turn of a thread
# idle since before the cutoff went with the expired turns above, so the checks only keep a row
# a pair is being written to: a DM's turns are its user's, a shared channel's newest are in its
# window's copy. A pair written since the batch was picked moved the row's time: checked again.
EMPTY_THREADS = """
DELETE FROM conversation_threads th USING (
    SELECT tenant, thread_id FROM conversation_threads c
     WHERE c.last_turn_at < %(cutoff)s
       AND NOT EXISTS (SELECT 1 FROM conversation_turns u
                        WHERE u.user_id = c.tenant AND u.thread_id = c.thread_id)
       AND NOT EXISTS (SELECT 1 FROM channel_turns w WHERE w.thread_id = c.tenant)
     LIMIT %(batch)s) old
 WHERE th.tenant = old.tenant AND th.thread_id = old.thread_id
   AND th.last_turn_at < %(cutoff)s
"""

# The backfill of recall's index (:mod:`llm_bot.lifecycle.turn_backfill`): the users with
# unmarked turns (read from the partial index on them) who are deep, each counted no further
# than the depth.
DEEP_USERS_UNMARKED = f"""
WITH deep_from AS ({DEEP_FROM_SQL})
SELECT u.user_id FROM (SELECT DISTINCT user_id FROM conversation_turns WHERE NOT indexed) u
 WHERE (SELECT count(*) FROM (
            SELECT FROM conversation_turns t WHERE t.user_id = u.user_id
             LIMIT (SELECT turns FROM deep_from)) mine) >= (SELECT turns FROM deep_from)
 ORDER BY u.user_id
"""

# One user's statement, so Citus runs it on that user's shard alone (the row lock is only
# possible there); the batch is read once (materialized), else a plan that reads it again per
# row locks, and marks, a further batch each time.
MARK_INDEXED = """
WITH b AS MATERIALIZED (
    SELECT thread_id, seq FROM conversation_turns
     WHERE user_id = %(user)s AND NOT indexed
     LIMIT %(batch)s FOR UPDATE SKIP LOCKED)
UPDATE conversation_turns t SET indexed = true FROM b
 WHERE t.user_id = %(user)s AND t.thread_id = b.thread_id AND t.seq = b.seq
"""


# The re-embedding's (:mod:`llm_bot.lifecycle.vector_slots`) over the turns without a vector in
# the slot ``{c}``: their count, a page of them in key order after a key (user, thread, seq),
# and the write of one's vector (a turn never changes).
MISSING_VECTORS = (
    "SELECT count(*) FROM conversation_turns WHERE {c} IS NULL",
    "SELECT user_id, thread_id, seq, content FROM conversation_turns"
    " WHERE {c} IS NULL AND (user_id, thread_id, seq) > (%s, %s, %s)"
    " ORDER BY user_id, thread_id, seq LIMIT %s",
    "UPDATE conversation_turns SET {c} = %s::vector"
    " WHERE user_id = %s AND thread_id = %s AND seq = %s AND {c} IS NULL",
)

# Consolidation's (:mod:`llm_bot.consolidation`). The sweep: threads whose turns after
# ``consolidated_seq`` ended a session (silent since ``idle_before``) or reached the turn cap,
# oldest silence first, a bounded batch read through the partial index on them (migration
# 0022). A job's window is ``(consolidated_seq, last_seq]``, at most ``cap`` turns.
_CLOSED_WINDOWS = """
SELECT thread_id, consolidated_seq, least(last_seq, consolidated_seq + %(cap)s)
  FROM conversation_threads
 WHERE consolidated_seq < last_seq
   AND (last_turn_at < %(idle_before)s OR last_seq - consolidated_seq >= %(cap)s)
 ORDER BY last_turn_at LIMIT %(batch)s
"""
# The window handed to a job: moved on only from where the sweep read it, so two sweeps that
# read the same row move it once.
_MARK_CONSOLIDATED = """
UPDATE conversation_threads SET consolidated_seq = %(to_seq)s
 WHERE tenant = %(tenant)s AND thread_id = %(thread_id)s AND consolidated_seq = %(from_seq)s
"""
# A job's turns, every speaker's (a DM's are its user's, read from that user's shard alone).
_WINDOW_TURNS = """
SELECT user_id, seq, role, content, created_at, visibility FROM conversation_turns
 WHERE {author} thread_id = %(thread_id)s AND seq > %(from_seq)s AND seq <= %(to_seq)s
 ORDER BY seq
"""
_DM_WINDOW_TURNS = _WINDOW_TURNS.format(author="user_id = %(tenant)s AND")  # thread_row's
_CHANNEL_WINDOW_TURNS = _WINDOW_TURNS.format(author="")
# The author's turns of the window that still exist, locked until the job's writes commit: an
# erasure deletes turns before the memories (:mod:`llm_bot.lifecycle.erasure`), so either it
# waits for the job and then deletes what the job wrote, or the job waits for it and finds
# nothing to derive from.
_LOCK_SOURCES = """
SELECT seq FROM conversation_turns
 WHERE user_id = %(user)s AND thread_id = %(thread_id)s AND seq > %(from_seq)s
   AND seq <= %(to_seq)s AND role <> 'summary'
 FOR SHARE
"""
# A session's summary as a recall key of the author's (migration 0022 says why a turn's row).
_INSERT_SUMMARY = """
INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index, role, content,
                                created_at, source_event, embedding, visibility, indexed)
VALUES (%(thread_id)s, -%(to_seq)s, %(user)s, 0, %(from_seq)s, 'summary', %(content)s, %(at)s,
        %(source)s, %(vector)s::vector, %(visibility)s, false)
ON CONFLICT DO NOTHING
"""


@dataclass(frozen=True)
class Taken:
    """Turns a deletion took (:data:`TAKEN`): their users, threads and seqs, side by side, as
    the statements of what was derived from them read them."""

    users: list[str]
    threads: list[str]
    seqs: list[int]

    @property
    def params(self) -> dict[str, list[str] | list[int]]:
        return {"users": self.users, "threads": self.threads, "seqs": self.seqs}


# The session summaries, in any speaker's rows, whose window covered one of the taken turns
# (a summary's seq is minus the last seq it covers, its pair_index the seq before the first):
# a shared window's summary holds every speaker's words, so it goes when any of them goes. The
# turns are a result of their own (materialized), so Citus joins every shard's summaries with
# it, through the summaries' index by thread (migration 0023).
_SUMMARIES_OVER = """
WITH taken AS MATERIALIZED (
    SELECT DISTINCT thread_id, seq FROM unnest(%(threads)s::text[], %(seqs)s::bigint[])
        AS taken(thread_id, seq)),
covering AS MATERIALIZED (
    SELECT DISTINCT s.user_id, s.thread_id, s.seq FROM taken
      JOIN conversation_turns s ON s.thread_id = taken.thread_id AND s.role = 'summary'
       AND s.seq <= -taken.seq AND s.pair_index < taken.seq)
DELETE FROM conversation_turns t USING covering
 WHERE t.user_id = covering.user_id AND t.thread_id = covering.thread_id
   AND t.seq = covering.seq
"""

# Erasure's and export's rows (:mod:`llm_bot.lifecycle.erasure`): a user's turns, their copies in
# shared channels' windows and the rows of their DM threads (a shared channel's row is the
# room's, and its id may read as a user's id, so it is left out by that); a thread's turns,
# every speaker's, its window's copies and its row.
TURNS_OF_USER = "FROM conversation_turns WHERE user_id = %(user)s"
CHANNEL_TURNS_OF_USER = "FROM channel_turns WHERE user_id = %(user)s"

# An explanation's turns by id (:mod:`llm_bot.explanation.reader`), whoever spoke them: a shared
# channel's window cites other speakers' turns. An operator's read, so every shard is asked.
TURNS_BY_ID = """
SELECT t.thread_id, t.seq, t.pair_index, t.content FROM conversation_turns t
  JOIN unnest(%(threads)s::text[], %(seqs)s::bigint[]) AS id(thread_id, seq)
    ON t.thread_id = id.thread_id AND t.seq = id.seq
"""
THREADS_OF_USER = "FROM conversation_threads WHERE tenant = %(user)s AND thread_id <> tenant"
TURNS_OF_THREAD = "FROM conversation_turns WHERE thread_id = %(thread)s"
CHANNEL_TURNS_OF_THREAD = "FROM channel_turns WHERE thread_id = %(thread)s"
THREAD_ROW = "FROM conversation_threads WHERE tenant = %(tenant)s AND thread_id = %(thread_id)s"

# The operator console (:mod:`llm_bot.console`): a user's newest turns, from every thread, and
# the users whose id starts with a prefix (the ids in [start, end), read in the order of the
# ``(user_id, created_at)`` index, so a search reads the matching users' turns and stops).
RECENT_TURNS_OF_USER = (
    f"SELECT thread_id, seq, role, content, visibility, created_at {TURNS_OF_USER}"
    " ORDER BY created_at DESC, seq DESC LIMIT %(limit)s"
)
USERS_BETWEEN = (
    "SELECT user_id FROM conversation_turns WHERE user_id >= %(start)s AND user_id < %(end)s"
    " GROUP BY user_id ORDER BY user_id LIMIT %(limit)s"
)

# Every turn of every user but session summaries (``llm-bot eval``'s scratch schema: the corpus
# read back as it was stored, to map each stored turn to its corpus id).
STORED_TURNS = (
    "SELECT thread_id, seq, user_id, role, content, created_at, visibility, source_event"
    " FROM conversation_turns WHERE role <> 'summary'"
)


def thread_row(thread_id: str) -> dict[str, str]:
    """The parameters that name a thread's row in these statements: its id and its tenant (a
    DM's user, a shared channel's own id), which routes the statement to one shard."""
    return {"tenant": tenant_of_thread(thread_id), "thread_id": thread_id}


# Consolidation's statements, run here for it (:mod:`llm_bot.consolidation`): its sweep reads
# and marks closed windows, its job reads a window's turns, locks each speaker's sources and
# writes the window's summary.
async def closed_windows(
    connection: AsyncConnection[Any], *, idle_before: datetime, cap: int, batch: int
) -> list[tuple[str, int, int]]:
    """Up to ``batch`` windows ``(thread, after, last]`` whose session closed."""
    params = {"idle_before": idle_before, "cap": cap, "batch": batch}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_CLOSED_WINDOWS, params)
        return [(str(t), int(after), int(last)) for t, after, last in await cursor.fetchall()]


async def mark_consolidated(
    connection: AsyncConnection[Any], thread_id: str, from_seq: int, to_seq: int
) -> None:
    """The thread's window handed to a job: moved on from where the sweep read it."""
    params = {**thread_row(thread_id), "from_seq": from_seq, "to_seq": to_seq}
    await connection.execute(_MARK_CONSOLIDATED, params)


async def window_turns(
    connection: AsyncConnection[Any], thread_id: str, from_seq: int, to_seq: int
) -> list[dict[str, Any]]:
    """The turns ``(from_seq, to_seq]`` of the thread, every speaker's, oldest first, as
    columns by name (``user_id, seq, role, content, created_at, visibility``); summaries too."""
    sql = _CHANNEL_WINDOW_TURNS if is_shared_thread(thread_id) else _DM_WINDOW_TURNS
    params = {**thread_row(thread_id), "from_seq": from_seq, "to_seq": to_seq}
    async with connection.cursor(row_factory=dict_row) as cursor:
        await cursor.execute(sql, params)
        return await cursor.fetchall()


async def lock_sources(
    connection: AsyncConnection[Any], user_id: str, thread_id: str, from_seq: int, to_seq: int
) -> set[int]:
    """The seqs of ``user_id``'s turns of the window still there, locked until the caller's
    transaction ends (:data:`_LOCK_SOURCES`)."""
    params = {"user": user_id, "thread_id": thread_id, "from_seq": from_seq, "to_seq": to_seq}
    async with connection.cursor(row_factory=tuple_row) as cursor:
        await cursor.execute(_LOCK_SOURCES, params)
        return {int(seq) for (seq,) in await cursor.fetchall()}


@dataclass(frozen=True)
class Summary:
    """A window's summary as one speaker's recall key: the thread's turns ``(from_seq,
    to_seq]``, the job that wrote it (``source``), when (its newest turn's time) and where it
    may be shown."""

    thread_id: str
    from_seq: int
    to_seq: int
    user_id: str
    content: str
    at: datetime
    source: str
    vector: list[float] | None
    visibility: str


async def insert_summary(connection: AsyncConnection[Any], summary: Summary) -> bool:
    """``summary`` stored; False when its window already has one for that user."""
    params = {
        "thread_id": summary.thread_id,
        "from_seq": summary.from_seq,
        "to_seq": summary.to_seq,
        "user": summary.user_id,
        "content": summary.content,
        "at": summary.at,
        "source": summary.source,
        "vector": vector_param(summary.vector),
        "visibility": summary.visibility,
    }
    written = await connection.execute(_INSERT_SUMMARY, params)
    return written.rowcount == 1


async def delete_summaries_over(connection: AsyncConnection[Any], taken: Taken) -> int:
    """The summaries, in any speaker's rows, whose window covered one of ``taken``; rows deleted."""
    cursor = await connection.execute(_SUMMARIES_OVER, taken.params)
    return cursor.rowcount
