"""Pub/Sub in and out: streaming pull into the event loop, publishing, ack decisions."""

from llm_bot.transport.ack import Delivery, settle
from llm_bot.transport.clients import publisher_client, subscriber_client
from llm_bot.transport.handler import EventHandler
from llm_bot.transport.publisher import Publisher, PublishFailed
from llm_bot.transport.stats import WorkerStats
from llm_bot.transport.subscriber import StreamingSubscriber

__all__ = [
    "Delivery",
    "EventHandler",
    "PublishFailed",
    "Publisher",
    "StreamingSubscriber",
    "WorkerStats",
    "publisher_client",
    "settle",
    "subscriber_client",
]
