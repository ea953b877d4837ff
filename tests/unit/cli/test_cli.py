"""The command line: one-line errors with exit code 2, and the schema command."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llm_bot.cli import main
from llm_bot.cli.failures import masked, secrets_of
from llm_bot.cli.parser import build_parser
from llm_bot.settings import Settings, load_settings

ROOT = str(Path(__file__).resolve().parents[3])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["bogus"], "invalid choice: 'bogus'"),
        (["schema", "--model", "Nope"], "invalid choice: 'Nope'"),
        (["dev", "--unknown"], "unrecognized arguments: --unknown"),
    ],
)
def test_bad_arguments_cost_one_line_and_exit_2(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert expected in lines[0]


# A number a command would take and then fail on, or act on silently, after its setup: NaN and
# infinity (which pass a "below the minimum" check), a negative count, a count past
# PostgreSQL's integer, a wait longer than any clock takes.
BAD_NUMBERS = [
    ["check", "--timeout", "nan"],
    ["check", "--timeout", "-1"],
    ["check", "--timeout", "0"],
    ["check", "--timeout", "1e12"],
    ["send", "hi", "--user", "u", "--thread", "t", "--timeout", "nan"],
    ["send", "hi", "--user", "u", "--thread", "t", "--timeout", "inf"],
    ["memories", "list", "--user", "u", "--limit", "-1"],
    ["memories", "list", "--user", "u", "--limit", "99999999999999999999"],
    ["memories", "search", "q", "--user", "u", "--limit", "0"],
    ["personalities", "get", "p", "--version", "3000000000"],
    ["eval", "retrieval", "--k", "0"],
    ["eval", "retrieval", "--k", "10001"],
    ["bench", "run", "--model-latency-ms", "nan"],
    ["bench", "run", "--model-latency-ms", "0,inf"],
    ["bench", "run", "--in-flight", "16,99999999999"],
    ["bench", "capacity", "--model-latency-ms", "nan"],
    ["bench", "capacity", "--model-latency-ms", "inf"],
    ["bench", "capacity", "--history-turns", "-1"],
    ["bench", "capacity", "--dimensions", "384,16001"],
    ["bench", "retrieval", "--history-turns", "-5"],
    ["bench", "retrieval", "--depth-turns", "-5"],
    ["bench", "retrieval", "--depth-memories", "-1"],
    ["bench", "citus-move", "--settle-s", "1e300"],
]


def refusal(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the parser refuses ``argv`` with, exit 2, as the arguments are read."""
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    return line


