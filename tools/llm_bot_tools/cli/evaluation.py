"""``llm-bot eval ...``: measurements that decide settings, reported with numbers and a plot."""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import SecretStr

from llm_bot.cli.support import UsageError, file_in_output_dir, output_file, positive
from llm_bot.settings import Settings
from llm_bot_tools.cli.measurements import (
    database_for_measurements,
    embeddings_for_measurements,
    number_list,
    progress,
)

if TYPE_CHECKING:  # the evaluation pulls in memory, the database and the embedder: load when run
    from llm_bot.db.hybrid import SearchMode
    from llm_bot.memory.store import MemoryStore
    from llm_bot_tools.evaluation.context import ContextReport
    from llm_bot_tools.evaluation.derived import Loaded
    from llm_bot_tools.evaluation.retrieval import ModeReport

# Recall pools its candidates from k, in arithmetic the database does in 32-bit integers: a k
# of hundreds of millions overflows it once the corpus is loaded. No set holds evidence
# past this depth worth a measure.
MAX_K = 10_000


def hits(text: str) -> int:
    """An argparse type: ``--k``, from 1 to :data:`MAX_K`."""
    value = positive(text)
    if value > MAX_K:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_K}, got {value}")
    return value


MODES: tuple[SearchMode, ...] = ("dense", "lexical", "hybrid")
# The labelled attribution sets: the one the check was made on, then two written after it,
# blind to it, each measured untouched first (docs/eval-attribution.md).
ATTRIBUTION_SETS = ("", "-heldout", "-final")
# One measurement of the queries: each mode's report, and what the model is given.
# The modes' reports, the context at the defaults, and at each of --recall-budgets.
Measured = tuple[list["ModeReport"], "ContextReport", list["ContextReport"]]


def add_eval_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    evaluation = commands.add_parser("eval", help="retrieval quality measurements")
    kinds = evaluation.add_subparsers(dest="kind", required=True, parser_class=parser_class)
    calibrate_parser = kinds.add_parser(
        "calibrate", help="similarity threshold of the embedding model on labelled pairs"
    )
    calibrate_parser.add_argument("--pairs", type=Path, default=Path("eval/memory_pairs.jsonl"))
    calibrate_parser.add_argument("--plot", type=output_file, help="write a PNG histogram here")
    calibrate_parser.add_argument("--json", action="store_true", help="print JSON")
    calibrate_parser.set_defaults(handler=run_calibrate)

    retrieval = kinds.add_parser("retrieval", help="recall quality of history search per mode")
    retrieval.add_argument("--corpus", type=Path, default=Path("eval/corpus.jsonl"))
    retrieval.add_argument("--queries", type=Path, default=Path("eval/queries.jsonl"))
    retrieval.add_argument(
        "--k", type=hits, default=10, help=f"hits per query (default: 10; at most {MAX_K:,})"
    )
    retrieval.add_argument("--plot", type=output_file, help="write a PNG here")
    retrieval.add_argument(
        "--recall-budgets",
        type=number_list(int, 1, "600,1200,2000"),
        default=[],
        help="also assemble the context at each of these MEMORY_RECALL_BUDGET values (tokens)"
        " and report evidence in context against the budget (with --plot: NAME-budgets.png)",
    )
    retrieval.add_argument(
        "--derived",
        type=Path,
        help="a JSONL file of derived facts and session summaries (docs/eval-retrieval.md):"
        " the queries run without them, then again with them written beside the corpus",
    )
    retrieval.add_argument("--json", action="store_true", help="print JSON")
    retrieval.set_defaults(handler=run_retrieval_eval)

    attribution = kinds.add_parser(
        "attribution",
        help="precision and recall of consolidation's check that cited turns say a fact",
    )
    attribution.add_argument(
        "--set",
        dest="sets",
        type=Path,
        action="append",
        help="a JSONL file of labelled attributions, repeatable (default: the three sets"
        " eval/attribution*.jsonl)",
    )
    attribution.add_argument("--corpus", type=Path, help="with --derived: their corpus")
    attribution.add_argument(
        "--derived",
        type=Path,
        help="LoCoMo's derived.jsonl: the share of an unprompted model's facts the check keeps",
    )
    attribution.add_argument("--plot", type=output_file, help="write a PNG here")
    attribution.add_argument("--json", action="store_true", help="print JSON")
    attribution.set_defaults(handler=run_attribution_eval)

    standin = kinds.add_parser(
        "standin-summaries",
        help="write extractive stand-in session summaries of a corpus, for --derived",
    )
    standin.add_argument("--corpus", type=Path, default=Path("eval/corpus.jsonl"))
    standin.add_argument(
        "--out",
        type=file_in_output_dir,
        default=Path(".llm-bot/standin-summaries.jsonl"),
        help="JSONL to write",
    )
    standin.set_defaults(handler=run_standin_summaries)


