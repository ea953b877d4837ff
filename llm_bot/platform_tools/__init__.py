"""Tools from MCP servers and the platform tools the graph offers: the platform's tool-gateway
(HTTP + SSE, as BitBrat serves it), any server over Streamable HTTP, and BitBrat's built-ins.

``servers.py`` says which servers and what they are sent, with what BitBrat's llm-bot does
(file:line); ``client.py`` keeps one server's connection up and calls its tools;
``platform.py`` is a platform tool and its caller; ``gateway.py`` makes a listed tool one;
``builtins.py`` holds BitBrat's built-ins; ``catalog.py`` the tools there are for an event
(the built-ins and the gateway's tools ``LLM_BOT_TOOLS_ALLOW`` lets through); ``calls.py`` a
call's key and outcome; ``ledger.py`` records each call so that a retried event does not send
it again; ``client.py`` calls through each server's circuit breaker (``breaker.py``).

Where it stands: the client connects, lists, re-lists on ``notifications/tools/list_changed``,
reconnects with backoff and calls a tool with ``_meta`` and a timeout
(tests/integration/platform_tools/test_mcp_client.py, against a real SDK server). The worker
keeps the gateway's connection, reports it in ``/ready``'s detail and ``llmbot_mcp_connected``
(tests/integration/worker/test_tool_gateway.py), and its graph offers the platform tools
through BitBrat's role, scope and behaviour filters and the allowlist, calls them for the
requesting user (roles checked here too) within the tool timeout and the event's deadline, and
records a failure in ``errors[]`` (llm_bot/graph/offering.py, llm_bot/graph/tool_round.py;
tests/integration/platform_tools/test_offered_tools.py). The graph calls every platform tool through
its context's ledger: ``PostgresToolLedger`` in the worker, ``NoLedger`` without a database.
"""
