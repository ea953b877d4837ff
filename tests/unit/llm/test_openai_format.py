"""Replies read straight from their JSON: the shapes real endpoints send, and what is refused."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import pytest

from llm_bot.llm import errors
from llm_bot.llm.messages import TokenUsage, ToolCall
from llm_bot.llm.openai_format import parse_chat_reply, parse_embeddings


def completion(message: dict[str, Any], **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        **extra,
    }
    return json.dumps(body).encode()


def test_text_and_usage_are_read() -> None:
    body = completion(
        {"role": "assistant", "content": "hello"},
        usage={"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    )
    reply = parse_chat_reply(body)
    assert (reply.text, reply.usage, reply.model) == ("hello", TokenUsage(12, 3), "gpt-test")


def test_tool_calls_are_read_and_missing_usage_counts_zero() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "note", "arguments": "{}"}}
    reply = parse_chat_reply(
        completion({"role": "assistant", "content": None, "tool_calls": [call]})
    )
    assert reply.tool_calls == (ToolCall("c1", "note", "{}"),)
    assert (reply.text, reply.usage) == ("", TokenUsage())


def test_a_refusal_is_refused() -> None:
    with pytest.raises(errors.ModelRefused):
        parse_chat_reply(completion({"role": "assistant", "content": None, "refusal": "no"}))


@pytest.mark.parametrize(
    "raw",
    [
        b'{"choices": []}',
        b'{"choices": [{"message": {"tool_calls": [{"id": "x"}]}}]}',
        b"[]",
        b'"text"',
        b"{not json",
    ],
)
def test_a_reply_that_is_not_a_chat_completion_is_an_invalid_request(raw: bytes) -> None:
    with pytest.raises(errors.ModelRequestInvalid):
        parse_chat_reply(raw)


def test_embeddings_come_back_in_input_order_from_base64_or_lists() -> None:
    packed = base64.b64encode(struct.pack("<3f", 0.5, -1.0, 2.0)).decode("ascii")
    raw = json.dumps(
        {"data": [{"index": 1, "embedding": [1.0, 0.0, 0.0]}, {"index": 0, "embedding": packed}]}
    ).encode()
    assert parse_embeddings(raw) == [[0.5, -1.0, 2.0], [1.0, 0.0, 0.0]]


@pytest.mark.parametrize("raw", [b"not json", b'{"data": [{"embedding": [1.0]}]}', b'{"error": 1}'])
def test_an_unreadable_embeddings_reply_is_a_value_error(raw: bytes) -> None:
    with pytest.raises(ValueError, match="embeddings reply is not readable"):
        parse_embeddings(raw)