def run_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot.llm.embeddings import embedder_from_settings
    from llm_bot_tools.evaluation.calibration import calibrate, load_pairs, plot_calibration

    try:
        pairs = load_pairs(args.pairs)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read labelled pairs: {error}") from None
    embedder = embedder_from_settings(embeddings_for_measurements(settings))

    async def run() -> Any:
        try:
            return await calibrate(embedder, pairs)
        finally:
            await embedder.close()

    print(f"# embedding {len(pairs)} labelled pairs with {embedder.model}", flush=True)
    result = asyncio.run(run())
    if args.plot:
        plot_calibration(result, args.plot)
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
        return 0
    print("threshold  precision  recall  f1")
    for row in result.table:
        print(f"{row.threshold:9.2f}  {row.precision:9.3f}  {row.recall:6.3f}  {row.f1:5.3f}")
    print(f"recommended MEMORY_SIMILARITY_THRESHOLD={result.recommended} for {result.model}")
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def run_retrieval_eval(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot.db.migrate import migrate
    from llm_bot.memory.wiring import open_memory_store
    from llm_bot_tools.evaluation.context import evaluate_context, plot_budgets
    from llm_bot_tools.evaluation.derived import load_derived, write_derived
    from llm_bot_tools.evaluation.retrieval import (
        asking_times,
        evaluate_mode,
        load_corpus,
        load_queries,
        load_through_commit,
        pairs_of,
        plot_reports,
    )
    from llm_bot_tools.local.scratch_schemas import scratch_schema

    try:
        corpus, queries = load_corpus(args.corpus), load_queries(args.queries)
        pairs_of(corpus)
        derived = load_derived(args.derived, corpus) if args.derived else None
        asked = asking_times(corpus, queries)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read the evaluation set: {error}") from None

    async def measured(
        store: MemoryStore, ids: dict[tuple[str, int], str], settings: Settings
    ) -> Measured:
        reports = []
        for mode in MODES:
            progress(f"running {len(queries)} queries, mode {mode}")
            reports.append(await evaluate_mode(store, queries, ids, mode, args.k, asked))
        progress(f"assembling the worker's context for {len(queries)} queries")
        given = await evaluate_context(store, corpus, queries, ids, settings, progress)
        budgets = []
        for budget in args.recall_budgets:
            progress(f"assembling the context at a recall budget of {budget} tokens")
            at_budget = settings.model_copy(update={"recall_budget": budget})
            budgets.append(await evaluate_context(store, corpus, queries, ids, at_budget, progress))
        return reports, given, budgets

    async def run(url: str) -> tuple[Measured, tuple[Loaded, Measured] | None]:
        async with scratch_schema(url, "eval_retrieval") as scratch:
            await asyncio.to_thread(migrate, scratch)
            scratch_settings = settings.model_copy(update={"database_url": SecretStr(scratch)})
            async with open_memory_store(scratch_settings) as store:
                ids = await load_through_commit(store, corpus, progress, scratch_settings)
                without = await measured(store, ids, scratch_settings)
                if derived is None:
                    return without, None
                progress(f"writing {len(derived)} derived items beside the corpus")
                loaded = await write_derived(store, derived, ids)
                return without, (loaded, await measured(store, ids, scratch_settings))

    settings = embeddings_for_measurements(settings)  # once the arguments are read
    with database_for_measurements(settings) as url:
        (reports, given, budgets), with_derived = asyncio.run(run(url))
    if args.plot:
        plot_reports(reports, args.plot, given)
        if budgets:
            derived_budgets = with_derived[1][2] if with_derived else ()
            path = args.plot.with_name(f"{args.plot.stem}-budgets.png")
            plot_budgets(budgets, path, derived_budgets)
    if args.json:
        result = {
            "modes": [r.as_dict() for r in reports],
            "context": given.as_dict(),
            "budgets": [b.as_dict() for b in budgets],
        }
        if with_derived:
            loaded, (derived_reports, derived_given, derived_budgets) = with_derived
            result["derived"] = {
                "loaded": asdict(loaded),
                "modes": [r.as_dict() for r in derived_reports],
                "context": derived_given.as_dict(),
                "budgets": [b.as_dict() for b in derived_budgets],
            }
        print(json.dumps(result, indent=2))
        return 0
    print(f"mode     recall@{args.k}  MRR    p50 ms  p95 ms")
    for r in reports:
        print(f"{r.mode:7s}  {r.recall_at_k:8.3f}  {r.mrr:5.3f}  {r.p50_ms:6.2f}  {r.p95_ms:6.2f}")
    print_depths(reports)
    print_categories(reports, args.k)
    hybrid = reports[-1]
    print_given(given, hybrid)
    print_budgets(budgets)
    print("threshold  precision  recall  f1   (hybrid hits)")
    for row in hybrid.table:
        print(f"{row.threshold:9.2f}  {row.precision:9.3f}  {row.recall:6.3f}  {row.f1:5.3f}")
    if with_derived:
        print_derived((reports, given, budgets), *with_derived)
    return 0


def print_depths(reports: list[ModeReport]) -> None:
    """recall at the depths context assembly asks for, per mode, with the conversations' spread."""
    for r in reports:
        cells = "  ".join(
            f"recall@{depth} {at.recall:.3f} ({at.conversation_spread.min:.3f}"
            f"-{at.conversation_spread.max:.3f})"
            for depth, at in r.recall_at_depth.items()
        )
        print(f"{r.mode:7s}  {cells}")


def print_categories(reports: list[ModeReport], k: int) -> None:
    """Recall@k and MRR per category of question, one column pair per mode."""
    header = "".join(f"  {r.mode + f' R@{k}':>13s}  {'MRR':>5s}" for r in reports)
    print(f"category         queries{header}")
    for category, first in reports[0].by_category.items():
        label = f"{category}{'*' if first.inferred else ''}"
        cells = "".join(
            f"  {r.by_category[category].recall_at_k:13.3f}  {r.by_category[category].mrr:5.3f}"
            for r in reports
        )
        print(f"{label:15s}  {first.queries:7d}{cells}")
    if any(c.inferred for c in reports[0].by_category.values()):
        print("* inferred from the question (llm_bot_tools.evaluation.categories), not labelled")


def print_budgets(budgets: list[ContextReport]) -> None:
    """Evidence in context at each recall budget asked for, overall and per category."""
    if not budgets:
        return
    categories = list(budgets[0].by_category)
    header = "recall budget  section p50  memories p50  all    "
    print(header + "  ".join(f"{c:>11s}" for c in categories))
    for b in budgets:
        cells = "  ".join(f"{b.by_category[c].evidence_in_context:11.3f}" for c in categories)
        print(
            f"{b.recall_budget_tokens:13d}  {b.recall_tokens_p50:11g}  {b.memory_tokens_p50:12g}"
            f"  {b.overall.evidence_in_context:5.3f}  {cells}"
        )


def print_given(given: ContextReport, hybrid: ModeReport) -> None:
    """Evidence in the context the worker assembles, overall, per category, per conversation."""
    print(
        f"what the model is given (MEMORY_RECALL_BUDGET={given.recall_budget_tokens},"
        f" CONTEXT_PAIRS={given.context_pairs}, MAX_CONTEXT_TOKENS={given.max_context_tokens}):"
        f" recall section p50 {given.recall_tokens_p50:g} tokens, p95 {given.recall_tokens_p95:g};"
        f" memories section p50 {given.memory_tokens_p50:g}, p95 {given.memory_tokens_p95:g}"
    )
    k = hybrid.k
    print(f"group            queries  in context  in recall  in window  {hybrid.mode} R@{k}")
    rows = [("all", given.overall, hybrid.recall_at_k)]
    rows += [(c, s, hybrid.by_category[c].recall_at_k) for c, s in given.by_category.items()]
    rows += [
        (u, s, hybrid.by_conversation[u].recall_at_k) for u, s in given.by_conversation.items()
    ]
    for name, score, recall_at_k in rows:
        print(
            f"{name:15s}  {score.queries:7d}  {score.evidence_in_context:10.3f}"
            f"  {score.in_recall:9.3f}  {score.in_window:9.3f}  {recall_at_k:9.3f}"
        )
    spread, recall_spread = given.conversation_spread, hybrid.conversation_spread
    if given.evidence_not_in_corpus:
        print(f"{given.evidence_not_in_corpus} evidence ids are in no corpus turn: never given")
    print(
        f"spread over {len(given.by_conversation)} conversations: in context"
        f" {spread.min:.3f}-{spread.max:.3f}, {hybrid.mode} R@{k}"
        f" {recall_spread.min:.3f}-{recall_spread.max:.3f}"
    )


def run_attribution_eval(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.evaluation.attribution import (
        judge,
        judge_unprompted,
        load_items,
        plot_reports,
    )

    if (args.corpus is None) != (args.derived is None):
        raise UsageError("--corpus and --derived go together")
    paths = args.sets or [Path(f"eval/attribution{name}.jsonl") for name in ATTRIBUTION_SETS]
    try:
        reports = [judge(path, load_items(path)) for path in paths]
        unprompted = judge_unprompted(args.corpus, args.derived) if args.derived else None
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"cannot read the labelled set: {error}") from None
    if args.plot:
        plot_reports(reports, args.plot)
    if args.json:
        result: dict[str, Any] = {"sets": [report.as_dict() for report in reports]}
        if unprompted:
            result["unprompted"] = {**asdict(unprompted), "share": unprompted.share}
        print(json.dumps(result, indent=2))
        return 0
    for report in reports:
        print(f"# {report.path}")
        print(f"{'':28} {'true':>11} {'false':>11}  precision  recall")
        print(f"{'':28} {'kept/all':>11} {'kept/all':>11}")
        rows = [*sorted(report.by_class.items()), *sorted(report.by_kind.items())]
        for name, tally in [*rows, ("all", report.overall)]:
            true = f"{tally.true_stored}/{tally.true_stored + tally.true_dropped}"
            false = f"{tally.false_stored}/{tally.false_stored + tally.false_dropped}"
            precision = "-" if tally.precision is None else f"{tally.precision:.3f}"
            recall = "-" if tally.recall is None else f"{tally.recall:.3f}"
            print(f"{name:28} {true:>11} {false:>11}  {precision:>9}  {recall:>6}")
        print(f"judged against their label: {', '.join(report.wrong) or 'none'}")
    if unprompted:
        print(
            f"# {args.derived}: {unprompted.kept} of {unprompted.facts} facts kept"
            f" ({unprompted.share:.3f})"
        )
    if args.plot:
        print(f"plot: {args.plot}")
    return 0


def run_standin_summaries(args: argparse.Namespace, settings: Settings) -> int:
    from llm_bot_tools.evaluation.retrieval import load_corpus
    from llm_bot_tools.evaluation.standin import standin_summaries

    try:
        corpus = load_corpus(args.corpus)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read the corpus: {error}") from None
    items = standin_summaries(corpus)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("".join(json.dumps(item) + "\n" for item in items), encoding="utf-8")
    print(f"{len(items)} stand-in summaries: {args.out}")
    return 0


def print_derived(without: Measured, loaded: Loaded, with_derived: Measured) -> None:
    """The measures without and with the derived items, side by side (without -> with)."""
    (before, given, _), (after, derived_given, derived_budgets) = without, with_derived
    k, depths = before[0].k, list(before[0].recall_at_depth)
    print(f"with {loaded.facts} derived facts and {loaded.summaries} summaries (without -> with):")
    print(
        f"mode     recall@{k}       MRR           "
        + "".join(f"recall@{d:<2d}      " for d in depths)
        + f"summaries in {k}"
    )
    for b, a in zip(before, after, strict=True):
        at_depths = "".join(
            f"{_pair(b.recall_at_depth[d].recall, a.recall_at_depth[d].recall)}  " for d in depths
        )
        recall_at_k, mrr = _pair(b.recall_at_k, a.recall_at_k), _pair(b.mrr, a.mrr)
        print(f"{b.mode:7s}  {recall_at_k}  {mrr}  {at_depths}{a.summaries_at_k:.2f}")
    hybrid_before, hybrid_after = before[-1], after[-1]
    print(f"group            queries  hybrid R@{k}    in context     in memories  summaries shown")
    before_at_k, after_at_k = _recall_by_group(hybrid_before), _recall_by_group(hybrid_after)
    rows = [("all", given.overall, derived_given.overall)]
    rows += [(name, s, derived_given.by_category[name]) for name, s in given.by_category.items()]
    rows += [
        (name, s, derived_given.by_conversation[name]) for name, s in given.by_conversation.items()
    ]
    for name, score_before, score_after in rows:
        print(
            f"{name:15s}  {score_before.queries:7d}  {_pair(before_at_k[name], after_at_k[name])}"
            f"  {_pair(score_before.evidence_in_context, score_after.evidence_in_context)}"
            f"  {score_after.in_memories:11.3f}  {score_after.summaries_shown:6.2f}"
            f" ({score_after.summary_share:.0%} of recall tokens)"
        )
    spread, derived_spread = given.conversation_spread, derived_given.conversation_spread
    print(
        f"spread over {len(given.by_conversation)} conversations: in context"
        f" {spread.min:.3f}-{spread.max:.3f} -> {derived_spread.min:.3f}-{derived_spread.max:.3f},"
        f" hybrid R@{k} {hybrid_before.conversation_spread.min:.3f}"
        f"-{hybrid_before.conversation_spread.max:.3f}"
        f" -> {hybrid_after.conversation_spread.min:.3f}-{hybrid_after.conversation_spread.max:.3f}"
    )
    print(
        f"memories section p50 {derived_given.memory_tokens_p50:g} tokens,"
        f" p95 {derived_given.memory_tokens_p95:g}; with the derived items:"
    )
    print_budgets(derived_budgets)


def _recall_by_group(report: ModeReport) -> dict[str, float]:
    """recall@k overall (``all``), per category and per conversation."""
    by_group = {"all": report.recall_at_k}
    by_group |= {name: group.recall_at_k for name, group in report.by_category.items()}
    by_group |= {name: group.recall_at_k for name, group in report.by_conversation.items()}
    return by_group


def _pair(before: float, after: float) -> str:
    return f"{before:.3f} -> {after:.3f}"
