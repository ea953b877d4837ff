"""Stand-in derived memories beside an evaluation corpus: what consolidation would write.

A file of derived items (JSONL, one per line: ``kind`` ``summary`` or ``fact``, ``user_id``,
``thread_id``, ``sources`` — corpus turn ids of that thread and user — ``text``, and for a fact
an optional ``key``) is written the way consolidation writes what a model derived
(:mod:`llm_bot.consolidation.derive`), so that ``llm-bot eval retrieval --derived`` measures
recall with them against recall without them on the same stored corpus:

- a summary is a ``conversation_turns`` row stored by consolidation's own write
  (:func:`llm_bot.consolidation.derive.insert_summary`) over the window its sources span (from
  the seq before the first source to the last source's), at the time of its last source turn,
  with the sources' visibility and an embedding from the store's embedder;
- a fact is a memory written by :func:`llm_bot.memory.store.put_memory` with consolidation's
  metadata (:func:`llm_bot.memory.derived.derived_metadata`), observed at its last
  source's time, under its ``key`` or where consolidation's key resolution puts it (a new key
  made from the item's place in the file, of a new key's length, so that memory search, which
  breaks ties by key, ranks the same way in every run of the same file). Items are
  written in the file's order, so a fact under the ``key`` of an earlier one replaces it as a
  correction that names the memory does: the earlier text becomes a version of the memory
  (:mod:`llm_bot.memory.versions`), citing its own sources.

No model runs here: what the items say is whatever the file says (hand-written, or the
extractive stand-ins of :mod:`llm_bot_tools.evaluation.standin`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from llm_bot.consolidation.jobs import Job
from llm_bot.memory.derived import derived_metadata
from llm_bot.memory.run_writes import Visibility
from llm_bot.memory.store import MemoryStore, put_memory
from llm_bot.memory.turns.consolidation import Summary, insert_summary
from llm_bot.memory.turns.reads import StoredTurn
from llm_bot.memory.validation import key_of
from llm_bot.text import storable
from llm_bot_tools.evaluation.context import stored_turns
from llm_bot_tools.evaluation.jsonl import read_jsonl
from llm_bot_tools.evaluation.retrieval import CorpusTurn

EMBED_BATCH = 64


@dataclass(frozen=True)
class DerivedItem:
    kind: Literal["summary", "fact"]
    user_id: str
    thread_id: str
    sources: tuple[str, ...]  # corpus turn ids
    text: str
    key: str | None = None


@dataclass(frozen=True)
class Loaded:
    """What was written: facts, and summaries (one over a window the file already summarised
    is skipped, as consolidation's statement skips it, and not counted)."""

    facts: int
    summaries: int


def load_derived(path: Path, corpus: Sequence[CorpusTurn]) -> list[DerivedItem]:
    """The file's items, each checked against ``corpus``; a bad line raises ``ValueError``
    naming it."""
    by_id = {turn.id: turn for turn in corpus}
    return read_jsonl(path, lambda row: _item(row, by_id))


def _item(row: dict[str, Any], by_id: dict[str, CorpusTurn]) -> DerivedItem:
    missing = [f for f in ("kind", "user_id", "thread_id", "sources", "text") if f not in row]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    kind, text, key = row["kind"], row["text"], row.get("key")
    if kind not in ("summary", "fact"):
        raise ValueError("kind must be summary or fact")
    if not isinstance(text, str) or not text.strip():
        raise ValueError("text must be a non-empty string")
    if key is not None and (kind != "fact" or not isinstance(key, str) or not key):
        raise ValueError("key is a fact's, a non-empty string")
    sources = row["sources"]
    if not isinstance(sources, list) or not sources:
        raise ValueError("sources must be a non-empty list of corpus turn ids")
    user_id, thread_id = str(row["user_id"]), str(row["thread_id"])
    for source in map(str, sources):
        turn = by_id.get(source)
        if turn is None:
            raise ValueError(f"source {source} is no corpus turn")
        if (turn.user_id, turn.thread_id) != (user_id, thread_id):
            raise ValueError(f"source {source} is not a turn of {user_id} in {thread_id}")
    return DerivedItem(kind, user_id, thread_id, tuple(map(str, sources)), storable(text), key)


async def write_derived(
    store: MemoryStore, items: Sequence[DerivedItem], ids: dict[tuple[str, int], str]
) -> Loaded:
    """Write ``items`` beside the corpus stored as ``ids`` maps it (the module's docstring)."""
    stored = await stored_turns(store, ids)
    spans = [sorted((stored[s] for s in item.sources), key=lambda s: s.seq) for item in items]
    vectors: list[list[float]] = []
    for start in range(0, len(items), EMBED_BATCH):
        batch = items[start : start + EMBED_BATCH]
        vectors += await store.embedder.embed([item.text for item in batch])
    # Keys are resolved before the writes, as consolidation resolves them outside its
    # transaction: one stand-in fact never replaces another of the same file.
    keys = [
        item.key or await _resolved(store, item, scope, place)
        for place, (item, scope) in enumerate(zip(items, map(_visibility, spans), strict=True), 1)
        if item.kind == "fact"
    ]
    facts, summaries = iter(keys), 0
    async with store.connection() as connection:
        for item, span, vector in zip(items, spans, vectors, strict=True):
            job = Job(item.thread_id, span[0].seq - 1, span[-1].seq)
            if item.kind == "fact":
                metadata = derived_metadata(
                    item.thread_id, job.window, (source.seq for source in span), span[-1].created_at
                )
                await put_memory(
                    connection,
                    item.user_id,
                    next(facts),
                    item.text,
                    metadata,
                    _visibility(span),
                    vector,
                    span[-1].created_at,
                )
                continue
            summary = Summary(
                item.thread_id,
                job.from_seq,
                job.to_seq,
                item.user_id,
                item.text,
                span[-1].created_at,
                job.key.source,
                vector,
                _visibility(span),
            )
            summaries += await insert_summary(connection, summary)
    return Loaded(len(keys), summaries)


async def _resolved(store: MemoryStore, item: DerivedItem, scope: Visibility, place: int) -> str:
    """Where consolidation's key resolution puts the file's item at ``place``; a new memory's
    key made from the place rather than at random."""
    key, effect = await store.for_user(item.user_id).resolve_key(item.text, None, scope)
    if effect != "created":
        return key
    return key_of(hashlib.blake2b(str(place).encode(), digest_size=8).digest())


def _visibility(sources: Sequence[StoredTurn]) -> Visibility:
    """Private when any source is (consolidation's rule for a window)."""
    return "dm" if any(source.visibility == "dm" for source in sources) else "public"
