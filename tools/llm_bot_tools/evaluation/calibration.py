"""Calibrate the similarity threshold of an embedding model on labelled (memory, query) pairs.

Cosine scores depend on the model: large API models score a paraphrase around 0.7-0.9,
all-MiniLM-L6-v2 often below 0.5. A threshold is only meaningful for the model it was measured
on, so this computes, for a labelled set, the score distribution of relevant and irrelevant
pairs and precision / recall / F1 at each threshold, and recommends the threshold with the best
F1. Run ``llm-bot eval calibrate --pairs eval/memory_pairs.jsonl`` with the embedding settings
of the deployment and put the result in ``MEMORY_SIMILARITY_THRESHOLD``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from llm_bot.llm.embeddings import Embedder
from llm_bot_tools.evaluation.jsonl import read_jsonl

THRESHOLDS = [round(step * 0.05, 2) for step in range(0, 20)]


@dataclass(frozen=True)
class LabelledPair:
    memory: str
    query: str
    relevant: bool


@dataclass(frozen=True)
class ThresholdRow:
    threshold: float
    precision: float
    recall: float
    f1: float


@dataclass(frozen=True)
class Calibration:
    model: str
    relevant_scores: list[float]
    irrelevant_scores: list[float]
    table: list[ThresholdRow]
    recommended: float

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def load_pairs(path: Path) -> list[LabelledPair]:
    pairs = read_jsonl(path, _pair, "a labelled pair")
    if not any(p.relevant for p in pairs) or all(p.relevant for p in pairs):
        raise ValueError(f"{path}: needs both relevant and irrelevant pairs")
    return pairs


def _pair(row: Any) -> LabelledPair:
    """A line's pair: memory and query non-empty strings, relevant true or false. Read as
    anything else ("false" as truthy, null as the text "None") the pair would be measured as
    another pair than the one labelled."""
    for name in ("memory", "query"):
        if not isinstance(row.get(name), str) or not row[name].strip():
            raise ValueError(f"{name} must be a non-empty string")
    if not isinstance(row.get("relevant"), bool):
        raise ValueError("relevant must be true or false")
    return LabelledPair(row["memory"], row["query"], row["relevant"])


async def calibrate(embedder: Embedder, pairs: Sequence[LabelledPair]) -> Calibration:
    texts = sorted({p.memory for p in pairs} | {p.query for p in pairs})
    vectors = dict(zip(texts, await embedder.embed(texts), strict=True))
    scored = [
        (sum(a * b for a, b in zip(vectors[p.memory], vectors[p.query], strict=True)), p.relevant)
        for p in pairs
    ]
    table = threshold_table(scored)
    best = max(table, key=lambda row: (row.f1, row.threshold))
    return Calibration(
        model=embedder.model,
        relevant_scores=sorted(score for score, relevant in scored if relevant),
        irrelevant_scores=sorted(score for score, relevant in scored if not relevant),
        table=table,
        recommended=best.threshold,
    )


def threshold_table(scored: Sequence[tuple[float, bool]]) -> list[ThresholdRow]:
    """Precision, recall and F1 of keeping the (score, relevant) pairs at each threshold."""
    return [_row(threshold, scored) for threshold in THRESHOLDS]


def _row(threshold: float, scored: Sequence[tuple[float, bool]]) -> ThresholdRow:
    kept = [relevant for score, relevant in scored if score >= threshold]
    true_positives = sum(kept)
    relevant_total = sum(relevant for _, relevant in scored)
    precision = true_positives / len(kept) if kept else 1.0
    recall = true_positives / relevant_total if relevant_total else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return ThresholdRow(threshold, round(precision, 3), round(recall, 3), round(f1, 3))


def plot_calibration(calibration: Calibration, path: Path) -> None:
    """Score histograms of relevant vs irrelevant pairs, with the recommended threshold."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    bins = [x / 40 for x in range(-8, 41)]
    axis.hist(calibration.irrelevant_scores, bins=bins, alpha=0.6, label="irrelevant", density=True)
    axis.hist(calibration.relevant_scores, bins=bins, alpha=0.6, label="relevant", density=True)
    axis.axvline(calibration.recommended, color="black", linestyle="--", label="recommended")
    axis.set_xlabel("cosine similarity")
    axis.set_ylabel("density")
    axis.set_title(f"Similarity of labelled pairs: {calibration.model}")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)
