"""Every ``llm-bot`` command, run as the installed console script, on bad configuration: one
line on stderr that says what is wrong, exit 2 (1 for a database that cannot be reached), no
traceback, and never the database password (stderr goes to Cloud Logging)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = Path(sys.executable).parent / "llm-bot"
PASSWORD = "Hunter2-Sekrit"

COMMANDS = {
    "run": ["run"],
    "check": ["check"],
    "migrate": ["migrate"],
    "schema": ["schema"],
    "memories": ["memories", "list", "--user", "u"],
    "personalities": ["personalities", "list"],
    "maintain": ["maintain"],
    "forget-user": ["forget-user", "u"],
    "forget-thread": ["forget-thread", "t"],
    "export-user": ["export-user", "u"],
    "reembed": ["reembed"],
    "eval": ["eval", "calibrate"],
    "bench": ["bench", "retrieval"],
    "send": ["send", "hi", "--user", "u", "--thread", "t", "--timeout", "1"],
    "dev": ["dev", "--services-only"],
}
# Commands that connect to DATABASE_URL at once (and "memories", which loads the local model
# too: test_a_database_that_refuses_fails_before_the_local_model_loads).
DATABASE_COMMANDS = ("run", "migrate", "personalities", "maintain", "export-user")


def llm_bot(argv: list[str], cwd: Path, **environment: str) -> subprocess.CompletedProcess[str]:
    """The console script with only ``environment`` set (and no .env: ``cwd`` has none), on
    this checkout's service and tools."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(cwd),
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tools")]),  # this checkout
        "MEMORY_EMBEDDING_PROVIDER": "local",
        "DATABASE_CONNECT_TIMEOUT_S": "2",
        **environment,
    }
    return subprocess.run(
        [str(SCRIPT), *argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    assert PASSWORD not in output, output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("llm-bot: "), lines
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_malformed_database_url_costs_one_line_and_exit_2(command: str, tmp_path: Path) -> None:
    url = f"postgresql://bot:{PASSWORD}%zz@db.internal:5432/llm_bot"
    result = llm_bot(COMMANDS[command], tmp_path, DATABASE_URL=url)
    line = one_line(result)
    assert result.returncode == 2, line
    assert line == (
        "llm-bot: configuration error: DATABASE_URL: the password holds a % without two hex"
        " digits after it: write % as %25"
    )


@pytest.mark.parametrize(
    ("name", "value", "problem"),
    [
        ("DATABASE_URL", f"postgresql://bot:{PASSWORD} x@db/llm_bot", "holds a space"),
        ("DATABASE_URL", f"postgresql://bot:{PASSWORD}@x@db/llm_bot", "the host holds '@'"),
        ("DATABASE_URL", f"mysql://bot:{PASSWORD}@db/llm_bot", "the scheme must be"),
        ("DATABASE_URL", f"postgresql://bot:{PASSWORD}@db/llm_bot?nope=1", "'nope'"),
        ("LLM_BOT_DB_POOL_MAX", "ten", "LLM_BOT_DB_POOL_MAX: Input should be a valid integer"),
        ("PORT", "70000", "PORT: Input should be less than or equal to 65535"),
        ("LOG_LEVEL", "LOUD", "LOG_LEVEL: Input should be"),
        ("OPENAI_BASE_URL", "localhost:8080/v1", "must be an http:// or https:// URL"),
        ("MEMORY_EMBEDDING_ENDPOINT", "ftp://embeddings/v1", "must be an http:// or https://"),
        ("MCP_GATEWAY_URL", "tool-gateway:3000/sse", "must be an http:// or https:// URL"),
        ("LLM_BOT_SUBSCRIPTION", "llm bot", "must be a Pub/Sub name"),
        ("OPENAI_MODEL", " ", "must not be blank"),
    ],
)
def test_any_bad_variable_costs_one_line_and_exit_2(
    name: str, value: str, problem: str, tmp_path: Path
) -> None:
    result = llm_bot(["maintain"], tmp_path, **{name: value})
    line = one_line(result)
    assert result.returncode == 2, line
    assert line.startswith(f"llm-bot: configuration error: {name}: "), line
    assert problem in line


@pytest.fixture
def refusing_port() -> int:
    """A local port nobody listens on: connections to it are refused."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port: int = listener.getsockname()[1]
    return port


@pytest.mark.parametrize("command", DATABASE_COMMANDS)
def test_a_database_that_refuses_costs_one_line_without_the_password(
    command: str, refusing_port: int, tmp_path: Path
) -> None:
    url = f"postgresql://bot:{PASSWORD}@127.0.0.1:{refusing_port}/llm_bot"
    result = llm_bot(COMMANDS[command], tmp_path, DATABASE_URL=url, LOG_LEVEL="WARNING")
    line = one_line(result)
    assert result.returncode == 1, line
    assert line.startswith("llm-bot: database unreachable: "), line


def test_a_library_failing_on_a_bad_value_costs_one_line(tmp_path: Path) -> None:
    """A value the settings cannot judge (a host name IDNA refuses, which httpx reads when the
    client is made) fails where it is used: still one line, exit 1."""
    result = llm_bot(
        ["send", "hi", "--user", "u", "--thread", "t", "--local"],
        tmp_path,
        OPENAI_BASE_URL="http://\u2603.example/v1",
        OPENAI_API_KEY=PASSWORD,
        LOG_LEVEL="WARNING",
    )
    line = one_line(result)
    assert result.returncode == 1, line
    assert line == "llm-bot: InvalidURL: Invalid IDNA hostname: '\u2603.example'"


def test_a_database_that_refuses_fails_before_the_local_model_loads(
    refusing_port: int, tmp_path: Path
) -> None:
    """Loading the local embedding model takes seconds: a command whose database cannot be
    reached fails without paying them, in one line, exit 1 (asserted in the probe)."""
    probe = (
        "import sys\n"
        "from llm_bot.cli import main\n"
        "assert main(['memories', 'list', '--user', 'u']) == 1\n"
        "print('transformers' in sys.modules)"
    )
    url = f"postgresql://bot:{PASSWORD}@127.0.0.1:{refusing_port}/llm_bot"
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "PYTHONPATH": str(ROOT),
            "MEMORY_EMBEDDING_PROVIDER": "local",
            "DATABASE_CONNECT_TIMEOUT_S": "2",
            "DATABASE_URL": url,
        },
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert one_line(result).startswith("llm-bot: database unreachable: ")
    assert result.stdout.strip() == "False"
