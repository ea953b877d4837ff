"""Our messages and tools in the shapes of the two OpenAI APIs, and their replies back.

Chat Completions gets structured messages and function tools. The Responses API gets what the
seed design used: the system messages as ``instructions`` and the rest flattened into one
``(role) content`` transcript, tool calls and results included as lines, so endpoints that
only implement the simple form still work.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from llm_bot.llm import errors
from llm_bot.llm.messages import ChatMessage, ModelReply, TokenUsage, ToolCall, ToolSpec

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletion
    from openai.types.responses import Response


def chat_request(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> dict[str, Any]:
    request: dict[str, Any] = {"messages": [_chat_message(m) for m in messages]}
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
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
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
    return {"role": message.role, "content": message.content}


def parse_chat_reply(completion: ChatCompletion) -> ModelReply:
    if not completion.choices:
        raise errors.ModelRequestInvalid("model answered with no choices")
    choice = completion.choices[0]
    if choice.finish_reason == "content_filter" or choice.message.refusal:
        raise errors.ModelRefused("model declined to answer (refusal or content filter)")
    calls = tuple(
        ToolCall(call.id, call.function.name, call.function.arguments)
        for call in choice.message.tool_calls or ()
        if call.type == "function"
    )
    usage = completion.usage
    tokens = TokenUsage(usage.prompt_tokens, usage.completion_tokens) if usage else TokenUsage()
    return ModelReply(choice.message.content or "", calls, tokens, completion.model)


def responses_request(messages: Sequence[ChatMessage], tools: Sequence[ToolSpec]) -> dict[str, Any]:
    system = [m.content for m in messages if m.role == "system"]
    lines = [_flattened(m) for m in messages if m.role != "system"]
    request: dict[str, Any] = {"input": "\n".join(lines)}
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


def _flattened(message: ChatMessage) -> str:
    calls = "".join(f" [called {c.name}({c.arguments}) as {c.id}]" for c in message.tool_calls)
    source = f" [result of {message.tool_call_id}]" if message.role == "tool" else ""
    return f"({message.role}){source} {message.content}{calls}".rstrip()


def parse_responses_reply(response: Response) -> ModelReply:
    calls = tuple(
        ToolCall(item.call_id, item.name, item.arguments)
        for item in response.output
        if item.type == "function_call"
    )
    usage = response.usage
    tokens = TokenUsage(usage.input_tokens, usage.output_tokens) if usage else TokenUsage()
    return ModelReply(response.output_text, calls, tokens, response.model)
