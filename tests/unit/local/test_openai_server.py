"""The local model server, driven through the real openai client over real HTTP."""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionMessageFunctionToolCall,
    ChatCompletionMessageParam,
    ChatCompletionToolParam,
)

from llm_bot_tools.local.openai_server import LocalModelServer

LOOKUP_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "lookup",
        "description": "Look something up.",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    },
}


@pytest.fixture(scope="module")
def shared_server() -> Iterator[LocalModelServer]:
    with LocalModelServer() as server:
        yield server


@pytest.fixture
def server(shared_server: LocalModelServer) -> Iterator[LocalModelServer]:
    shared_server.reset()
    yield shared_server
    shared_server.reset()


@pytest.fixture
def client(server: LocalModelServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0) as c:
        yield c


def _chat(
    client: openai.OpenAI,
    messages: list[ChatCompletionMessageParam],
    tools: list[ChatCompletionToolParam] | None = None,
) -> ChatCompletion:
    if tools is None:
        return client.chat.completions.create(model="any", messages=messages)
    return client.chat.completions.create(model="any", messages=messages, tools=tools)


def _function_calls(completion: ChatCompletion) -> list[ChatCompletionMessageFunctionToolCall]:
    calls = completion.choices[0].message.tool_calls or []
    assert all(isinstance(c, ChatCompletionMessageFunctionToolCall) for c in calls)
    return [c for c in calls if isinstance(c, ChatCompletionMessageFunctionToolCall)]


def _raw(server: LocalModelServer, path: str, data: bytes | None) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.port}{path}",
        data=data,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_chat_echoes_last_user_message_with_usage(client: openai.OpenAI) -> None:
    completion = _chat(
        client,
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "what is my name?"},
        ],
    )

    choice = completion.choices[0]
    assert choice.message.content == "echo: what is my name?"
    assert choice.finish_reason == "stop"
    assert completion.model == "local-test-model"
    assert completion.usage is not None
    # "be brief" + "first" + "ok" + "what is my name?" = 31 chars -> 8 tokens
    assert completion.usage.prompt_tokens == 8
    assert completion.usage.completion_tokens == math.ceil(len("echo: what is my name?") / 4)
    assert completion.usage.total_tokens == 8 + completion.usage.completion_tokens


def test_chat_reads_text_parts_of_user_content(client: openai.OpenAI) -> None:
    completion = _chat(
        client,
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": "a "}, {"type": "text", "text": "b"}],
            }
        ],
    )

    assert completion.choices[0].message.content == "echo: a b"


def test_scripted_replies_are_fifo_then_fall_back_to_echo(
    server: LocalModelServer, client: openai.OpenAI
) -> None:
    server.script_reply("one")
    server.script_reply("two")
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]

    replies = [_chat(client, messages).choices[0].message.content for _ in range(3)]

    assert replies == ["one", "two", "echo: hi"]


def test_scripted_tool_call_round_trip(server: LocalModelServer, client: openai.OpenAI) -> None:
    call_id = server.script_tool_call("lookup", {"q": "weather"})
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "weather?"}]

    first = _chat(client, messages, [LOOKUP_TOOL])

    assert first.choices[0].finish_reason == "tool_calls"
    calls = first.choices[0].message.tool_calls
    assert calls is not None
    assert len(calls) == 1
    call = calls[0]
    assert call.type == "function"
    assert call.id == call_id
    assert call.function.name == "lookup"
    assert json.loads(call.function.arguments) == {"q": "weather"}

    messages += [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": call.function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = _chat(client, messages, [LOOKUP_TOOL])

    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "echo: weather?"
    assert server.chat_requests()[-1]["messages"][-1]["content"] == "sunny"


def test_scripted_tool_call_waits_for_a_call_that_offers_tools(
    server: LocalModelServer, client: openai.OpenAI
) -> None:
    server.script_tool_call("lookup", {"q": "x"}, call_id="call_fixed")
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "summarise"}]

    without_tools = _chat(client, messages)
    with_tools = _chat(client, messages, [LOOKUP_TOOL])

    assert without_tools.choices[0].message.content == "echo: summarise"
    assert with_tools.choices[0].message.tool_calls is not None
    assert with_tools.choices[0].message.tool_calls[0].id == "call_fixed"


