"""Our messages and tools in the shapes of the two OpenAI APIs, and their replies back.

Chat Completions gets structured messages and function tools. The Responses API gets the
system messages as ``instructions`` and the rest as input items of their roles, tool calls and
results as ``function_call`` and ``function_call_output`` items: never one joined transcript,
where a line of a user's text could pass for a line of another role.
"""

from __future__ import annotations

import base64
import json
import struct
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import openai

from llm_bot.llm import errors
from llm_bot.llm.messages import (
    ChatMessage,
    ModelReply,
    TokenUsage,
    ToolCall,
    ToolSpec,
    sent_content,
)
from llm_bot.text import storable

if TYPE_CHECKING:
    from openai.types.responses import Response

# What the client's own ``create`` methods send with a request, for the raw ``post`` door: the
# API key as a bearer token.
RAW_REQUEST_OPTIONS: openai.RequestOptions = {"security": {"bearer_auth": True}}


def chat_request(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], *, max_tokens: int | None = None
) -> dict[str, Any]:
    """``max_tokens`` is sent only when set: without it the endpoint's own limit applies."""
    request: dict[str, Any] = {"messages": [_chat_message(m) for m in messages]}
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    if tools:
        request["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in tools
        ]
    return request


def _chat_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {
            "role": "tool",
            "tool_call_id": message.tool_call_id,
            "content": sent_content(message),
        }
    if message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.arguments},
                }
                for c in message.tool_calls
            ],
        }
    if message.name:
        return {"role": message.role, "content": message.content, "name": message.name}
    return {"role": message.role, "content": message.content}


def parse_chat_reply(raw: bytes) -> ModelReply:
    """A Chat Completions reply from its JSON, read as leniently as the ``openai`` client's own
    models (missing optional fields are fine), but without building them: that model
    construction cost as much CPU as the rest of the request."""
    try:
        body = json.loads(raw)
    except ValueError:
        raise errors.ModelRequestInvalid("model answered with something that is not JSON") from None
    except RecursionError:
        raise errors.ModelRequestInvalid("model answered with JSON nested too deeply") from None
    try:
        choices = body.get("choices") or ()
        if not choices:
            raise errors.ModelRequestInvalid("model answered with no choices")
        choice = choices[0]
        message = choice.get("message") or {}
        if choice.get("finish_reason") == "content_filter" or message.get("refusal"):
            raise errors.ModelRefused("model declined to answer (refusal or content filter)")
        calls = tuple(
            _tool_call(call["id"], call["function"]["name"], call["function"].get("arguments"))
            for call in message.get("tool_calls") or ()
            if call.get("type", "function") == "function"
        )
        usage = body.get("usage") or {}
        tokens = TokenUsage(
            _count(usage.get("prompt_tokens")), _count(usage.get("completion_tokens"))
        )
        text = storable(_content_text(message.get("content")))
        return ModelReply(text, calls, tokens, _text(body.get("model")))
    except (AttributeError, KeyError, TypeError, IndexError):
        raise errors.ModelRequestInvalid(
            "model answered in a shape that is not a chat completion"
        ) from None


def _tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    """A call as the runner and the next request take it: an id and a name that are text
    (anything else is a reply of the wrong shape, ``TypeError``), every part storable."""
    if not isinstance(call_id, str) or not isinstance(name, str):
        raise TypeError("a tool call's id and name must be text")
    return ToolCall(storable(call_id), storable(name), storable(_arguments_text(arguments)))


def _count(tokens: Any) -> int:
    """A usage count: a whole number of at least zero, else none reported (0)."""
    return tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens > 0 else 0


def _text(value: Any) -> str:
    """An optional text field (the model's name): storable, or empty when it is not text."""
    return storable(value) if isinstance(value, str) else ""


def _arguments_text(arguments: Any) -> str:
    """Tool arguments as JSON text, which the tool runner parses: some endpoints (Ollama-style)
    send the object itself instead of its encoding, and a call without arguments takes none.
    Escapes are spelled out (``ensure_ascii=False``) so :func:`storable` sees, and repairs, a
    lone surrogate that the runner's parse would otherwise hand to a tool."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, str):
        text = arguments
        try:
            arguments = json.loads(text)
        except (ValueError, RecursionError):
            return text  # the runner tells the model its arguments are not JSON, or too deep
    return json.dumps(arguments, ensure_ascii=False)


def _content_text(content: Any) -> str:
    """The reply's text: a string, nothing (a reply of only tool calls), or, from endpoints that
    answer in content parts, the text parts joined; anything else is not a chat completion."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        return "".join(_part_texts(content))
    raise TypeError("message content is neither text nor a list of parts")


