"""Request readers and response builders for the local OpenAI-compatible server.

Kept free of sockets and state so the wire shapes can be checked in isolation and the server
module stays about HTTP, scripting and faults.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import struct
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]

DEFAULT_EMBEDDING_DIMENSIONS = 384
# The most tools a request may offer, as OpenAI's API refuses more (in its words).
MAX_TOOLS = 128

# One optional run of spaces between the name and "]]" when there are no arguments: two runs
# around an optional group would try every split of a long run of spaces before failing.
_CUE = re.compile(r"\[\[tool:(?P<name>[A-Za-z0-9_.-]+)\s*(?:(?P<args>\{.*?\})\s*)?\]\]", re.DOTALL)
_WORD = re.compile(r"\w+")
# An embeddings input holding this cue is refused (400), as a real endpoint refuses an input it
# cannot take (one over the model's limit, say): a test can make one text of a request bad.
REJECT_CUE = "[[reject]]"
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}
_ERROR_CODES = {400: "bad_request", 404: "unknown_url", 429: "rate_limit_exceeded"}


class RequestError(Exception):
    """A request the real API would refuse; carries the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: JsonObject
    call_id: str


@dataclass(frozen=True)
class Reply:
    """One assistant turn; tool calls win over text, as they do in a real model's answer."""

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True)
class Conversation:
    """The parts of a chat or responses request that decide the reply and the usage block."""

    last_user_text: str
    ends_with_tool_result: bool
    tool_names: frozenset[str]
    prompt_chars: int = 0


def new_id(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:24]}"


def approx_tokens(chars: int) -> int:
    """Roughly four characters per token, never zero, so usage-based accounting is exercised."""
    return max(1, math.ceil(chars / 4))


# The fence is as long as composition made it (llm_bot.text.fenced): at least three ``~``.
_INPUT = re.compile(
    r"## \[Input\]\n(?:(?P<fence>~{3,})text\n(?P<fenced>.*)\n(?P=fence)|(?P<plain>.*))\Z",
    re.DOTALL,
)


def spoken_text(text: str) -> str:
    """The user's words of a composed message (its ``## [Input]`` section), else all of it."""
    found = _INPUT.search(text)
    if found is None:
        return text
    return found.group("fenced") if found.group("fenced") is not None else found.group("plain")


def find_cues(text: str) -> list[tuple[str, JsonObject]]:
    """`[[tool:NAME {json}]]` cues; a cue whose arguments are not a JSON object is ignored."""
    cues: list[tuple[str, JsonObject]] = []
    for match in _CUE.finditer(text):
        try:
            arguments = json.loads(match.group("args") or "{}")
        except json.JSONDecodeError:
            continue
        if isinstance(arguments, dict):
            cues.append((match.group("name"), arguments))
    return cues


def _content_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [p.get("text") for p in content if isinstance(p, dict)]
        return "".join(p for p in parts if isinstance(p, str))
    return ""


def _require_list(body: JsonObject, key: str) -> list[Any]:
    value = body.get(key)
    if not isinstance(value, list) or not value:
        raise RequestError(400, f"'{key}' must be a non-empty array")
    return value


def _offered_tools(tools: object, *, nested: bool) -> frozenset[str]:
    """Chat nests the name under `function`; the Responses API keeps it at the top level."""
    if not isinstance(tools, list):
        return frozenset()
    if len(tools) > MAX_TOOLS:
        raise RequestError(
            400,
            "Invalid 'tools': array too long. Expected an array with maximum length"
            f" {MAX_TOOLS}, but got an array with length {len(tools)} instead.",
        )
    names: set[str] = set()
    for tool in tools:
        spec = tool.get("function") if nested and isinstance(tool, dict) else tool
        if isinstance(spec, dict) and isinstance(spec.get("name"), str):
            names.add(spec["name"])
    return frozenset(names)


def read_chat(body: JsonObject) -> Conversation:
    messages = _require_list(body, "messages")
    last_user, chars = "", 0
    for message in messages:
        if not isinstance(message, dict):
            raise RequestError(400, "every message must be an object")
        text = _content_text(message.get("content"))
        chars += len(text) + sum(len(json.dumps(c)) for c in message.get("tool_calls") or [])
        if message.get("role") == "user":
            last_user = text
    return Conversation(
        last_user_text=last_user,
        ends_with_tool_result=messages[-1].get("role") == "tool",
        tool_names=_offered_tools(body.get("tools"), nested=True),
        prompt_chars=chars,
    )


def read_responses(body: JsonObject) -> Conversation:
    raw_input = body.get("input")
    items: list[Any] = (
        [{"role": "user", "content": raw_input}]
        if isinstance(raw_input, str)
        else _require_list(body, "input")
    )
    last_user, chars = "", len(_content_text(body.get("instructions")))
    for item in items:
        if not isinstance(item, dict):
            raise RequestError(400, "every input item must be an object")
        text = _content_text(item.get("content")) + _content_text(item.get("output"))
        chars += len(text) + len(_content_text(item.get("arguments")))
        if item.get("role") == "user":
            last_user = text
    return Conversation(
        last_user_text=last_user,
        ends_with_tool_result=items[-1].get("type") == "function_call_output",
        tool_names=_offered_tools(body.get("tools"), nested=False),
        prompt_chars=chars,
    )


