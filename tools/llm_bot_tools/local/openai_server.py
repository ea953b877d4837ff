"""A local OpenAI-compatible model server for tests and `llm-bot dev`.

Tests talk to the model over a real HTTP connection with the real `openai` client, so retries,
timeouts and response parsing are exercised exactly as in production; only the model's answers
are scripted. Stdlib only, so it adds nothing to the install.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Self
from urllib.parse import urlsplit

from llm_bot_tools.local import openai_payloads as payloads
from llm_bot_tools.local.json_http import Answer, JsonHTTPServer
from llm_bot_tools.local.lifecycle import LocalService
from llm_bot_tools.local.openai_payloads import Conversation, JsonObject, Reply, ToolCall

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "local-test-model"
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
EMBEDDINGS_PATH = "/v1/embeddings"
MODELS_PATH = "/v1/models"
_MODEL_CALL_PATHS = frozenset({CHAT_PATH, RESPONSES_PATH, EMBEDDINGS_PATH})
CallKind = Literal["generation", "embeddings"]
KINDS: tuple[CallKind, ...] = ("generation", "embeddings")


@dataclass(frozen=True)
class RecordedRequest:
    """What reached the server, so tests can assert on the exact context the model saw."""

    method: str
    path: str
    body: JsonObject | None
    headers: dict[str, str]  # keys lowercased
    time: float


def _error(status: int, message: str) -> Answer:
    headers = (("retry-after", "0"),) if status == 429 else ()
    return Answer(status, payloads.error_body(status, message), headers)


def _new_call(name: str, arguments: Mapping[str, Any], call_id: str | None = None) -> ToolCall:
    return ToolCall(name, dict(arguments), call_id or payloads.new_id("call_"))


def _decode_body(raw: bytes) -> JsonObject | None:
    """None for an empty body; raises RequestError for anything that is not a JSON object."""
    if not raw:
        return None
    try:
        body = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise payloads.RequestError(400, f"We could not parse the JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise payloads.RequestError(400, "The request body must be a JSON object.")
    return body


class LocalModelServer(LocalService):
    """Answers with `echo: <last user message>` (its ``## [Input]`` section, when it is composed
    as BitBrat's llm-bot composes it) unless scripted; faults are opt-in per call."""

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        port: int = 0,
        extra_models: Iterable[str] = (),
    ) -> None:
        self.model = model
        self.extra_models = tuple(extra_models)
        self.latency_ms: float = 0.0  # of generation calls: embeddings answer at once
        self._port = port
        self._lock = threading.Lock()
        self._generation = 0  # bumped by reset()
        self._requests: list[RecordedRequest] = []
        self._turns: deque[Reply] = deque()
        self._bodies: deque[JsonObject] = deque()  # answered as they are, before any turn
        self._always: tuple[str, JsonObject] | None = None
        # Standing replies to requests whose last user message starts with a prefix.
        self._standing: dict[str, str] = {}
        # Faults per kind of call: a test failing the model usually wants embeddings to work.
        self._failures: dict[CallKind, deque[tuple[int, str]]] = {k: deque() for k in KINDS}
        self._hangs: dict[CallKind, deque[float]] = {k: deque() for k in KINDS}
        self._httpd: JsonHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._routes: dict[tuple[str, str], Callable[[JsonObject | None], JsonObject]] = {
            ("POST", CHAT_PATH): self._chat,
            ("POST", RESPONSES_PATH): self._responses,
            ("POST", EMBEDDINGS_PATH): self._embeddings,
            ("GET", MODELS_PATH): self._models,
        }

    # lifecycle

    def start(self) -> Self:
        """Binds loopback only; a restart reuses the first port so clients can reconnect."""
        if self._httpd is not None:
            raise RuntimeError("LocalModelServer is already running")
        self._stopping = threading.Event()
        self._httpd = JsonHTTPServer(
            ("127.0.0.1", self._port),
            self._answer,
            _error(500, "The local model server failed; see its log."),
        )
        self._port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"local-model-server-{self._port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Also cuts open keep-alive connections and wakes hung calls, so nothing outlives it."""
        httpd, thread = self._httpd, self._thread
        if httpd is None or thread is None:
            return
        self._httpd, self._thread = None, None
        self._stopping.set()
        httpd.shutdown()
        httpd.close_connections()
        httpd.server_close()
        thread.join(timeout=5)

    @property
    def port(self) -> int:
        if not self._port:
            raise RuntimeError("LocalModelServer has not been started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    # records

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot; the server keeps appending from its own threads."""
        with self._lock:
            return list(self._requests)

    def chat_requests(self) -> list[JsonObject]:
        """Bodies of chat and responses calls: the contexts the model was asked to answer."""
        return [
            r.body
            for r in self.requests
            if r.path in (CHAT_PATH, RESPONSES_PATH) and r.body is not None
        ]

    def clear(self) -> None:
        with self._lock:
            self._requests.clear()

    # scripting

    def script_reply(self, text: str) -> None:
        with self._lock:
            self._turns.append(Reply(text=text))

    def script_tool_call(
        self, name: str, arguments: Mapping[str, Any], call_id: str | None = None
    ) -> str:
        """Returns the call id so a test can match the tool result it expects back."""
        call = _new_call(name, arguments, call_id)
        with self._lock:
            self._turns.append(Reply(tool_calls=(call,)))
        return call.call_id

    def script_tool_calls(self, calls: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
        """One assistant turn carrying several parallel tool calls."""
        turn = tuple(_new_call(name, arguments) for name, arguments in calls)
        if not turn:
            raise ValueError("script_tool_calls needs at least one call")
        with self._lock:
            self._turns.append(Reply(tool_calls=turn))
        return [call.call_id for call in turn]

    def script_body(self, body: JsonObject) -> None:
        """The next chat or responses call is answered ``body`` as it is, with status 200: a
        reply no real endpoint should send (a field of the wrong type, a missing one)."""
        with self._lock:
            self._bodies.append(body)

    def always_call_tool(self, name: str, arguments: Mapping[str, Any] | None = None) -> None:
        """Makes the model never stop calling tools, to test the bound on tool rounds."""
        with self._lock:
            self._always = (name, dict(arguments or {}))

    def reply_to_prefix(self, prefix: str, text: str) -> None:
        """Answer ``text`` to every unscripted request whose last user message starts with
        ``prefix`` (a background task's request, say, among a benchmark's echoes)."""
        with self._lock:
            self._standing[prefix] = text

    def clear_always_tool(self) -> None:
        with self._lock:
            self._always = None

    def fail_next(
        self,
        n: int = 1,
        status: int = 500,
        message: str | None = None,
        kind: CallKind = "generation",
    ) -> None:
        """The next n calls of ``kind`` (chat/responses, or embeddings) fail with ``status``."""
        if n < 0 or not 400 <= status <= 599:
            raise ValueError("fail_next needs n >= 0 and a 4xx or 5xx status")
        text = message or f"Injected failure with status {status}."
        with self._lock:
            self._failures[kind].extend([(status, text)] * n)

    def hang_next(self, n: int = 1, seconds: float = 5.0, kind: CallKind = "generation") -> None:
        """Delays the next n calls of ``kind`` past a client's timeout; stop() cuts it short."""
        if n < 0 or seconds < 0:
            raise ValueError("hang_next needs n >= 0 and seconds >= 0")
        with self._lock:
            self._hangs[kind].extend([seconds] * n)

    def reset(self) -> None:
        with self._lock:
            self._generation += 1
            self._requests.clear()
            self._turns.clear()
            self._bodies.clear()
            self._always = None
            self._standing.clear()
            for kind in KINDS:
                self._failures[kind].clear()
                self._hangs[kind].clear()
        self.latency_ms = 0.0

    # request handling (called from server threads)

    def _answer(
        self, method: str, target: str, headers: dict[str, str], raw: bytes
    ) -> Answer | None:
        """None means drop the connection without answering (the server is stopping)."""
        path = urlsplit(target).path
        try:
            body, bad_body = _decode_body(raw), None
        except payloads.RequestError as exc:
            body, bad_body = None, exc
        with self._lock:
            self._requests.append(RecordedRequest(method, path, body, headers, time.time()))
        route = self._routes.get((method, path))
        if route is None:
            return _error(404, f"Unknown request URL: {method} {path}.")
        if bad_body is not None:
            return _error(bad_body.status, bad_body.message)
        if path in _MODEL_CALL_PATHS:
            kind: CallKind = "embeddings" if path == EMBEDDINGS_PATH else "generation"
            with self._lock:
                hangs, failures = self._hangs[kind], self._failures[kind]
                hang = hangs.popleft() if hangs else 0.0
                failure = failures.popleft() if failures else None
                generation = self._generation
            latency = self.latency_ms / 1000 if kind == "generation" else 0.0
            if self._stopping.wait(hang + latency) or generation != self._generation:
                # Stopping, or reset while this request waited: its client gave up long ago,
                # and it must not take a reply scripted for the next test.
                return None
            if failure is not None:
                return _error(*failure)
            if kind == "generation":
                with self._lock:
                    scripted = self._bodies.popleft() if self._bodies else None
                if scripted is not None:
                    return Answer(200, scripted)
        try:
            return Answer(200, route(body))
        except payloads.RequestError as exc:
            return _error(exc.status, exc.message)

    def _require(self, body: JsonObject | None) -> JsonObject:
        if body is None:
            raise payloads.RequestError(400, "A JSON request body is required.")
        return body

    def _chat(self, body: JsonObject | None) -> JsonObject:
        conversation = payloads.read_chat(self._require(body))
        return payloads.chat_completion(self._reply(conversation), conversation, self.model)

    def _responses(self, body: JsonObject | None) -> JsonObject:
        request = self._require(body)
        conversation = payloads.read_responses(request)
        reply = self._reply(conversation)
        return payloads.response_object(reply, conversation, self.model, request)

    def _embeddings(self, body: JsonObject | None) -> JsonObject:
        return payloads.embeddings(self._require(body), self.model)

    def _models(self, body: JsonObject | None) -> JsonObject:
        return payloads.models_list([self.model, *self.extra_models])

    def _reply(self, conversation: Conversation) -> Reply:
        """Priority: always-tool, then the script queue, then cues, then the echo."""
        offers_tools = bool(conversation.tool_names)
        with self._lock:
            if offers_tools and self._always is not None:
                return Reply(tool_calls=(_new_call(*self._always),))
            turn = self._take_turn(offers_tools)
        if turn is not None:
            return turn
        with self._lock:
            standing = [
                t for p, t in self._standing.items() if conversation.last_user_text.startswith(p)
            ]
        if standing:
            return Reply(text=standing[0])
        if not conversation.ends_with_tool_result:
            cued = tuple(
                _new_call(name, arguments)
                for name, arguments in payloads.find_cues(conversation.last_user_text)
                if name in conversation.tool_names
            )
            if cued:
                return Reply(tool_calls=cued)
        return Reply(text="echo: " + payloads.spoken_text(conversation.last_user_text))

    def _take_turn(self, offers_tools: bool) -> Reply | None:
        """A call without tools skips queued tool turns (they wait for a call that can take
        them), so an interleaved tool-less call such as a summary does not eat the script."""
        for index, turn in enumerate(self._turns):
            if offers_tools or not turn.tool_calls:
                del self._turns[index]
                return turn
        return None