def _part_texts(parts: list[Any]) -> Iterator[str]:
    """A part is plain text or a typed object; only ``text`` parts carry the answer (images,
    audio and the like are not ours to pass on)."""
    for part in parts:
        if isinstance(part, str):
            yield part
        elif part.get("type") == "text":
            yield part["text"]


def responses_request(
    messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], *, max_tokens: int | None = None
) -> dict[str, Any]:
    """The Responses API names the same limit as :func:`chat_request` ``max_output_tokens``.
    Messages go as input items, each with its role, never joined into one text: a line of a
    user's text could otherwise pass for a line of another role."""
    system = [m.content for m in messages if m.role == "system"]
    items = [item for m in messages if m.role != "system" for item in _input_items(m)]
    request: dict[str, Any] = {"input": items}
    if max_tokens is not None:
        request["max_output_tokens"] = max_tokens
    if system:
        request["instructions"] = "\n\n".join(system)
    if tools:
        request["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in tools
        ]
    return request


def _input_items(message: ChatMessage) -> list[dict[str, Any]]:
    """One message as Responses API input items: a tool result is its call's output, a model
    turn that called tools is its text (if any) and one item per call."""
    if message.role == "tool":
        output = {"call_id": message.tool_call_id, "output": sent_content(message)}
        return [{"type": "function_call_output", **output}]
    items: list[dict[str, Any]] = []
    if message.content or not message.tool_calls:
        items.append({"role": message.role, "content": message.content})
    for call in message.tool_calls:
        fields = {"call_id": call.id, "name": call.name, "arguments": call.arguments}
        items.append({"type": "function_call", **fields})
    return items


def parse_responses_reply(response: Response) -> ModelReply:
    """The reply's text, calls and usage, checked as :func:`parse_chat_reply` checks a chat
    completion's: the client builds ``response`` from the JSON without validating it, so a
    field of the wrong type (a list for ``output``, a number for a name) is found here. A
    refusal or a reply a content filter stopped is refused, as a chat completion's is."""
    try:
        if _refused(response):
            raise errors.ModelRefused("model declined to answer (refusal or content filter)")
        calls = tuple(
            _tool_call(item.call_id, item.name, item.arguments)
            for item in response.output
            if item.type == "function_call"
        )
        usage = response.usage
        tokens = (
            TokenUsage(_count(usage.input_tokens), _count(usage.output_tokens))
            if usage
            else TokenUsage()
        )
        text = response.output_text
        if not isinstance(text, str):
            raise TypeError("output text is not text")
        return ModelReply(storable(text), calls, tokens, _text(response.model))
    except (AttributeError, KeyError, TypeError, IndexError):
        raise errors.ModelRequestInvalid(
            "model answered in a shape that is not a Responses API response"
        ) from None


def _refused(response: Response) -> bool:
    """A ``refusal`` part in a message, or an answer left incomplete by a content filter."""
    incomplete = response.incomplete_details
    if incomplete is not None and incomplete.reason == "content_filter":
        return True
    return any(
        part.type == "refusal"
        for item in response.output
        if item.type == "message"
        for part in item.content
    )


def parse_embeddings(raw: bytes) -> list[list[float]]:
    """Vectors of an ``/embeddings`` reply in input order; each as base64 little-endian float32
    (what we ask for: a quarter of the bytes to read) or as a JSON list from endpoints that
    ignore ``encoding_format``."""
    try:
        items = sorted(json.loads(raw)["data"], key=lambda item: item["index"])
        return [_vector(item["embedding"]) for item in items]
    except (ValueError, KeyError, TypeError, struct.error) as error:
        raise ValueError(f"embeddings reply is not readable: {type(error).__name__}") from None


def _vector(embedding: str | list[float]) -> list[float]:
    if isinstance(embedding, str):
        packed = base64.b64decode(embedding)
        return list(struct.unpack(f"<{len(packed) // 4}f", packed))
    return embedding
