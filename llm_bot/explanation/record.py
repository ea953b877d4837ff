"""What an answer's explanation records: the behaviour decision, each part of the prompt with
the ids of its sources, what context assembly left out (counted by reason), the tool calls,
and hashes of the texts as they were sent.

A record names sources, it never copies them: a memory by its key and the time its text was
written (the version current then), a turn by its thread and sequence number, a tool call by
its index in the event's tool ledger, a section by the hash of its text. Whoever shows the
record reads the words from their own rows (:mod:`llm_bot.explanation.reader`), so a speaker
erased since is shown as erased and nobody's words outlive their erasure here. Every list is
capped (:data:`MAX_ITEMS`, :data:`MAX_TOOLS`): a record stays a few kilobytes whatever the
event, and what a cap drops is counted under ``over_cap``.

The graph assembles a record where it assembles the prompt (:mod:`llm_bot.graph.nodes`):
the behaviour decision and the user message's sections in ``ingest_prompt``, the memory
context's sources in ``retrieve_memories``, the tool calls as they run, the answer at the end.
Built per answered event, so it imports nothing but the standard library: the answering path
loads none of the reader's reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, TypeVar

FORMAT = 1
MAX_ITEMS = 64  # memories, recalled turns and window turns, each
MAX_TOOLS = 48  # LLM_BOT_MAX_TOOL_ROUNDS 4 x LLM_BOT_MAX_TOOL_CALLS_PER_TURN 10, and room
MAX_REFS = 8  # names a section cites (personalities, contexts)
MAX_REF_CHARS = 128
# Why context assembly left a candidate out (docs/explanations.md). A superseded text is never a
# candidate (assembly reads a memory's current text alone), so it is no reason here: the record
# names the version that was current instead.
LEFT_OUT_REASONS = (
    "another_scope",
    "below_threshold",
    "over_budget",
    "duplicate",
    "over_cap",
)

T = TypeVar("T")
ToolStatus = Literal["ok", "error"]


def text_hash(text: str) -> str:
    """A short, stable fingerprint of a text: says whether the text read at show time is the
    text that was sent, and tells nothing of it."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


@dataclass(frozen=True)
class BehaviourDecision:
    """The behaviour layer's decision (:mod:`llm_bot.graph.behavior.profile`): what it read of
    the event, the gate applied, and the rules of the policy that shaped the answer."""

    intent: str
    tone: str
    risk_level: str
    risk_type: str
    response_mode: str
    gate: str
    rules: tuple[str, ...] = ()
    guidance: bool = True  # its lines went into Constraints and Task


@dataclass(frozen=True)
class Scores:
    """Where a candidate ranked in each search (1 first; None: that search did not find it)
    and its scores: the dense similarity and the fused score it was ordered by."""

    dense_rank: int | None = None
    lexical_rank: int | None = None
    similarity: float | None = None
    fused: float | None = None


@dataclass(frozen=True)
class MemorySource:
    """A memory as it went in: its key, the time its text was written (so the version current
    at the time) and the hash of that text."""

    key: str
    written_at: datetime
    hash: str
    scores: Scores = Scores()


@dataclass(frozen=True)
class TurnSource:
    """A turn of history as it went in: its thread and number (its id; a turn's text is never
    rewritten, only deleted, so no hash is needed to know it: a turn under that id written after
    the answer, once the thread was forgotten and begun again, is told apart by its time), and
    for a recalled turn its scores (a window turn is chosen by recency, not by score)."""

    thread_id: str
    seq: int
    scores: Scores | None = None
    # A correction consolidation recorded, by which recall ranked the turn where its own
    # scores would not (:func:`llm_bot.memory.fusion.corrected`): the outdated turns whose
    # places it took, or the later turns that took its own.
    replaces: tuple[tuple[str, int], ...] = ()
    replaced_by: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class ContextSources:
    """What context assembly put in and left out: the notes (hash), the memories, the recalled
    turns and the window, and the candidates it left out, counted by reason
    (:data:`LEFT_OUT_REASONS`). A left-out candidate is only counted: one withheld from a shared
    channel (another scope) must not even be named there."""

    notes_hash: str | None = None
    memories: tuple[MemorySource, ...] = ()
    recalled: tuple[TurnSource, ...] = ()
    window: tuple[TurnSource, ...] = ()
    left_out: Mapping[str, int] = field(default_factory=dict)
    failed: int = 0  # parts that could not be read (left out, the event answered without them)


