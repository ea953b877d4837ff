"""Whom a platform tool acts for: the arguments naming a user, a channel or a destination are
out of the model's schema and set from the event, whatever the model sent; a tool no argument
can confine is offered only by its exact id."""

from __future__ import annotations

from typing import Any

import mcp.types as types
import pytest

from llm_bot.platform_tools.catalog import allowed
from llm_bot.platform_tools.client import McpClient
from llm_bot.platform_tools.gateway import listed
from llm_bot.platform_tools.platform import Caller
from llm_bot.platform_tools.servers import ServerConfig
from llm_bot.platform_tools.subjects import model_schema, pinned, subjects_of

CALLER = Caller(
    "twitch:1",
    ("vip",),
    {"destination": "internal.egress.v1", "connector": "twitch", "channel": "#room"},
    "#room",
)
STORY = {
    "type": "object",
    "properties": {"userId": {"type": "string"}, "theme": {"type": "string"}},
    "required": ["userId", "theme"],
}


def test_a_user_argument_is_hidden_from_the_model_and_set_to_the_requester() -> None:
    subjects = subjects_of("mcp:start_story", STORY)
    assert model_schema(STORY, subjects) == {
        "type": "object",
        "properties": {"theme": {"type": "string"}},
        "required": ["theme"],
    }
    sent = pinned({"userId": "twitch:99", "theme": "heist"}, subjects, CALLER)
    assert sent == {"userId": "twitch:1", "theme": "heist"}


def test_an_unknown_tool_is_pinned_by_the_names_of_its_schema() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"user_id": {}, "channel": {}, "egress": {}, "text": {}},
    }
    subjects = subjects_of("mcp:shout", schema)
    assert set(model_schema(schema, subjects)["properties"]) == {"text"}
    sent = pinned({"user_id": "x", "channel": "#other", "text": "hi"}, subjects, CALLER)
    assert sent == {
        "user_id": "twitch:1", "channel": "#room", "egress": CALLER.egress, "text": "hi",
    }  # fmt: skip


def test_a_subject_is_found_whatever_its_names_case_and_separators() -> None:
    names = ["UserId", "USER-ID", "Channel_ID", "channelID", "Egress", "userName"]
    schema: dict[str, Any] = {"type": "object", "properties": {name: {} for name in names}}
    subjects = subjects_of("mcp:shout", schema)
    assert set(model_schema(schema, subjects)["properties"]) == {"userName"}


def test_a_state_prefix_stays_within_the_requesters_facts() -> None:
    subjects = subjects_of("mcp:get_state_prefix", {"properties": {"prefix": {}}})
    assert model_schema({"properties": {"prefix": {}}}, subjects) == {"properties": {}}
    for asked, sent in [
        ("user.fact.twitch:99.", "user.fact.twitch:1.user.fact.twitch:99."),
        ("user.fact.twitch:1.color", "user.fact.twitch:1.color"),
        ("", "user.fact.twitch:1."),
        (None, "user.fact.twitch:1."),
    ]:
        assert pinned({"prefix": asked}, subjects, CALLER) == {"prefix": sent}
    dotted = Caller("ada.x", ())
    assert isinstance(pinned({"prefix": ""}, subjects, dotted), str)


def test_a_call_the_event_cannot_pin_is_refused() -> None:
    egress = subjects_of("mcp:agent.sendProgressUpdate", {})
    assert pinned({"message": "hi"}, egress, Caller("ada", ())) == "the message has no egress"
    assert isinstance(pinned({}, subjects_of("mcp:start_story", {}), Caller(None, ())), str)


def test_dropped_arguments_are_never_sent() -> None:
    subjects = subjects_of("mcp:summarize_stream", {"properties": {"filters": {}}})
    assert pinned({"filters": {"channel": "#dm"}, "stream_type": "chat"}, subjects, CALLER) == {
        "stream_type": "chat"
    }


def test_an_unpinnable_tool_is_offered_only_by_its_exact_id() -> None:
    client = McpClient(
        ServerConfig("tool-gateway", "http://127.0.0.1:9/sse", "sse"),
        reconnect_base_s=1,
        reconnect_max_s=1,
        monitor_s=1,
    )
    reader = listed(client, types.Tool(name="get_state", input_schema={"type": "object"}))
    assert not reader.subjects.pinnable
    assert not allowed(reader.tool_id, ("mcp:*", "mcp:get_*"), pinnable=False)
    assert allowed(reader.tool_id, ("mcp:*", "mcp:get_state"), pinnable=False)
    assert allowed("mcp:get_state_prefix", ("mcp:*",), pinnable=True)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"target": {"properties": {"userId": {}}}}},
        {"type": "object", "properties": {"to": {"items": {"properties": {"channel_id": {}}}}}},
        {"$ref": "#/$defs/Args", "$defs": {"Args": {"properties": {"user_id": {}}}}},
        {"anyOf": [{"properties": {"text": {}}}, {"properties": {"Egress": {}}}]},
    ],
)
def test_a_subject_named_below_the_top_level_cannot_be_pinned(schema: dict[str, Any]) -> None:
    """No pin reaches it, so a glob never offers the tool: the model would name the user."""
    subjects = subjects_of("mcp:notify", schema)
    assert not subjects.pinnable
    assert not allowed("mcp:notify", ("mcp:*",), pinnable=subjects.pinnable)


def test_what_an_argument_pinned_whole_holds_is_not_looked_into() -> None:
    schema = {
        "type": "object",
        "properties": {
            "message": {"type": "string"},
            "egress": {"type": "object", "properties": {"channel": {}, "destination": {}}},
        },
    }
    subjects = subjects_of("mcp:agent.sendProgressUpdate", schema)
    assert subjects.pinnable
    assert set(model_schema(schema, subjects)["properties"]) == {"message"}