def test_several_tool_calls_in_one_reply(server: LocalModelServer, client: openai.OpenAI) -> None:
    ids = server.script_tool_calls([("lookup", {"q": "a"}), ("lookup", {"q": "b"})])

    completion = _chat(client, [{"role": "user", "content": "both"}], [LOOKUP_TOOL])

    calls = _function_calls(completion)
    assert [c.id for c in calls] == ids
    assert [json.loads(c.function.arguments) for c in calls] == [{"q": "a"}, {"q": "b"}]


def test_cue_triggers_tool_call_until_a_tool_result_arrives(client: openai.OpenAI) -> None:
    cue = 'remember this [[tool:lookup {"q": "cats"}]] please'
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": cue}]

    first = _chat(client, messages, [LOOKUP_TOOL])

    calls = _function_calls(first)
    assert len(calls) == 1
    assert calls[0].function.name == "lookup"
    assert json.loads(calls[0].function.arguments) == {"q": "cats"}

    messages += [
        {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": calls[0].id,
                    "type": "function",
                    "function": {"name": "lookup", "arguments": calls[0].function.arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0].id, "content": "found"},
    ]
    second = _chat(client, messages, [LOOKUP_TOOL])

    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].message.content == f"echo: {cue}"


def test_cue_for_a_tool_not_offered_is_plain_text(client: openai.OpenAI) -> None:
    cue = "[[tool:delete_everything {}]]"

    completion = _chat(client, [{"role": "user", "content": cue}], [LOOKUP_TOOL])

    assert completion.choices[0].message.tool_calls is None
    assert completion.choices[0].message.content == f"echo: {cue}"


def test_more_tools_than_openai_takes_are_refused_as_it_refuses_them(
    client: openai.OpenAI,
) -> None:
    tools: list[ChatCompletionToolParam] = [
        {"type": "function", "function": {"name": f"tool{n}", "parameters": {"type": "object"}}}
        for n in range(129)
    ]
    with pytest.raises(openai.BadRequestError, match="array too long"):
        _chat(client, [{"role": "user", "content": "hi"}], tools)
    assert _chat(client, [{"role": "user", "content": "hi"}], tools[:128]).choices


def test_always_call_tool_until_cleared(server: LocalModelServer, client: openai.OpenAI) -> None:
    server.always_call_tool("lookup", {"q": "again"})
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "go"},
        {"role": "tool", "tool_call_id": "call_x", "content": "result"},
    ]

    rounds = [_chat(client, messages, [LOOKUP_TOOL]) for _ in range(3)]
    without_tools = _chat(client, messages)
    server.clear_always_tool()
    after_clear = _chat(client, messages, [LOOKUP_TOOL])

    assert all(r.choices[0].finish_reason == "tool_calls" for r in rounds)
    ids = {r.choices[0].message.tool_calls[0].id for r in rounds if r.choices[0].message.tool_calls}
    assert len(ids) == 3
    assert without_tools.choices[0].message.content == "echo: go"
    assert after_clear.choices[0].message.content == "echo: go"


def test_rate_limit_then_success(server: LocalModelServer, client: openai.OpenAI) -> None:
    server.fail_next(1, status=429, message="slow down")
    server.script_reply("after the limit")
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]

    with pytest.raises(openai.RateLimitError) as caught:
        _chat(client, messages)
    recovered = _chat(client, messages)

    assert caught.value.response.headers["retry-after"] == "0"
    assert isinstance(caught.value.body, dict)
    assert caught.value.body["message"] == "slow down"
    assert caught.value.body["type"] == "rate_limit_error"
    assert recovered.choices[0].message.content == "after the limit"


