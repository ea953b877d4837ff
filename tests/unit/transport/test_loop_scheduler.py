"""The subscriber's scheduler: client callbacks run on the event loop, or hand back."""

from __future__ import annotations

import asyncio
import queue
import threading

from google.cloud.pubsub_v1.subscriber._protocol import requests
from google.cloud.pubsub_v1.subscriber.message import Message
from google.pubsub_v1 import types

from llm_bot.transport.subscriber import LoopScheduler


def pulled(client_requests: queue.Queue[object]) -> Message:
    proto = types.PubsubMessage(data=b"x", message_id="1")
    return Message(types.PubsubMessage.pb(proto), "ack-1", 1, client_requests)


async def test_callbacks_run_on_the_loop_thread() -> None:
    loop = asyncio.get_running_loop()
    ran: asyncio.Future[tuple[Message, int]] = loop.create_future()
    scheduler = LoopScheduler(loop)
    message = pulled(scheduler.queue)

    def callback(received: Message) -> None:
        ran.set_result((received, threading.get_ident()))

    # From a client thread, as the streaming pull calls it.
    await asyncio.to_thread(scheduler.schedule, callback, message)
    assert await asyncio.wait_for(ran, 5) == (message, threading.get_ident())
    assert scheduler.shutdown() == []


def test_a_message_is_nacked_when_the_loop_is_gone() -> None:
    loop = asyncio.new_event_loop()
    loop.close()
    scheduler = LoopScheduler(loop)
    message = pulled(scheduler.queue)
    scheduler.schedule(lambda m: None, message)
    request = scheduler.queue.get_nowait()
    assert isinstance(request, requests.NackRequest)
    assert request.ack_id == "ack-1"
