"""``llm-bot bench``: plain ``bench`` is ``bench run`` with its defaults; bad lists cost a line."""

from __future__ import annotations

import argparse

import pytest

from llm_bot.cli import main
from llm_bot.cli.parser import build_parser
from llm_bot_tools.cli import bench as bench_cli


def test_plain_bench_runs_the_service_bench_with_its_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[argparse.Namespace] = []
    monkeypatch.setattr(bench_cli, "run_service", lambda args, _: seen.append(args) or 0)
    args = build_parser().parse_args(["bench"])
    assert args.handler(args, None) == 0
    [run] = seen
    assert run.events == 2000
    assert run.in_flight == [16, 64]
    assert run.model_latency_ms == [0.0]
    assert run.embeddings == "server"


def test_run_takes_lists() -> None:
    args = build_parser().parse_args(
        ["bench", "run", "--in-flight", "8,32", "--model-latency-ms", "0,800"]
    )
    assert args.in_flight == [8, 32]
    assert args.model_latency_ms == [0.0, 800.0]


@pytest.mark.parametrize("argv", [["--in-flight", "0"], ["--model-latency-ms", "-5"]])
def test_bad_settings_cost_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", "run", *argv])
    assert exited.value.code == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_tools_takes_its_options() -> None:
    args = build_parser().parse_args(
        ["bench", "tools", "--events", "50", "--in-flight", "8", "--no-ledger"]
    )
    assert (args.events, args.in_flight, args.no_ledger, args.transport) == (50, 8, True, "sse")
    assert args.handler is bench_cli.run_tools


@pytest.mark.parametrize(
    "argv",
    [
        ["tools", "--events", "0"],
        ["tools", "--in-flight", "-1"],
        ["tools", "--transport", "carrier-pigeon"],
        ["citus-move", "--rate", "0"],
        ["citus-move", "--rate", "nan"],
        ["citus-move", "--settle-s", "-1"],
        ["citus-move", "--users", "0"],
    ],
)
def test_bad_options_cost_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["bench", *argv])
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert argv[1] in line  # the option named, not the command refused
