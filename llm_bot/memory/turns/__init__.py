"""The statements of thread history's tables, the one place their SQL is written:
``conversation_turns`` (each turn, its author's row), ``conversation_threads`` (each thread's
counter and session, its tenant's) and ``channel_turns`` (a shared channel's copy of its newest
turns, the channel's). A change of the tables' columns, keys or shard routing (docs/citus.md,
"The shard key") is made in this package, whose modules are split by who runs them: the pair's
append and the window (:mod:`.window`, answering's hot path), recall (:mod:`.recall`),
consolidation (:mod:`.consolidation`), retention, erasure and the index's upkeep
(:mod:`.upkeep`), and the operator's and the evaluation's reads (:mod:`.reads`). What names a
thread's row and what a deletion took are shared by all of them (:mod:`.rows`).
"""