def _completion_chars(reply: Reply) -> int:
    calls = sum(len(c.name) + len(json.dumps(c.arguments)) for c in reply.tool_calls)
    return calls if reply.tool_calls else len(reply.text)


def chat_completion(reply: Reply, conversation: Conversation, model: str) -> JsonObject:
    message: JsonObject = {"role": "assistant", "content": reply.text or None, "refusal": None}
    if reply.tool_calls:
        message["content"] = None
        message["tool_calls"] = [
            {
                "id": call.call_id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in reply.tool_calls
        ]
    prompt = approx_tokens(conversation.prompt_chars)
    completion = approx_tokens(_completion_chars(reply))
    return {
        "id": new_id("chatcmpl-"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": None,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if reply.tool_calls else "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def response_object(
    reply: Reply, conversation: Conversation, model: str, request: JsonObject
) -> JsonObject:
    output: list[JsonObject] = [
        {
            "type": "function_call",
            "id": new_id("fc_"),
            "call_id": call.call_id,
            "name": call.name,
            "arguments": json.dumps(call.arguments),
            "status": "completed",
        }
        for call in reply.tool_calls
    ]
    if not reply.tool_calls:
        content = {"type": "output_text", "text": reply.text, "annotations": []}
        output.append(
            {
                "type": "message",
                "id": new_id("msg_"),
                "status": "completed",
                "role": "assistant",
                "content": [content],
            }
        )
    prompt = approx_tokens(conversation.prompt_chars)
    completion = approx_tokens(_completion_chars(reply))
    return {
        "id": new_id("resp_"),
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "instructions": request.get("instructions"),
        "tools": request.get("tools") or [],
        "tool_choice": request.get("tool_choice", "auto"),
        "parallel_tool_calls": True,
        "metadata": {},
        "error": None,
        "incomplete_details": None,
        "usage": {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion,
        },
    }


def embed_text(text: str, dimensions: int) -> list[float]:
    """Signed feature hashing of lowercased words: deterministic, offline, and texts that share
    words land closer together, which is enough for recall tests to mean something."""
    vector = [0.0] * dimensions
    for token in _WORD.findall(text.lower()) or [""]:
        value = int.from_bytes(hashlib.blake2b(token.encode(), digest_size=8).digest(), "big")
        vector[value % dimensions] += 1.0 if value >> 63 else -1.0
    norm = math.sqrt(sum(x * x for x in vector))
    if norm == 0.0:
        vector[0], norm = 1.0, 1.0
    return [x / norm for x in vector]


def _embedding_inputs(body: JsonObject) -> list[str]:
    raw = body.get("input")
    inputs = [raw] if isinstance(raw, str) else raw
    if not isinstance(inputs, list) or not inputs or not all(isinstance(t, str) for t in inputs):
        raise RequestError(400, "'input' must be a string or a non-empty array of strings")
    for index, text in enumerate(inputs):
        if REJECT_CUE in text:
            raise RequestError(400, f"'$.input[{index}]' is invalid: it holds {REJECT_CUE}.")
    return inputs


def _embedding_dimensions(body: JsonObject) -> int:
    dimensions = body.get("dimensions", DEFAULT_EMBEDDING_DIMENSIONS)
    if isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1:
        raise RequestError(400, "'dimensions' must be a positive integer")
    return dimensions


def embeddings(body: JsonObject, model: str) -> JsonObject:
    """The openai client asks for base64 unless told otherwise and decodes it itself."""
    inputs, dimensions = _embedding_inputs(body), _embedding_dimensions(body)
    encoding = body.get("encoding_format") or "float"
    if encoding not in ("float", "base64"):
        raise RequestError(400, "'encoding_format' must be 'float' or 'base64'")
    data: list[JsonObject] = []
    for index, text in enumerate(inputs):
        vector = embed_text(text, dimensions)
        packed = base64.b64encode(struct.pack(f"<{dimensions}f", *vector)).decode("ascii")
        data.append(
            {
                "object": "embedding",
                "index": index,
                "embedding": packed if encoding == "base64" else vector,
            }
        )
    tokens = approx_tokens(sum(len(text) for text in inputs))
    return {
        "object": "list",
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


def models_list(names: Sequence[str]) -> JsonObject:
    return {
        "object": "list",
        "data": [{"id": n, "object": "model", "created": 0, "owned_by": "llm-bot"} for n in names],
    }


def error_body(status: int, message: str) -> JsonObject:
    """OpenAI's error envelope, so the client maps statuses to its typed exceptions."""
    error_type = _ERROR_TYPES.get(
        status, "server_error" if status >= 500 else "invalid_request_error"
    )
    return {
        "error": {
            "message": message,
            "type": error_type,
            "param": None,
            "code": _ERROR_CODES.get(status, error_type),
        }
    }
