"""A platform tool: one the model may call that acts outside llm-bot's own memory (a built-in
or a tool of the tool-gateway), and who asks for a call of it.

BitBrat's llm-bot keeps every such tool in one registry (``src/services/llm-bot/tools/
registry.ts``) as a ``BitBratTool``: an id (``basic:get_current_time``, ``mcp:create_schedule``),
required roles, scopes, a description and a JSON schema. :class:`PlatformTool` is that, with
the model-facing name and schema already made
(:func:`llm_bot.platform_tools.servers.model_name`), and whether a call may change something
outside (the once-only ledger cares).

The requesting user (:class:`Caller`) comes from the event, as BitBrat reads it
(``processor.ts:747-748``): roles from ``identity.user.roles``, else
``identity.external.roles``; the id from ``identity.user.id``, else ``identity.external.id``.
The model never names the caller, so it cannot borrow another user's roles; nor the egress and
channel a call may act on (:mod:`llm_bot.platform_tools.subjects` sets those arguments from here).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from llm_bot.events.models import Egress, InternalEventV2
from llm_bot.llm.messages import ToolSpec
from llm_bot.platform_tools.calls import CallKey, ToolOutcome

# The fields of an egress that BitBrat's agent.sendProgressUpdate accepts (tool-gateway.ts:55-65).
EGRESS_FIELDS = ("destination", "connector", "channel", "type")
# Those fields in the order the event's egress has them, as its dump would give them: a string
# each, read directly for every event rather than through a dump with an ``include`` filter.
_EGRESS_ORDER = tuple(name for name in Egress.model_fields if name in EGRESS_FIELDS)


@dataclass(frozen=True)
class Caller:
    """The user an event's tool calls act for (what each call's ``_meta`` carries), and where
    the event is answered: its egress and channel."""

    user_id: str | None
    roles: tuple[str, ...]
    egress: Mapping[str, str] | None = None
    channel: str | None = None


def caller_of(event: InternalEventV2) -> Caller:
    """BitBrat's ``userRoles`` and ``userId`` of an event (JavaScript's ``||``: an empty role
    list on ``identity.user`` is still the user's, as ``[]`` is truthy there)."""
    user, external = event.identity.user, event.identity.external
    roles = user.roles if user is not None and user.roles is not None else external.roles
    egress = {
        name: value for name in _EGRESS_ORDER if (value := getattr(event.egress, name)) is not None
    }
    channel = event.egress.channel or event.ingress.channel
    user_id = user.id if user is not None else external.id
    return Caller(user_id, tuple(roles or ()), egress, channel)


@dataclass(frozen=True)
class ToolRequest:
    """One call as the runner makes it: for whom, its key in the event's run, its time limit,
    and whether that limit is the whole ``LLM_BOT_TOOL_TIMEOUT_MS`` (a call cut short by the
    event's deadline that times out says nothing against its server, ``breaker.py``)."""

    caller: Caller
    key: CallKey
    timeout_s: float
    full_time: bool = True


class PlatformTool(Protocol):
    """What the graph's runner offers and calls (:mod:`llm_bot.graph.tool_round`)."""

    @property
    def tool_id(self) -> str:
        """BitBrat's id: what filters, the allowlist and ``errors[]`` name."""

    @property
    def spec(self) -> ToolSpec:
        """What the model is offered: ``name`` is ``model_name(tool_id)``."""

    @property
    def required_roles(self) -> tuple[str, ...]:
        """Any one of them lets a user call it; none: everyone may."""

    @property
    def scopes(self) -> tuple[str, ...]:
        """The ``metadata.scope`` values it serves; none: every scope (a global tool)."""

    @property
    def side_effects(self) -> bool:
        """Whether a call may change something outside llm-bot."""

    @property
    def display_name(self) -> str: ...

    @property
    def source(self) -> str:
        """BitBrat's ``source``: ``internal`` (built-in) or ``mcp``."""

    def bind(self, arguments: Mapping[str, Any], caller: Caller) -> dict[str, Any] | str:
        """The arguments a call sends for ``caller``
        (:func:`llm_bot.platform_tools.subjects.pinned`), or why it cannot be made for them."""

    async def call(self, arguments: Mapping[str, Any], request: ToolRequest) -> ToolOutcome:
        """The call's outcome with ``arguments`` as :meth:`bind` made them; a failure is an
        outcome with ``is_error``, never an exception."""


def error_source(tool: PlatformTool) -> str:
    """The ``source`` of the ``errors[]`` entry a failed call adds, as BitBrat writes it
    (processor.ts:797): ``mcp:${tool.id}`` for an MCP tool, whose id already starts ``mcp:``
    (so ``mcp:mcp:create_schedule``), the tool's source (``internal``) for a built-in."""
    return f"mcp:{tool.tool_id}" if tool.source == "mcp" else tool.source


def roles_allow(required: Sequence[str], roles: Sequence[str]) -> bool:
    """BitBrat's rule (processor.ts:761-767): no required role, or any one of them held."""
    return not required or any(role in roles for role in required)


def scope_allows(scopes: Sequence[str], requested: str | None) -> bool:
    """BitBrat's tier-2 filter (processor.ts:770-778): without a requested scope, or for a
    tool with no scopes, every tool passes; else the tool must list the scope."""
    return not requested or not scopes or requested in scopes


def requested_scope(event: InternalEventV2) -> str | None:
    """``metadata.scope`` when it is a non-empty text (anything else requests no scope)."""
    scope = (event.metadata or {}).get("scope")
    return scope if isinstance(scope, str) and scope else None
