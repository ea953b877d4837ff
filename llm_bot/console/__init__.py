"""``llm-bot console``: the operator's read-only view of what the service holds about a user.

A process of its own (never the worker's: IAP in front of the worker's service would break its
Pub/Sub use), server-rendered with no script: find a user; their memories with earlier versions
and where each was learned, notes and history; their recent events; and "try a recall", the
worker's own retrieval and context selection run for a query. Every page showing a user's data
records the view first (:mod:`llm_bot.db.console_views`), after every query string was checked
(:mod:`llm_bot.console.inputs`). Authentication is a bearer token or
Google IAP's signed header (:mod:`llm_bot.console.auth`); every stored text is hostile and is
shown inert (:mod:`llm_bot.console.display`).
"""
