"""Tools from MCP servers: the platform's tool-gateway (HTTP + SSE, as BitBrat serves it) and
any server over Streamable HTTP.

``servers.py`` says which servers and what they are sent, with what BitBrat's llm-bot does
(file:line); ``client.py`` keeps one server's connection up and calls its tools, through the
server's circuit breaker (``breaker.py``); ``calls.py`` names one call and its outcome, and
``ledger.py`` records each call so that a retried event does not send it again.

Where it stands: the client connects, lists, re-lists on ``notifications/tools/list_changed``,
reconnects with backoff and calls a tool with ``_meta`` and a timeout
(tests/integration/tools/test_mcp_client.py, against a real SDK server). The worker keeps the
gateway's connection and reports it in ``/ready``'s detail and ``llmbot_mcp_connected``
(tests/integration/worker/test_tool_gateway.py), but the graph offers no MCP tool yet.
Offering (filters, allowlist, roles at call time), the built-in tools and the calls' telemetry
are still to come.
"""