def test_server_error_maps_to_internal_server_error(
    server: LocalModelServer, client: openai.OpenAI
) -> None:
    server.fail_next(2, status=500)

    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            _chat(client, [{"role": "user", "content": "hi"}])
    server.fail_next(1, status=400, kind="embeddings")
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="any", input="x")

    assert _chat(client, [{"role": "user", "content": "hi"}]).choices[0].message.content


def test_hang_makes_the_client_time_out_then_calls_recover(
    server: LocalModelServer, client: openai.OpenAI
) -> None:
    server.hang_next(1, seconds=30)
    messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": "hi"}]

    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.2).chat.completions.create(model="any", messages=messages)
    recovered = client.with_options(timeout=5).chat.completions.create(
        model="any", messages=messages
    )

    assert recovered.choices[0].message.content == "echo: hi"


def test_latency_is_the_models_and_embeddings_stay_quick(
    server: LocalModelServer, client: openai.OpenAI
) -> None:
    server.latency_ms = 500
    quick = client.with_options(timeout=0.1)

    with pytest.raises(openai.APITimeoutError):
        quick.chat.completions.create(model="any", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.APITimeoutError):
        quick.responses.create(model="any", input="x")
    assert quick.embeddings.create(model="any", input="x").data
    assert quick.models.list().data[0].id == "local-test-model"


def test_stop_releases_hung_calls_and_open_connections() -> None:
    server = LocalModelServer().start()
    client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
    server.hang_next(1, seconds=60, kind="embeddings")
    with pytest.raises(openai.APITimeoutError):
        client.with_options(timeout=0.2).embeddings.create(model="any", input="x")

    started = time.monotonic()
    server.stop()
    stopped_in = time.monotonic() - started

    assert stopped_in < 2
    with pytest.raises(openai.APIConnectionError):
        client.models.list()
    client.close()


def test_restart_reuses_the_port() -> None:
    server = LocalModelServer().start()
    port = server.port
    server.stop()

    with server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        models = client.models.list()

    assert server.port == port
    assert [m.id for m in models.data] == ["local-test-model"]


def test_responses_api_output_text(server: LocalModelServer, client: openai.OpenAI) -> None:
    first = client.responses.create(model="any", instructions="be brief", input="hello there")
    server.script_reply("scripted")
    second = client.responses.create(
        model="any",
        input=[{"role": "user", "content": [{"type": "input_text", "text": "ignored"}]}],
    )

    assert first.output_text == "echo: hello there"
    assert first.status == "completed"
    assert first.object == "response"
    assert first.id.startswith("resp_")
    assert first.model == "local-test-model"
    assert first.usage is not None
    assert first.usage.input_tokens == math.ceil(len("be brief" + "hello there") / 4)
    assert first.usage.total_tokens == first.usage.input_tokens + first.usage.output_tokens
    assert second.output_text == "scripted"


def test_responses_api_tool_call_by_cue(client: openai.OpenAI) -> None:
    response = client.responses.create(
        model="any",
        input='[[tool:lookup {"q": "dogs"}]]',
        tools=[{"type": "function", "name": "lookup", "parameters": {}, "strict": False}],
    )

    calls = [item for item in response.output if item.type == "function_call"]
    assert len(calls) == 1
    assert calls[0].name == "lookup"
    assert json.loads(calls[0].arguments) == {"q": "dogs"}
    assert response.output_text == ""


def test_embeddings_are_deterministic_normalised_and_meaningful(client: openai.OpenAI) -> None:
    texts = [
        "The user likes green tea in the morning",
        "the user drinks green tea every morning",
        "Quarterly tax filing deadline for corporations",
    ]

    first = client.embeddings.create(model="any", input=texts)
    again = client.embeddings.create(model="any", input=texts[0], encoding_format="float")

    vectors = [d.embedding for d in first.data]
    assert [len(v) for v in vectors] == [384, 384, 384]
    assert [d.index for d in first.data] == [0, 1, 2]
    assert vectors[0] == pytest.approx(again.data[0].embedding, abs=1e-6)
    assert math.isclose(_cosine(vectors[0], vectors[0]), 1.0, abs_tol=1e-5)
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2]) + 0.3
    assert first.usage.prompt_tokens == math.ceil(sum(map(len, texts)) / 4)