@pytest.mark.parametrize("argv", BAD_NUMBERS)
def test_a_number_out_of_its_range_is_refused_as_the_arguments_are_read(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    line = refusal(argv, capsys)
    assert f"argument {argv[-2]}:" in line


def test_numbers_in_their_range_are_taken() -> None:
    args = build_parser().parse_args(["check", "--timeout", "0.5"])
    assert args.timeout == 0.5
    args = build_parser().parse_args(["bench", "retrieval", "--history-turns", "0"])
    assert args.history_turns == 0
    args = build_parser().parse_args(["bench", "run", "--model-latency-ms", "0,800.5"])
    assert args.model_latency_ms == [0.0, 800.5]


# What `send` would build an event of and then fail to send, or send with an identity no user
# has: an empty sender or thread, bytes that are not UTF-8 (a terminal in another encoding;
# they reach Python as lone surrogates), a reply subscription Pub/Sub refuses as a name.
SEND = ["send", "hi", "--user", "u", "--thread", "t"]
BAD_SEND_ARGUMENTS = [
    (["send", "hi", "--user", "", "--thread", "t"], "argument --user: must not be empty"),
    (["send", "hi", "--user", "u", "--thread", ""], "argument --thread: must not be empty"),
    (["send", "hi", "--user", "\udcff", "--thread", "t"], "argument --user: not valid UTF-8"),
    (["send", "hi", "--user", "u", "--thread", "\udcff"], "argument --thread: not valid UTF-8"),
    (["send", "\udcff", "--user", "u", "--thread", "t"], "argument text: not valid UTF-8"),
    ([*SEND, "--reply-subscription", ""], "argument --reply-subscription: not a Pub/Sub"),
    ([*SEND, "--reply-subscription", "no such/sub"], "argument --reply-subscription: not a"),
    ([*SEND, "--reply-subscription", "projects/p/subscriptions/s"], "not a Pub/Sub"),
]


@pytest.mark.parametrize(("argv", "expected"), BAD_SEND_ARGUMENTS)
def test_what_send_cannot_send_is_refused_as_the_arguments_are_read(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = refusal(argv, capsys)
    assert expected in line


def test_send_takes_a_subscription_id_and_an_empty_prompt() -> None:
    args = build_parser().parse_args(["send", "", "--user", "u", "--thread", "t"])
    assert (args.text, args.reply_subscription) == ("", "internal.egress.v1-tap")
    args = build_parser().parse_args([*SEND, "--reply-subscription", "answers.v1-tap"])
    assert args.reply_subscription == "answers.v1-tap"


# Text arguments the service's commands send to the database or the network: bytes that are
# not UTF-8 reach Python as lone surrogates, which no query can send.
NOT_UTF8 = "\udcff"
NON_UTF8_ARGUMENTS = [
    ["memories", "put", NOT_UTF8, "--user", "u"],
    ["memories", "put", "hi", "--user", "u", "--metadata", f'{{"a": "{NOT_UTF8}"}}'],
    ["memories", "search", NOT_UTF8, "--user", "u"],
    ["memories", "get", NOT_UTF8, "--user", "u"],
    ["memories", "delete", NOT_UTF8, "--user", "u"],
    ["personalities", "put", NOT_UTF8, "--text", "x"],
    ["personalities", "get", NOT_UTF8],
    ["personalities", "delete", NOT_UTF8],
    ["personalities", "list", "--name", NOT_UTF8],
    ["check", "--host", NOT_UTF8],
]


@pytest.mark.parametrize("argv", NON_UTF8_ARGUMENTS)
def test_an_argument_that_is_not_utf8_is_refused_as_the_arguments_are_read(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    line = refusal(argv, capsys)
    assert "not valid UTF-8" in line


# Each argument a command writes its result to, with a path that cannot take it: {missing} is
# a directory that does not exist, {file} an existing file, {folder} an existing directory.
UNWRITABLE_OUTPUTS = [
    (["export-user", "u", "--output", "{missing}/u.json"], "no directory "),
    (["export-user", "u", "--output", "{folder}"], "is a directory, not a file"),
    (["eval", "retrieval", "--plot", "{missing}/r.png"], "no directory "),
    (["eval", "calibrate", "--plot", "{file}/c.png"], "no directory "),
    (["eval", "attribution", "--plot", "{folder}"], "is a directory, not a file"),
    (["eval", "standin-summaries", "--out", "{file}/s.jsonl"], "is a file, not a directory"),
    (["bench", "run", "--plot", "{missing}/b.png"], "no directory "),
    (["bench", "run", "--profile", "{file}/profiles"], "is a file, not a directory"),
    (["bench", "run", "--data-dir", "{file}"], "is a file, not a directory"),
    (["bench", "floor", "--data-dir", "{file}/deeper/still"], "is a file, not a directory"),
    (["bench", "retrieval", "--depth-plot", "{missing}/d.png"], "no directory "),
    (["bench", "compare", "--plot", "{missing}/t.png"], "no directory "),
    (["bench", "capacity", "--plot", "{folder}"], "is a directory, not a file"),
    (["bench", "citus-move", "--data-dir", "{file}"], "is a file, not a directory"),
    (["dev", "--data-dir", "{file}"], "is a file, not a directory"),
]


@pytest.mark.parametrize(("argv", "expected"), UNWRITABLE_OUTPUTS)
def test_an_output_path_that_cannot_be_written_is_refused_as_the_arguments_are_read(
    argv: list[str], expected: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "a-file"
    file.write_text("")
    paths = {"missing": tmp_path / "none", "file": file, "folder": tmp_path}
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([part.format(**paths) for part in argv])
    assert exited.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1
    assert expected in lines[0]


def test_output_paths_that_can_be_written_are_taken(tmp_path: Path) -> None:
    args = build_parser().parse_args(
        ["bench", "run", "--plot", str(tmp_path / "b.png"), "--profile", str(tmp_path / "p/q")]
    )
    assert (args.plot, args.profile) == (tmp_path / "b.png", tmp_path / "p" / "q")
    args = build_parser().parse_args(["eval", "standin-summaries", "--out", str(tmp_path / "n/s")])
    assert args.out == tmp_path / "n" / "s"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in any directory")
def test_a_directory_without_write_permission_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(SystemExit):
            build_parser().parse_args(["bench", "run", "--plot", str(tmp_path / "b.png")])
    finally:
        tmp_path.chmod(0o700)
    assert f"cannot write in {tmp_path}" in capsys.readouterr().err


def test_migrate_without_a_database_says_what_to_set(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    assert main(["migrate"]) == 2
    assert capsys.readouterr().err.startswith("llm-bot: error: DATABASE_URL is not set")


def test_schema_prints_both_wire_models(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    schemas = json.loads(capsys.readouterr().out)
    assert set(schemas) == {"InternalEventV2", "CandidateV1"}
    event = schemas["InternalEventV2"]
    assert {"v", "correlationId", "ingress", "identity", "egress", "routing", "type"} <= set(
        event["required"]
    )
    assert "correlationId" in event["properties"]
    # Read tolerantly (rules may set any status, or none); ours are "proposed" and "selected".
    assert {"type": "string"} in schemas["CandidateV1"]["properties"]["status"]["anyOf"]
    assert set(schemas["CandidateV1"]["required"]) == {"id", "kind"}


def test_send_local_runs_the_graph_and_prints_the_candidate(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "LLM_BOT_SYSTEM_PROMPT"):
        monkeypatch.delenv(name, raising=False)
    assert main(["send", "what is new?", "--user", "u-1", "--thread", "room", "--local"]) == 0
    candidate = json.loads(capsys.readouterr().out)
    assert candidate["text"] == "echo: what is new?"
    assert (candidate["source"], candidate["status"], candidate["priority"]) == (
        "llm-bot",
        "proposed",
        10,
    )
    assert candidate["id"].startswith("cand-")


def test_the_database_password_is_masked_as_written_and_decoded() -> None:
    settings = load_settings(
        DATABASE_URL="postgresql://bot:pa%40ss%20word@db.internal/app", OPENAI_API_KEY="sk-key"
    )
    line = "connect with pa%40ss%20word; the server saw 'pa@ss word'; key sk-key"
    assert masked(line, secrets_of(settings)) == (
        "connect with [REDACTED]; the server saw '[REDACTED]'; key [REDACTED]"
    )


def test_the_gateways_token_and_address_are_masked() -> None:
    settings = load_settings(
        MCP_AUTH_TOKEN="gw-secret-token",
        MCP_GATEWAY_URL="http://tool-gateway.internal:3000/sse?token=q-secret",
    )
    line = (
        "GET http://tool-gateway.internal:3000/sse?token=q-secret 401; x-mcp-token gw-secret-token;"
        " retried with token=q-secret"
    )
    assert masked(line, secrets_of(settings)) == (
        "GET [REDACTED] 401; x-mcp-token [REDACTED]; retried with [REDACTED]"
    )


def test_a_bad_setting_is_answered_without_loading_the_service() -> None:
    """Operators and platforms run ``llm-bot`` often (a health command, a typo): parsing and
    checking the settings must not pay for the model client, LangGraph or the memory store."""
    probe = (
        "import sys\n"
        "from llm_bot.cli import main\n"
        "assert main(['memories', 'list', '--user', 'u']) == 2\n"
        "heavy = ('openai', 'langgraph', 'llm_bot.memory.store')\n"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    environment = {**os.environ, "DATABASE_URL": "mysql://bot@db/llm_bot", "PYTHONPATH": ROOT}
    result = subprocess.run(
        [sys.executable, "-c", probe], env=environment, capture_output=True, text=True, timeout=60
    )
    assert "configuration error: DATABASE_URL" in result.stderr, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("blank", [None, "", " \n"])
def test_the_console_without_a_token_or_an_iap_audience_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], blank: str | None
) -> None:
    """It would answer every request 401: one line saying what to set instead. A blank value
    is unset."""
    monkeypatch.setenv("DATABASE_URL", "postgresql://u@localhost/db")
    for name in ("LLM_BOT_CONSOLE_TOKEN", "LLM_BOT_CONSOLE_IAP_AUDIENCE"):
        if blank is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, blank)
    assert main(["console"]) == 2
    error = capsys.readouterr().err
    assert "LLM_BOT_CONSOLE_TOKEN" in error
    assert "LLM_BOT_CONSOLE_IAP_AUDIENCE" in error


def test_the_console_listens_on_loopback_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("LLM_BOT_CONSOLE_HOST", raising=False)
    assert Settings(_env_file=None).console_host == "127.0.0.1"


def test_whitespace_around_the_consoles_token_or_audience_is_no_part_of_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A secret stored with its trailing newline: kept, no offered token would ever match it
    and every request would be answered 401."""
    monkeypatch.setenv("LLM_BOT_CONSOLE_TOKEN", " a-token\n")
    monkeypatch.setenv("LLM_BOT_CONSOLE_IAP_AUDIENCE", "/projects/1/apps/p\n")
    settings = Settings(_env_file=None)
    assert settings.console_token is not None
    assert settings.console_token.get_secret_value() == "a-token"
    assert settings.console_iap_audience == "/projects/1/apps/p"


def test_a_console_that_cannot_listen_says_so_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Its address in use: one line naming it and exit 1, before anything else starts (not
    uvicorn's log lines and its exit code 3)."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        monkeypatch.setenv("DATABASE_URL", "postgresql://u@127.0.0.1:1/db")
        monkeypatch.setenv("LLM_BOT_CONSOLE_TOKEN", "a-token")
        monkeypatch.setenv("LLM_BOT_CONSOLE_PORT", str(port))
        monkeypatch.delenv("LLM_BOT_CONSOLE_HOST", raising=False)
        assert main(["console"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count("\n") == 1
    assert f"cannot listen on 127.0.0.1:{port}" in err, err


@pytest.mark.parametrize(
    ("value", "host"), [("", "127.0.0.1"), (" ", "127.0.0.1"), (" ::1\n", "::1")]
)
def test_a_blank_console_host_is_loopback_and_whitespace_no_part_of_one(
    monkeypatch: pytest.MonkeyPatch, value: str, host: str
) -> None:
    """uvicorn binds an empty host to every interface (0.0.0.0 and ::): blank is unset."""
    monkeypatch.setenv("LLM_BOT_CONSOLE_HOST", value)
    assert Settings(_env_file=None).console_host == host
