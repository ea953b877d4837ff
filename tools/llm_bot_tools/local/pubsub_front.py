"""A gRPC front for the Pub/Sub emulator that releases a streaming pull whose client went away.

The emulator (0.8.x) ends its side of a ``StreamingPull`` only when the client half-closes
the request stream. A cancelled call or a dropped connection, which is how the Python client
closes its stream and how a killed process leaves, goes unnoticed: the emulator keeps pulling
the subscription for that stream every 50 ms and leases what it takes, for the stream's ack
deadline, to nobody. A worker restarted on the subscription, or a second one sharing it, then
gets those messages only when a lease runs out and it wins the next pull, in 10 s waves.
Real Pub/Sub drops a stream with its connection.

Workers under test reach the emulator through this front. Every call is passed through as
bytes; when a client cancels or disconnects, the front ends the call's request stream towards
the emulator, which then closes its stream as real Pub/Sub would: what the client held, and
what the emulator sent in the moment it took to notice, comes back once its lease runs out;
nothing later is taken for it.
"""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Self

import grpc
from google.pubsub_v1.types import StreamingPullRequest

from llm_bot_tools.local.lifecycle import LocalService

STREAMING_PULL = "/google.pubsub.v1.Subscriber/StreamingPull"
# Each call in progress holds one thread, a streaming pull for the whole life of its worker.
_MAX_CALLS = 128
_UNLIMITED = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
# A call without a deadline reports one in the far future, which as a timeout would overflow.
_NO_DEADLINE_S = 365 * 24 * 3600.0


class PubSubFront(LocalService):
    """Relays every call to the emulator at ``emulator_host``, from a free loopback port."""

    def __init__(self, emulator_host: str) -> None:
        self._emulator_host = emulator_host
        self._channel: grpc.Channel | None = None
        self._server: grpc.Server | None = None
        self._port: int | None = None
        self._streams = _OpenStreams()

    @property
    def host(self) -> str:
        if self._port is None:
            raise RuntimeError("pubsub front not started")
        return f"127.0.0.1:{self._port}"

    def streams(self, subscription: str) -> int:
        """Streaming pulls the emulator still serves on ``subscription`` (a full path)."""
        return self._streams.count(subscription)

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._channel = grpc.insecure_channel(self._emulator_host, options=_UNLIMITED)
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=_MAX_CALLS, thread_name_prefix="pubsub-front"),
            handlers=[_Relay(self._channel, self._streams)],
            options=_UNLIMITED,
        )
        self._port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        server, channel, self._server, self._channel = self._server, self._channel, None, None
        if server is not None:
            server.stop(grace=None).wait()
        if channel is not None:
            channel.close()


class _OpenStreams:
    """Streaming pulls in progress by subscription, counted until the emulator ends each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: Counter[str] = Counter()

    def count(self, subscription: str) -> int:
        with self._lock:
            return self._open[subscription]

    def opened(self, subscription: str) -> None:
        with self._lock:
            self._open[subscription] += 1

    def ended(self, subscription: str) -> None:
        with self._lock:
            self._open[subscription] -= 1


class _Relay(grpc.GenericRpcHandler):  # type: ignore[misc]  # grpc is untyped
    """Any method, as a bidirectional stream of bytes: the wire form of every gRPC call."""

    def __init__(self, channel: grpc.Channel, streams: _OpenStreams) -> None:
        self._channel = channel
        self._streams = streams

    def service(self, details: Any) -> Any:
        method: str = details.method
        upstream = self._channel.stream_stream(method)

        def relay(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
            metadata = [
                (key, value)
                for key, value in context.invocation_metadata()
                if not key.startswith((":", "grpc-")) and key != "user-agent"
            ]
            forwarded = _until_gone(requests)
            if method == STREAMING_PULL:
                first = next(forwarded, None)
                if first is None:  # the client left before asking for anything
                    return
                forwarded = itertools.chain([first], forwarded)
            call = upstream(forwarded, metadata=metadata, timeout=_timeout(context))
            if method == STREAMING_PULL:
                subscription = StreamingPullRequest.deserialize(first).subscription
                self._streams.opened(subscription)
                call.add_done_callback(lambda _: self._streams.ended(subscription))
            try:
                yield from call
            except grpc.RpcError as error:
                context.abort(error.code(), error.details() or "")

        return grpc.stream_stream_rpc_method_handler(relay)


def _timeout(context: Any) -> float | None:
    remaining: float = context.time_remaining()
    return remaining if remaining < _NO_DEADLINE_S else None


def _until_gone(requests: Iterator[bytes]) -> Iterator[bytes]:
    """The client's requests, ending (a half-close upstream) when the client cancels or leaves."""
    try:
        yield from requests
    except grpc.RpcError:
        return
