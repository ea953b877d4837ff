"""``llm-bot bench tools``: what one platform-tool round adds to an event, in time and CPU.

Events are answered in this process as the worker answers them (:class:`Answerer`, the graph
and context from the settings, a deadline), against the local model server and a real MCP
server built with the SDK behind the gateway's token check (:mod:`llm_bot_tools.local.
mcp_server`), reached through the worker's gateway client over HTTP + SSE. Three cases, each
offered the same tools:

- ``no tool``: the model answers at once (one model call);
- ``one tool``: the model calls ``echo`` once, then answers (one tool call, two model calls);
- ``one tool, ledger``: the same, with the worker's Postgres ledger, whose two short
  transactions record the call before and after it is sent.

No memory is read or written: the difference between the cases is the tool round alone.
``cpu_ms`` is the process's CPU per event, the servers' threads included; ``loop_cpu_ms`` the
event loop thread's (``time.thread_time``), which is the worker's share: the model server and
the MCP server each serve from threads of their own. Postgres runs in its own processes and
is in neither.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass

import uvloop

from llm_bot.answer.unit import Answerer
from llm_bot.db.migrate import migrate
from llm_bot.db.pools import open_pool
from llm_bot.events.inbound import inbound_of
from llm_bot.graph.assembly import context_from_settings, graph_from_settings
from llm_bot.llm.client import ModelClient
from llm_bot.platform_tools.calls import ToolLedger
from llm_bot.platform_tools.client import McpClient, gateway_client
from llm_bot.platform_tools.ledger import PostgresToolLedger
from llm_bot.platform_tools.servers import Transport
from llm_bot.settings import Settings, load_settings
from llm_bot_tools.bench.load import Progress, percentiles_ms
from llm_bot_tools.local.mcp_server import LocalToolServer
from llm_bot_tools.local.openai_server import LocalModelServer
from llm_bot_tools.local.prompt_events import prompt_event
from llm_bot_tools.local.scratch_schemas import scratch_schema

TOKEN = "bench-gateway-token"  # noqa: S105 (a loopback server's, made up here)
WARM_UP = 20
CONNECT_WAIT_S = 30.0
DEADLINE_S = 30.0
USERS = 10
PLAIN = "what time is it where you are?"
TOOL_CUE = '[[tool:mcp_echo {"text": "hello"}]] '


@dataclass(frozen=True)
class CaseReport:
    case: str
    events: int
    in_flight: int
    p50_ms: float  # wall time of one event
    p95_ms: float
    cpu_ms: float  # per event, the whole process
    loop_cpu_ms: float  # per event, the event loop's thread: the worker's share
    model_calls: float  # per event, as the model server saw them
    tool_calls: float  # per event, as the MCP server saw them

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class RoundCost:
    """What the tool case costs beyond the case without one: the cost of one tool round."""

    rounds: str  # e.g. "one tool - no tool"
    p50_ms: float
    p95_ms: float
    cpu_ms: float
    loop_cpu_ms: float

    @classmethod
    def between(cls, without: CaseReport, with_tool: CaseReport) -> RoundCost:
        return cls(
            f"{with_tool.case} - {without.case}",
            with_tool.p50_ms - without.p50_ms,
            with_tool.p95_ms - without.p95_ms,
            with_tool.cpu_ms - without.cpu_ms,
            with_tool.loop_cpu_ms - without.loop_cpu_ms,
        )

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class ToolsReport:
    cases: list[CaseReport]
    rounds: list[RoundCost]

    def as_dict(self) -> dict[str, object]:
        return {
            "cases": [c.as_dict() for c in self.cases],
            "rounds": [r.as_dict() for r in self.rounds],
        }


def run_tools_bench(
    events: int,
    in_flight: int,
    transport: Transport,
    database_url: str | None,
    progress: Progress,
) -> ToolsReport:
    """Each case for ``events`` events, ``in_flight`` at a time, after a warm-up; the ledger
    case only with ``database_url`` (in a scratch schema there, dropped afterwards)."""
    with LocalModelServer() as model, LocalToolServer(TOKEN, transport) as tools:
        bench = _Bench(model, tools, events, in_flight, progress)
        cases = uvloop.run(bench.cases(database_url))
    without = cases[0]
    return ToolsReport(cases, [RoundCost.between(without, case) for case in cases[1:]])


class _Bench:
    def __init__(
        self,
        model: LocalModelServer,
        tools: LocalToolServer,
        events: int,
        in_flight: int,
        progress: Progress,
    ) -> None:
        self.model, self.tools, self.progress = model, tools, progress
        self.events, self.in_flight = events, in_flight
        self.settings = self._settings()

    def _settings(self, **more: str) -> Settings:
        return load_settings(
            OPENAI_BASE_URL=self.model.base_url,
            OPENAI_API_KEY="local-test-key",
            MCP_GATEWAY_URL=self.tools.url,
            MCP_AUTH_TOKEN=TOKEN,
            MCP_GATEWAY_TRANSPORT=self.tools.transport,
            LLM_BOT_TOOLS_ALLOW="mcp:*",
            **more,
        )

    async def cases(self, database_url: str | None) -> list[CaseReport]:
        model = ModelClient.from_settings(self.settings)
        async with self._gateway() as gateway:
            try:
                cases = [
                    await self.measure("no tool", PLAIN, self._answerer(model, gateway)),
                    await self.measure(
                        "one tool", TOOL_CUE + PLAIN, self._answerer(model, gateway)
                    ),
                ]
                if database_url is not None:
                    async with self._ledger(database_url) as ledger:
                        answerer = self._answerer(model, gateway, ledger)
                        cases.append(
                            await self.measure("one tool, ledger", TOOL_CUE + PLAIN, answerer)
                        )
            finally:
                await model.close()
        return cases

    @asynccontextmanager
    async def _gateway(self) -> AsyncIterator[McpClient]:
        gateway = gateway_client(self.settings)
        if gateway is None:
            raise RuntimeError("MCP_GATEWAY_URL is set, yet there is no gateway client")
        gateway.start()
        try:
            await gateway.wait_until(lambda c: "echo" in c.tools, CONNECT_WAIT_S)
            yield gateway
        finally:
            await gateway.aclose()

    @asynccontextmanager
    async def _ledger(self, database_url: str) -> AsyncIterator[ToolLedger]:
        async with scratch_schema(database_url, "bench_tools") as url:
            await asyncio.to_thread(migrate, url)
            settings = self._settings(DATABASE_URL=url)
            async with open_pool(settings, "ledger") as pool:
                yield PostgresToolLedger.from_settings(pool, settings)

    def _answerer(
        self, model: ModelClient, gateway: McpClient, ledger: ToolLedger | None = None
    ) -> Answerer:
        context = context_from_settings(self.settings, model, gateway=gateway, ledger=ledger)
        return Answerer(graph_from_settings(self.settings), context)

    async def measure(self, case: str, text: str, answerer: Answerer) -> CaseReport:
        await self._answer_all(answerer, text, WARM_UP)
        requests, calls = len(self.model.requests), self.tools.calls
        cpu, loop_cpu = time.process_time(), time.thread_time()
        walls = await self._answer_all(answerer, text, self.events)
        cpu, loop_cpu = time.process_time() - cpu, time.thread_time() - loop_cpu
        p50, p95, _ = percentiles_ms(walls)
        report = CaseReport(
            case,
            self.events,
            self.in_flight,
            p50,
            p95,
            cpu * 1000 / self.events,
            loop_cpu * 1000 / self.events,
            (len(self.model.requests) - requests) / self.events,
            (self.tools.calls - calls) / self.events,
        )
        self.progress(
            f"{case}: p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
            f"{report.cpu_ms:.2f} ms CPU ({report.loop_cpu_ms:.2f} on the loop) per event"
        )
        return report

    async def _answer_all(self, answerer: Answerer, text: str, count: int) -> list[float]:
        """``count`` events, ``in_flight`` at a time; each one's wall time in ms."""
        walls: list[float] = []

        async def answer_share(share: int, offset: int) -> None:
            for i in range(share):
                user = f"bench-{(offset + i) % USERS}"
                event = prompt_event(text, user=user, thread="room", egress_topic="bench.egress")
                began = time.perf_counter()
                answer = await answerer.answer(inbound_of(event, deadline_s=DEADLINE_S))
                walls.append((time.perf_counter() - began) * 1000)
                if answer.outcome != "OK":
                    raise RuntimeError(f"an event ended {answer.outcome}, not OK")

        lanes = min(self.in_flight, count)
        shares = [count // lanes + (i < count % lanes) for i in range(lanes)]
        await asyncio.gather(*(answer_share(share, i) for i, share in enumerate(shares)))
        return walls
