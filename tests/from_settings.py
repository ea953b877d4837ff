"""What the service builds from settings, built the same way for tests: from the default
settings (option defaults live only in ``Settings``), with the fields a test varies replaced."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llm_bot.graph.assembly import context_from_settings
from llm_bot.graph.state import ChatModel, GraphContext
from llm_bot.memory.context import ContextLimits
from llm_bot.settings import Settings, load_settings


def graph_context(model: ChatModel, **fields: Any) -> GraphContext:
    """The worker's run context for ``model``, with ``fields`` in place of the settings'."""
    return replace(context_from_settings(load_settings(), model), **fields)


def context_limits(**fields: Any) -> ContextLimits:
    return replace(ContextLimits.from_settings(load_settings()), **fields)


def settings_for(database_url: str, **overrides: Any) -> Settings:
    """The default settings on ``database_url``, with ``overrides`` (by variable name)."""
    return load_settings(DATABASE_URL=database_url, **overrides)
