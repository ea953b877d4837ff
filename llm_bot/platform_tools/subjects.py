"""Whom a platform tool's call acts for: the arguments that name a user, a channel or a
destination are set from the event, never taken from the model.

BitBrat's tools take their subject from their arguments and the gateway believes them
(0.33.3): the story engine's ``start_story``, ``get_current_scene``, ``process_action``,
``commit_scene`` and ``update_world_state`` read and write the adventure of the ``userId`` they
are given (``src/apps/story-engine-mcp.ts:124-350``), the gateway's
``agent.sendProgressUpdate`` publishes to whatever ``egress`` names
(``src/apps/tool-gateway.ts:184-199``), and the state engine reads any key or prefix, its store
holding every user's ``user.fact.<userId>.*`` (``src/apps/state-engine.ts:80-104``). A model
steered by a neighbour's words ("my id is twitch:99") would pass another user's id.

So each argument that names a subject is **pinned**: removed from the schema the model sees
(it cannot even ask) and set at call time from the event, whatever the model sent:

- ``user``: the requesting user's id, as ``_meta.userId`` carries it;
- ``egress``: the event's own egress (destination, connector, channel, type), so a progress
  message goes where the reply goes;
- ``channel``: the channel the event came from and is answered in;
- ``state_prefix``: a key prefix confined to the requester's facts, ``user.fact.<userId>.``
  followed by what the model asked within it (the model's own namespace, if it wrote it, is
  taken off first). A user id holding a ``.`` is refused: its namespace would contain
  another user's (``ada.x`` under ``ada.``);
- ``dropped``: an argument the model may not set and the call does without
  (``summarize_stream``'s ``filters``, which can name any channel).

Which arguments those are comes from :data:`KNOWN`, the platform's tools by id, and for every
other tool from its schema: a property whose name, in any case and without ``_`` or ``-``, is
one of :data:`SCHEMA_PINS` (``userId``, ``user_id``, ``USER-ID`` alike). A tool whose subject no
pin can confine (:data:`UNPINNABLE`: ``get_state`` reads any keys, ``propose_mutation`` writes
them; and any tool whose schema names a subject below its top level, inside an argument's object
or a ``$ref``'d definition, where no pin reaches) is offered only when ``LLM_BOT_TOOLS_ALLOW``
names its id exactly; a glob such as ``mcp:*`` never offers it
(:mod:`llm_bot.platform_tools.catalog`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from llm_bot.platform_tools.platform import Caller

Pin = Literal["user", "egress", "channel", "state_prefix", "dropped"]

STATE_FACTS = "user.fact."


@dataclass(frozen=True)
class Subjects:
    """What a tool's arguments may name: the pinned ones, and whether pins confine it at all."""

    pins: Mapping[str, Pin] = field(default_factory=dict)
    pinnable: bool = True


_STORY_USER: Mapping[str, Pin] = {"userId": "user"}
KNOWN: Mapping[str, Subjects] = {
    "mcp:start_story": Subjects(_STORY_USER),
    "mcp:get_current_scene": Subjects(_STORY_USER),
    "mcp:process_action": Subjects(_STORY_USER),
    "mcp:commit_scene": Subjects(_STORY_USER),
    "mcp:update_world_state": Subjects(_STORY_USER),
    "mcp:agent.sendProgressUpdate": Subjects({"egress": "egress"}),
    "mcp:get_state_prefix": Subjects({"prefix": "state_prefix"}),
    "mcp:summarize_stream": Subjects({"filters": "dropped"}),
}
UNPINNABLE = frozenset({"mcp:get_state", "mcp:propose_mutation"})
SCHEMA_PINS: Mapping[str, Pin] = {
    "userid": "user",
    "egress": "egress",
    "channel": "channel",
    "channelid": "channel",
}


def _pin_name(name: str) -> str:
    """A property's name as :data:`SCHEMA_PINS` spells it: spelling variants name one subject."""
    return name.lower().replace("_", "").replace("-", "")


def subjects_of(tool_id: str, schema: Mapping[str, Any]) -> Subjects:
    """The tool's pins: the platform's table, and any property the schema names as a subject.
    A subject the schema names below its top level cannot be pinned (:func:`_named_below`)."""
    if tool_id in UNPINNABLE:
        return Subjects(pinnable=False)
    properties = schema.get("properties")
    found = {
        name: SCHEMA_PINS[_pin_name(name)]
        for name in (properties if isinstance(properties, Mapping) else ())
        if _pin_name(name) in SCHEMA_PINS
    }
    known = KNOWN.get(tool_id, Subjects())
    pins = {**found, **known.pins}
    if _named_below(schema, pins):
        return Subjects(pinnable=False)
    return Subjects(pins)


def _named_below(schema: Mapping[str, Any], pins: Mapping[str, Pin]) -> bool:
    """Whether a subject's name is a property anywhere but at the schema's top level: inside an
    argument's object (``{"target": {"userId": ...}}``), a ``$defs`` entry a ``$ref`` names, an
    ``anyOf`` branch. A pin sets a top-level argument only, so the model would name whom such a
    call is for. The arguments pinned whole (an ``egress`` and its ``channel``) are not looked
    into: whatever they hold is the event's."""
    properties = schema.get("properties")
    stack: list[object] = [value for key, value in schema.items() if key != "properties"]
    if isinstance(properties, Mapping):
        stack += [value for name, value in properties.items() if name not in pins]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            named = node.get("properties")
            if isinstance(named, Mapping) and any(
                isinstance(name, str) and _pin_name(name) in SCHEMA_PINS for name in named
            ):
                return True
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def model_schema(schema: Mapping[str, Any], subjects: Subjects) -> dict[str, Any]:
    """``schema`` without the pinned properties, in ``properties`` and in ``required``."""
    if not subjects.pins:
        return dict(schema)
    shown = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, Mapping):
        shown["properties"] = {k: v for k, v in properties.items() if k not in subjects.pins}
    required = schema.get("required")
    if isinstance(required, list):
        shown["required"] = [name for name in required if name not in subjects.pins]
    return shown


def pinned(
    arguments: Mapping[str, Any], subjects: Subjects, caller: Caller
) -> dict[str, Any] | str:
    """The arguments to send: the model's, with every pinned one set from the event (or left
    out when dropped); the reason, as a text, when the event cannot say it."""
    sent = {k: v for k, v in arguments.items() if k not in subjects.pins}
    for name, pin in subjects.pins.items():
        value = _value(pin, caller, arguments.get(name))
        if isinstance(value, _Refusal):
            return value.reason
        if value is not None:
            sent[name] = value
    return sent


@dataclass(frozen=True)
class _Refusal:
    reason: str


def _value(pin: Pin, caller: Caller, asked: object) -> object:
    if pin == "dropped":
        return None
    if pin == "egress":
        return dict(caller.egress) if caller.egress else _Refusal("the message has no egress")
    if pin == "channel":
        return caller.channel or _Refusal("the message has no channel")
    if not caller.user_id:
        return _Refusal("the message names no user")
    if pin == "user":
        return caller.user_id
    return _state_prefix(caller.user_id, asked)


def _state_prefix(user_id: str, asked: object) -> object:
    if "." in user_id:
        return _Refusal("this user's facts cannot be told apart from another user's by prefix")
    namespace = f"{STATE_FACTS}{user_id}."
    within = asked if isinstance(asked, str) else ""
    return namespace + within.removeprefix(namespace)