@dataclass(frozen=True)
class Section:
    """A prompt section that is not memory: its BitBrat name, where it came from, the names it
    cites (personalities, context packs) and the hash of its text."""

    name: str
    origin: str
    hash: str | None = None
    refs: tuple[str, ...] = ()


@dataclass(frozen=True)
class ToolSource:
    """A tool call of the run: the tool, how it ended, and for a platform tool its index in the
    event's tool ledger (whose key is the event's user, correlation id, step and this index)."""

    tool: str
    status: ToolStatus
    ledger_index: int | None = None


@dataclass(frozen=True)
class Record:
    """One answer's explanation, as stored."""

    step_key: str
    decision: BehaviourDecision | None = None
    sections: tuple[Section, ...] = ()
    context: ContextSources = ContextSources()
    tools: tuple[ToolSource, ...] = ()
    answer_hash: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as stored: capped, compact, ids and numbers only."""
        context = self.context
        memories, extra_memories = _capped(context.memories, MAX_ITEMS)
        recalled, extra_recalled = _capped(context.recalled, MAX_ITEMS)
        window, extra_window = _capped(context.window, MAX_ITEMS)
        tools, extra_tools = _capped(self.tools, MAX_TOOLS)
        left_out = {r: int(n) for r, n in context.left_out.items() if r in LEFT_OUT_REASONS and n}
        over_cap = extra_memories + extra_recalled + extra_window + extra_tools
        if over_cap:
            left_out["over_cap"] = left_out.get("over_cap", 0) + over_cap
        decision = self.decision
        return {
            "format": FORMAT,
            "step": self.step_key,
            "decision": None if decision is None else _behaviour_decision_json(decision),
            "sections": [_section_json(section) for section in self.sections[:MAX_ITEMS]],
            "notes": context.notes_hash,
            "memories": [_memory_json(memory) for memory in memories],
            "recalled": [_turn_json(turn) for turn in recalled],
            "window": [_turn_json(turn) for turn in window],
            "leftOut": left_out,
            "failed": context.failed,
            "tools": [_tool_json(tool) for tool in tools],
            "answer": self.answer_hash,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Record:
        decision = data.get("decision")
        return cls(
            step_key=str(data.get("step", "")),
            decision=None if decision is None else _behaviour_decision_of(decision),
            sections=tuple(_section_of(each) for each in data.get("sections", ())),
            context=ContextSources(
                notes_hash=data.get("notes"),
                memories=tuple(_memory_of(each) for each in data.get("memories", ())),
                recalled=tuple(_turn_of(each) for each in data.get("recalled", ())),
                window=tuple(_turn_of(each) for each in data.get("window", ())),
                left_out={str(r): int(n) for r, n in data.get("leftOut", {}).items()},
                failed=int(data.get("failed", 0)),
            ),
            tools=tuple(_tool_of(each) for each in data.get("tools", ())),
            answer_hash=data.get("answer"),
        )


def section(name: str, origin: str, text: str | None, refs: Iterable[str] = ()) -> Section:
    """A section of ``text`` (None: not in the prompt), citing ``refs`` (capped, one line)."""
    cited = tuple(" ".join(ref.split())[:MAX_REF_CHARS] for ref in refs)[:MAX_REFS]
    return Section(name, origin, None if text is None else text_hash(text), cited)


def _capped(items: Sequence[T], cap: int) -> tuple[Sequence[T], int]:
    return items[:cap], max(0, len(items) - cap)


def _behaviour_decision_json(decision: BehaviourDecision) -> dict[str, Any]:
    return {
        "intent": decision.intent,
        "tone": decision.tone,
        "risk": [decision.risk_level, decision.risk_type],
        "mode": decision.response_mode,
        "gate": decision.gate,
        "rules": list(decision.rules),
        "guidance": decision.guidance,
    }


def _behaviour_decision_of(data: Mapping[str, Any]) -> BehaviourDecision:
    level, kind = data.get("risk", ["none", "none"])
    return BehaviourDecision(
        intent=str(data.get("intent", "")),
        tone=str(data.get("tone", "")),
        risk_level=str(level),
        risk_type=str(kind),
        response_mode=str(data.get("mode", "")),
        gate=str(data.get("gate", "")),
        rules=tuple(data.get("rules", ())),
        guidance=bool(data.get("guidance", True)),
    )


def _section_json(section: Section) -> dict[str, Any]:
    return {
        "name": section.name,
        "origin": section.origin,
        "hash": section.hash,
        "refs": list(section.refs),
    }


def _section_of(data: Mapping[str, Any]) -> Section:
    return Section(
        str(data["name"]),
        str(data.get("origin", "")),
        data.get("hash"),
        tuple(data.get("refs", ())),
    )


def _scores_json(scores: Scores) -> list[Any]:
    return [
        scores.dense_rank,
        scores.lexical_rank,
        _rounded(scores.similarity),
        _rounded(scores.fused),
    ]


def _scores_of(data: Sequence[Any]) -> Scores:
    dense, lexical, similarity, fused = data
    return Scores(dense, lexical, similarity, fused)


def _rounded(score: float | None) -> float | None:
    return None if score is None else round(float(score), 4)


# Memories and turns as arrays, not objects: a record cites up to a hundred of them, and an
# array per item is a third of the bytes to encode and store.
def _memory_json(memory: MemorySource) -> list[Any]:
    """``[key, written at, hash, dense rank, lexical rank, similarity, fused]``"""
    return [memory.key, memory.written_at.isoformat(), memory.hash, *_scores_json(memory.scores)]


def _memory_of(data: Sequence[Any]) -> MemorySource:
    key, at, digest, *scores = data
    return MemorySource(str(key), datetime.fromisoformat(at), str(digest), _scores_of(scores))


def _turn_json(turn: TurnSource) -> list[Any]:
    """``[thread, seq]``, and for a recalled turn its scores as a memory's, then, for the few
    a correction moved, ``{"replaces": [[thread, seq], ...], "replacedBy": [...]}``."""
    scores = [] if turn.scores is None else _scores_json(turn.scores)
    corrections = {
        name: [list(key) for key in keys]
        for name, keys in (("replaces", turn.replaces), ("replacedBy", turn.replaced_by))
        if keys
    }
    return [turn.thread_id, turn.seq, *scores, *([corrections] if corrections else [])]


def _turn_of(data: Sequence[Any]) -> TurnSource:
    thread, seq, *scores = data
    corrections = scores.pop() if scores and isinstance(scores[-1], Mapping) else {}
    return TurnSource(
        str(thread),
        int(seq),
        _scores_of(scores) if scores else None,
        _keys_of(corrections.get("replaces", ())),
        _keys_of(corrections.get("replacedBy", ())),
    )


def _keys_of(data: Iterable[Sequence[Any]]) -> tuple[tuple[str, int], ...]:
    return tuple((str(thread), int(seq)) for thread, seq in data)


def _tool_json(tool: ToolSource) -> dict[str, Any]:
    return {"tool": tool.tool, "status": tool.status, "ledger": tool.ledger_index}


def _tool_of(data: Mapping[str, Any]) -> ToolSource:
    status: ToolStatus = "error" if data.get("status") == "error" else "ok"
    return ToolSource(str(data["tool"]), status, data.get("ledger"))
