"""The one way to read an explanation: :func:`explanation_for` rebuilds the view
(:mod:`llm_bot.explanation.view`) of one answered event from its stored record
(:mod:`llm_bot.explanation.record`, ids, ranks, scores and hashes) and the words read now from
the rows it cites, each through its table's owner: memories and their versions, turns, notes,
the event's stored output (decoded as every event is read, :func:`llm_bot.events.codec.decode`),
its tool ledger. ``llm-bot explain`` and the operator console call it, and only they import it
(``tests/unit/test_layers.py``): the answering path builds the record and loads none of these
reads.

A cited row that is gone (its speaker erased, its memory forgotten, retention past it) is shown
as erased; one whose text is no longer the text that was sent (the hash differs) as changed,
without the text it holds now.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from psycopg import AsyncConnection

from llm_bot.db.processed_events.records import output_of_event
from llm_bot.events import codec
from llm_bot.events.inbound import EventKey
from llm_bot.events.limits import InvalidEvent
from llm_bot.explanation import table
from llm_bot.explanation.record import (
    MemorySource,
    Record,
    Scores,
    Section,
    TurnSource,
    text_hash,
)
from llm_bot.explanation.view import Explanation, Message, Part, State, ToolCallShown
from llm_bot.memory.derived import derived_from, job_id, summary_window
from llm_bot.memory.memories import CurrentText, current_of_keys
from llm_bot.memory.notes_store import stored_notes
from llm_bot.memory.turns.reads import turns_by_id
from llm_bot.memory.versions import Version, versions_of_keys
from llm_bot.platform_tools.ledger import call_states


async def explanation_for(
    connection: AsyncConnection[Any],
    correlation_id: str,
    *,
    user_id: str | None = None,
    agent: str = "llm-bot",
) -> Explanation | None:
    """The explanation of the event ``correlation_id`` (of ``user_id``, when given), with the
    words read now from the rows it cites; None when none is stored. ``agent`` names the notes
    document (``LLM_BOT_AGENT_NAME``)."""
    row = await table.latest_of_event(connection, correlation_id, user_id)
    if row is None:
        return None
    record = Record.from_json(row.record)
    user = row.user_id
    event = EventKey(user, correlation_id, record.step_key)
    words, answer = await _asked_and_answered(connection, event)
    context = record.context
    memory_parts = await _memory_parts(connection, user, context.memories)
    cited_turns = [*context.recalled, *context.window]
    turn_texts = await _turn_texts(connection, cited_turns, row.created_at)
    notes = await _notes_part(connection, user, agent, context.notes_hash)
    system = [
        _section_part("system", section) for section in record.sections if section.origin in _SYSTEM
    ]
    user_parts = [
        _input_part(section, words) if section.name == "Input" else _section_part("user", section)
        for section in record.sections
        if section.origin not in _SYSTEM
    ]
    parts = (
        *system,
        *([notes] if notes is not None else []),
        *memory_parts,
        *(_turn_part(turn, turn_texts, "Recalled message") for turn in context.recalled),
        *(_turn_part(turn, turn_texts, "Window") for turn in context.window),
        *user_parts,
    )
    return Explanation(
        correlation_id=correlation_id,
        user_id=user,
        thread_id=row.thread_id,
        at=row.created_at,
        decision=row.record.get("decision"),
        parts=tuple(parts),
        left_out=dict(context.left_out),
        failed=context.failed,
        answer=answer,
        tools=await _tools(connection, event, record),
    )


# Sections of the system message; every other section is the user message's.
_SYSTEM = ("config", "personality")


def _section_part(message: Message, section: Section) -> Part:
    cited = f": {', '.join(section.refs)}" if section.refs else ""
    sent = "empty" if section.hash is None else f"text hash {section.hash}"
    return Part(message, section.name, f"{section.origin}{cited}", f"always sent ({sent})")


def _input_part(section: Section, words: str | None) -> Part:
    """The user's words from the event's stored output (None: the output is gone; empty: the
    event had no words, so the task's text stood in for them)."""
    if words is None:
        return Part("user", "Input", "the event's message", "the user's words", "erased")
    if not words.strip():
        return Part("user", "Input", "the event's task", "the event has no words of a user")
    words = words.strip()  # as the prompt took them
    state: State = "shown" if text_hash(words) == section.hash else "changed"
    return Part(
        "user",
        "Input",
        "the event's message",
        "the user's words",
        state,
        words if state == "shown" else None,
    )


async def _asked_and_answered(
    connection: AsyncConnection[Any], event: EventKey
) -> tuple[str | None, str | None]:
    """The words asked and the answer given, from the event's stored output (None, None once
    it is gone, erased or past retention, or when it cannot be decoded)."""
    output = await output_of_event(connection, event)
    if output is None:
        return None, None
    try:
        published = codec.decode(output)
    except InvalidEvent:
        return None, None
    words = published.message.text if published.message is not None else None
    answer = published.candidates[-1].text if published.candidates else None
    return words or "", answer


async def _memory_parts(
    connection: AsyncConnection[Any], user: str, cited: Sequence[MemorySource]
) -> list[Part]:
    """Each memory with the version that was current when it was sent: the memory itself when
    its text was written at that time, else the earlier text written then."""
    if not cited:
        return []
    keys = sorted({memory.key for memory in cited})
    current = await current_of_keys(connection, user, keys)
    earlier = await versions_of_keys(connection, user, keys)
    parts = []
    for memory in cited:
        olds = earlier.get(memory.key, [])
        now = current.get(memory.key)
        sent: CurrentText | Version | None = None
        version: int | None = None
        if now is not None and now.updated_at == memory.written_at:
            sent, version = now, len(olds) + 1
        else:
            for old in olds:
                if old.valid_from == memory.written_at:
                    sent, version = old, old.version
        label = f"Memory {memory.key}" + (f" (version {version})" if version else "")
        parts.append(
            Part(
                "memory",
                label,
                _memory_origin(memory.written_at, sent.metadata if sent else {}),
                _why(memory.scores),
                *_shown(sent.content if sent else None, memory.hash),
            )
        )
    return parts


def _memory_origin(written_at: datetime, metadata: Mapping[str, Any]) -> str:
    """Where a memory came from: the consolidation job that derived it from its source turns
    (metadata only consolidation writes, :func:`llm_bot.memory.derived.derived_from`),
    else the memories table (a model's tool call, an import)."""
    written = f"written {written_at.isoformat()}"
    origin = derived_from(metadata)
    if origin is None:
        return f"memories, {written}"
    cited = ", ".join(f"{origin.thread_id}#{seq}" for seq in origin.source_seqs)
    return f"consolidation job {origin.job} from turns {cited}, {written}"


async def _turn_texts(
    connection: AsyncConnection[Any], cited: Sequence[TurnSource], answered_at: datetime
) -> dict[tuple[str, int], tuple[int, str]]:
    """Each cited turn's pair index (a summary's: the seq before the first turn it covers) and
    words, by id; a turn written after the answer is none it was given, so it is left out (shown
    as erased). Its id is reused: the cited turn's thread was forgotten (or expired) with its
    row, and the thread begun again numbers its turns from 1."""
    if not cited:
        return {}
    found = await turns_by_id(connection, [(turn.thread_id, turn.seq) for turn in cited])
    return {
        turn_id: (pair_index, content)
        for turn_id, (pair_index, content, written_at) in found.items()
        if written_at <= answered_at
    }


def _turn_part(
    turn: TurnSource, texts: Mapping[tuple[str, int], tuple[int, str]], kind: str
) -> Part:
    """A recalled or window turn; a recalled session summary (seq < 0, minus the last turn it
    covers) names the consolidation job that wrote it and the turns it covers; a recalled turn a
    correction moved names the turns it traded places with (its scores alone do not say why)."""
    why = "the thread's newest turns" if turn.scores is None else _why(turn.scores)
    why += "".join(
        f"; corrects {thread}#{seq}, ranked in its place" for thread, seq in turn.replaces
    )
    why += "".join(
        f"; corrected by {thread}#{seq}, ranked no higher" for thread, seq in turn.replaced_by
    )
    found = texts.get((turn.thread_id, turn.seq))
    text = found[1] if found else None
    label, origin = f"{kind} {turn.thread_id}#{turn.seq}", "conversation_turns"
    if turn.seq < 0:
        label = f"Session summary {turn.thread_id} up to #{-turn.seq}"
        if found is not None:
            after, last = summary_window(turn.seq, found[0])
            origin = (
                f"consolidation job {job_id(turn.thread_id, f'{after}-{last}')}, summarising"
                f" turns {turn.thread_id}#{after + 1} to #{last}"
            )
    return Part("memory", label, origin, why, "erased" if text is None else "shown", text)


async def _notes_part(
    connection: AsyncConnection[Any], user: str, agent: str, sent: str | None
) -> Part | None:
    if sent is None:
        return None
    notes = await stored_notes(connection, user, agent)
    text = None if notes is None else notes.content
    return Part("memory", "Notes", f"agent_notes ({agent})", "always sent", *_shown(text, sent))


def _shown(text: str | None, sent: str) -> tuple[State, str | None]:
    """How a cited text is shown: as it was sent, changed since (not shown), or erased."""
    if text is None:
        return "erased", None
    if text_hash(text) != sent:
        return "changed", None
    return "shown", text


def _why(scores: Scores) -> str:
    parts = [
        f"dense rank {scores.dense_rank}" if scores.dense_rank is not None else "",
        f"lexical rank {scores.lexical_rank}" if scores.lexical_rank is not None else "",
        f"similarity {scores.similarity:.3f}" if scores.similarity is not None else "",
        f"fused {scores.fused:.4f}" if scores.fused is not None else "",
    ]
    return ", ".join(part for part in parts if part) or "in the budget"


async def _tools(
    connection: AsyncConnection[Any], event: EventKey, record: Record
) -> tuple[ToolCallShown, ...]:
    if not record.tools:
        return ()
    states = await call_states(connection, event)
    shown = []
    for tool in record.tools:
        index = tool.ledger_index
        parts = (event.user_id, event.correlation_id, event.step)
        key = None if index is None else "/".join([*parts, str(index)])
        state = states.get(index) if index is not None else None
        shown.append(ToolCallShown(tool.tool, tool.status, key, state))
    return tuple(shown)