def test_embeddings_honour_dimensions(client: openai.OpenAI) -> None:
    response = client.embeddings.create(model="any", input="short text", dimensions=64)

    assert len(response.data[0].embedding) == 64


async def test_async_client_chat_and_embeddings(server: LocalModelServer) -> None:
    async with openai.AsyncOpenAI(
        base_url=server.base_url, api_key="test", max_retries=0
    ) as client:
        server.script_reply("from the script")
        completion = await client.chat.completions.create(
            model="any", messages=[{"role": "user", "content": "hi"}]
        )
        embedding = await client.embeddings.create(model="any", input="hi")

    assert completion.choices[0].message.content == "from the script"
    assert len(embedding.data[0].embedding) == 384


def test_models_list_includes_extra_models() -> None:
    with LocalModelServer("main-model", extra_models=["embedder"]) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        ids = [m.id for m in client.models.list().data]
        client.close()

    assert ids == ["main-model", "embedder"]
    assert server.base_url == f"http://127.0.0.1:{server.port}/v1"


def test_requests_are_recorded(server: LocalModelServer, client: openai.OpenAI) -> None:
    _chat(client, [{"role": "user", "content": "context check"}])
    client.responses.create(model="any", input="via responses")
    client.embeddings.create(model="any", input="not a chat")

    recorded = server.requests
    bodies = server.chat_requests()
    server.clear()

    assert [r.path for r in recorded] == ["/v1/chat/completions", "/v1/responses", "/v1/embeddings"]
    assert recorded[0].method == "POST"
    assert recorded[0].headers["authorization"] == "Bearer test"
    assert recorded[0].time <= time.time()
    assert [b.get("messages", b.get("input")) for b in bodies] == [
        [{"role": "user", "content": "context check"}],
        "via responses",
    ]
    assert server.requests == []


def test_reset_clears_scripts_faults_and_latency(
    server: LocalModelServer, client: openai.OpenAI
) -> None:
    server.script_reply("stale")
    server.script_tool_call("lookup", {})
    server.always_call_tool("lookup")
    server.fail_next(3)
    server.hang_next(3)
    server.latency_ms = 10_000

    server.reset()
    completion = _chat(client, [{"role": "user", "content": "fresh"}], [LOOKUP_TOOL])

    assert completion.choices[0].message.content == "echo: fresh"
    assert server.latency_ms == 0
    assert len(server.requests) == 1


def test_unknown_path_is_a_json_404(server: LocalModelServer) -> None:
    status, body = _raw(server, "/v1/nope", b"{}")

    assert status == 404
    assert set(body["error"]) >= {"message", "type", "code"}
    assert "/v1/nope" in body["error"]["message"]


def test_malformed_json_is_a_json_400(server: LocalModelServer) -> None:
    status, body = _raw(server, "/v1/chat/completions", b"{not json")
    array_status, _ = _raw(server, "/v1/chat/completions", b"[]")
    missing_status, missing = _raw(server, "/v1/chat/completions", b'{"model": "x"}')

    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert array_status == 400
    assert missing_status == 400
    assert "messages" in missing["error"]["message"]
    assert server.requests[0].body is None


def test_faults_are_per_kind_of_call(server: LocalModelServer, client: openai.OpenAI) -> None:
    server.fail_next(1, status=500, kind="embeddings")
    assert _chat(client, [{"role": "user", "content": "still fine"}]).choices[0].message.content
    with pytest.raises(openai.InternalServerError):
        client.embeddings.create(model="m", input="fails")
    assert client.embeddings.create(model="m", input="works").data
