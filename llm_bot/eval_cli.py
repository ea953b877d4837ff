"""``llm-bot eval ...``: measurements that decide settings, reported with numbers and a plot."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

from llm_bot.cli_support import UsageError
from llm_bot.llm.embeddings import embedder_from_settings
from llm_bot.memory.calibration import calibrate, load_pairs, plot_calibration
from llm_bot.settings import Settings


def add_eval_commands(commands: Any, parser_class: type[argparse.ArgumentParser]) -> None:
    evaluation = commands.add_parser("eval", help="retrieval quality measurements")
    kinds = evaluation.add_subparsers(dest="kind", required=True, parser_class=parser_class)
    calibrate_parser = kinds.add_parser(
        "calibrate", help="similarity threshold of the embedding model on labelled pairs"
    )
    calibrate_parser.add_argument("--pairs", type=Path, default=Path("eval/memory_pairs.jsonl"))
    calibrate_parser.add_argument("--plot", type=Path, help="write a PNG histogram here")
    calibrate_parser.add_argument("--json", action="store_true", help="print JSON")
    calibrate_parser.set_defaults(handler=run_calibrate)


def run_calibrate(args: argparse.Namespace, settings: Settings) -> int:
    try:
        pairs = load_pairs(args.pairs)
    except (OSError, ValueError) as error:
        raise UsageError(f"cannot read labelled pairs: {error}") from None
    embedder = embedder_from_settings(settings)

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
