"""The SQL statements one event costs, counted as Postgres logs them (``log_statement = all``
on the test's database), through the worker's handler: at most six for a returning user's
event, in a DM and in a shared channel, so a change that adds a round trip to every event
fails here (docs/performance.md lists them).

Counted as docs/performance.md counts them: every statement the event's work sends, with the
"published" mark of the event before it (in a stream, each claim carries the previous event's
mark); not transaction control (``BEGIN``/``COMMIT``, shared by the events of a group commit),
the pool's empty check of a connection, nor a new connection's setup (``set_config``).
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from llm_bot.events.models import InternalEventV2
from llm_bot_tools.local.embedded_postgres import EmbeddedPostgres
from llm_bot_tools.local.prompt_events import prompt_event

from ...support.memory_bus import MemoryBus

pytestmark = pytest.mark.integration

MAX_STATEMENTS = 6
# A line of the server's log: its prefix (time, pid), level and message; the lines of a
# statement after its first follow without a prefix.
PREFIXED = re.compile(r"^\d{4}-\d\d-\d\d \S+ \S+ \[\d+\] (\w+):  (.*)$")
STATEMENT = re.compile(r"^(?:statement|execute [^:]*): ?(.*)$")
NOT_PER_EVENT = re.compile(r"^(BEGIN|COMMIT|SELECT set_config\('statement_timeout'.*)?$")


def logged_statements(log: Path, offset: int) -> list[str]:
    """Each statement logged after ``offset`` bytes of the server's log, on one line."""
    text = log.read_bytes()[offset:].decode(errors="replace")
    found: list[list[str]] = []
    current: list[str] | None = None
    for line in text.splitlines():
        prefixed = PREFIXED.match(line)
        if prefixed is None:
            if current is not None:
                current.append(line.strip())
            continue
        level, message = prefixed.groups()
        statement = STATEMENT.match(message) if level == "LOG" else None
        current = [statement.group(1).strip()] if statement else None
        if current is not None:
            found.append(current)
    joined = (" ".join(part for part in lines if part) for lines in found)
    return [statement for statement in joined if not NOT_PER_EVENT.match(statement)]


def event_of(bus: MemoryBus, user: str, text: str, *, direct: bool) -> InternalEventV2:
    event = prompt_event(text, user=user, thread="lobby", egress_topic=bus.egress_topic)
    if direct:
        event.egress.type = "dm"
    return event


@pytest.mark.not_on_citus("counts the statements in the embedded server's own log")
@pytest.mark.parametrize("direct", [True, False], ids=["dm", "shared-channel"])
async def test_a_returning_users_event_costs_at_most_six_statements(
    bus: MemoryBus, unique_name: str, embedded_postgres: EmbeddedPostgres, direct: bool
) -> None:
    with psycopg.connect(embedded_postgres.url, autocommit=True) as admin:
        admin.execute(
            sql.SQL("ALTER DATABASE {} SET log_statement = 'all'").format(
                sql.Identifier(unique_name)
            )
        )
    log = embedded_postgres.data_dir / "log"
    egress = bus.tap(bus.egress_topic)
    user = f"ada-{unique_name}"
    # Leases renewed no sooner than in 30 s: a renewal is the worker's, not the event's.
    async with bus.serving(bus.settings(LLM_BOT_CLAIM_LEASE_S="120")):
        bus.publish_event(event_of(bus, user, "hello, I like sailing", direct=direct))
        await egress.take(1)
        await bus.settled()
        offset = log.stat().st_size
        bus.publish_event(event_of(bus, user, "what do I like doing?", direct=direct))
        (answer,) = await egress.take(1)
        await bus.settled()
        statements = logged_statements(log, offset)

    assert b"echo: what do I like doing?" in answer.data
    listing = "\n".join(statement[:100] for statement in statements)
    assert 0 < len(statements) <= MAX_STATEMENTS, f"{len(statements)} statements:\n{listing}"
