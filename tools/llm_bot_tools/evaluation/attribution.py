"""How well consolidation's check of a fact against its cited turns tells a speaker's own facts
from false attributions, on labelled sets (``llm-bot eval attribution``).

Each labelled item is one window of turns (a DM, or a shared channel of several speakers) and
one fact a model might propose, citing turns, labelled true when the cited turns' author said
it of themself. The item goes through what a consolidation job runs on a model's reply
(:func:`llm_bot.consolidation.extraction.parse`), so the measure is of the code that stores:
a fact it keeps is an attribution stored. Precision is the share of stored facts that are
true; recall the share of true facts stored; both overall, per class and per kind of window.

A second measure reads facts a model wrote without being told to keep the speaker's words
(LoCoMo's own observations, ``--derived`` beside ``--corpus``): the share the check keeps,
the cost of the rule on an unprompted model's paraphrase. LoCoMo's corpus stores every turn
as "Name: text" and both speakers under one user id, so the speaker is read from the name.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from llm_bot.consolidation.extraction import WindowTurn, parse
from llm_bot.memory.run_writes import Visibility
from llm_bot_tools.evaluation.jsonl import read_jsonl

# Each item's turns are a minute apart from this time (the check reads no time).
START = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
KINDS = ("dm", "channel")
T = TypeVar("T")


@dataclass(frozen=True)
class Item:
    id: str
    group: str  # the class of the attribution
    label: bool
    kind: str
    turns: tuple[WindowTurn, ...]
    fact: str
    sources: tuple[int, ...]


@dataclass
class Tally:
    """Stored and not, of true and of false attributions."""

    true_stored: int = 0
    true_dropped: int = 0
    false_stored: int = 0
    false_dropped: int = 0

    def add(self, label: bool, stored: bool) -> None:
        name = f"{'true' if label else 'false'}_{'stored' if stored else 'dropped'}"
        setattr(self, name, getattr(self, name) + 1)

    @property
    def precision(self) -> float | None:
        stored = self.true_stored + self.false_stored
        return self.true_stored / stored if stored else None

    @property
    def recall(self) -> float | None:
        true = self.true_stored + self.true_dropped
        return self.true_stored / true if true else None

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "precision": self.precision, "recall": self.recall}


@dataclass
class Report:
    path: str
    overall: Tally = field(default_factory=Tally)
    by_class: dict[str, Tally] = field(default_factory=dict)
    by_kind: dict[str, Tally] = field(default_factory=dict)
    wrong: list[str] = field(default_factory=list)  # ids judged against their label

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "overall": self.overall.as_dict(),
            "by_class": {name: tally.as_dict() for name, tally in self.by_class.items()},
            "by_kind": {name: tally.as_dict() for name, tally in self.by_kind.items()},
            "wrong": self.wrong,
        }


def load_items(path: Path) -> list[Item]:
    """The labelled items of ``path`` (JSONL); ValueError names the line of a bad one."""
    return read_jsonl(path, _item, "a labelled attribution")


# A turn's seq is its minute after START, so one past any window's length is still a time.
MAX_SEQ = 100_000


def _item(row: Any) -> Item:
    """Each field of the type the set's format gives it: a value of another type (a label
    "false", a seq 1.5 or 1e400, a text null) would be judged as something else, or fail the
    command past its reading."""
    kind = _field(row, "kind", str)
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    label = _field(row, "label", bool)
    visibility: Visibility = "dm" if kind == "dm" else "public"
    turns = tuple(_turn(turn, visibility) for turn in _field(row, "turns", list))
    if not turns:
        raise ValueError("turns must not be empty")
    fact = _field(row, "fact", dict)
    sources = _field(fact, "sources", list)
    if not sources or not all(_is_seq(source) for source in sources):
        raise ValueError(f"fact sources must be a non-empty list of seqs from 1 to {MAX_SEQ}")
    return Item(
        _field(row, "id", str),
        _field(row, "class", str),
        label,
        kind,
        turns,
        _field(fact, "text", str),
        tuple(sources),
    )


def _turn(turn: Any, visibility: Visibility) -> WindowTurn:
    seq = _field(turn, "seq", int)
    if not _is_seq(seq):
        raise ValueError(f"a turn's seq must be a whole number from 1 to {MAX_SEQ}")
    role = _field(turn, "role", str)
    if role not in ("user", "assistant"):
        raise ValueError("a turn's role must be user or assistant")
    return WindowTurn(
        _field(turn, "user", str),
        seq,
        role,
        _field(turn, "text", str),
        START + timedelta(minutes=seq),
        visibility,
    )


def _is_seq(value: Any) -> bool:
    return type(value) is int and 1 <= value <= MAX_SEQ


def _field(row: Any, name: str, kind: type[T]) -> T:
    """``row[name]``, which must be a ``kind`` (a bool is no int here)."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object holding {name}")
    if name not in row:
        raise ValueError(f"missing {name}")
    value = row[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{name} must be a JSON {_JSON_TYPES[kind]}")
    return value


_JSON_TYPES: dict[type, str] = {
    str: "string",
    bool: "true or false",
    int: "whole number",
    list: "list",
    dict: "object",
}


def stored(fact: str, sources: Sequence[int], turns: Sequence[WindowTurn]) -> bool:
    """Whether a consolidation job stores ``fact`` citing ``sources`` of the window ``turns``."""
    reply = json.dumps({"facts": [{"text": fact, "sources": list(sources)}]})
    return bool(parse(reply, turns, {}).facts)


def judge(path: Path, items: Sequence[Item]) -> Report:
    report = Report(str(path))
    for item in items:
        kept = stored(item.fact, item.sources, item.turns)
        for tally in (
            report.overall,
            report.by_class.setdefault(item.group, Tally()),
            report.by_kind.setdefault(item.kind, Tally()),
        ):
            tally.add(item.label, kept)
        if kept != item.label:
            report.wrong.append(item.id)
    return report


@dataclass(frozen=True)
class Unprompted:
    """Facts of a model not told to keep the speaker's words, and how many are kept."""

    facts: int
    kept: int

    @property
    def share(self) -> float:
        return self.kept / self.facts if self.facts else 0.0


def judge_unprompted(corpus: Path, derived: Path) -> Unprompted:
    """The share of ``derived``'s facts (LoCoMo's observations) the check keeps, each against
    the session it cites, its speakers read from the turns' "Name: " prefix."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for turn in read_jsonl(corpus, dict):
        sessions.setdefault(_field(turn, "thread_id", str), []).append(turn)
    windows = {thread: _speakers_window(turns) for thread, turns in sessions.items()}
    facts = kept = 0
    for row in read_jsonl(derived, dict):
        if row.get("kind") != "fact" or row.get("thread_id") not in windows:
            continue
        turns, seqs = windows[row["thread_id"]]
        cited = _field(row, "sources", list)
        sources = [seqs[source] for source in cited if isinstance(source, str) and source in seqs]
        facts += 1
        kept += bool(sources) and stored(_field(row, "text", str), sources, turns)
    return Unprompted(facts, kept)


def _speakers_window(
    turns: Sequence[dict[str, Any]],
) -> tuple[list[WindowTurn], dict[str, int]]:
    window, seqs = [], {}
    for seq, turn in enumerate(turns, start=1):
        speaker, _, text = str(turn["text"]).partition(": ")
        at = datetime.fromisoformat(turn["at"])
        window.append(WindowTurn(speaker.lower(), seq, "user", text, at, "public"))
        seqs[turn["id"]] = seq
    return window, seqs


def plot_reports(reports: Sequence[Report], path: Path) -> None:
    """Precision and recall per class of each set, side by side."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(reports), figsize=(6 * len(reports), 4), squeeze=False)
    for axis, report in zip(axes[0], reports, strict=True):
        names = sorted(report.by_class)
        stored_share = [
            (t.true_stored + t.false_stored) / max(1, sum(asdict(t).values()))
            for t in (report.by_class[name] for name in names)
        ]
        labels = [f"{name}\n({_label_of(report.by_class[name])})" for name in names]
        axis.barh(labels, stored_share, color=[_colour(report.by_class[n]) for n in names])
        axis.set_xlim(0, 1)
        axis.set_xlabel("share of the class's facts stored")
        overall = report.overall
        axis.set_title(
            f"{Path(report.path).name}: precision {_fmt(overall.precision)},"
            f" recall {_fmt(overall.recall)}"
        )
        axis.tick_params(axis="y", labelsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def _label_of(tally: Tally) -> str:
    true = tally.true_stored + tally.true_dropped
    false = tally.false_stored + tally.false_dropped
    return "true" if true and not false else "false" if false and not true else "mixed"


def _colour(tally: Tally) -> str:
    return {"true": "tab:green", "false": "tab:red"}.get(_label_of(tally), "tab:grey")


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"
