"""What the worker checks of its subscription before it takes work.

Without a dead-letter policy, Pub/Sub counts no delivery attempts (every delivery says "1")
and redelivers a failing message until its retention ends. llm-bot bounds the attempts of what
it processes with its own count, but a message that fails before that count is written (the
database down, say) depends on the subscription's policy. So a missing policy is reported at
start: a warning, or a refusal to start with ``LLM_BOT_REQUIRE_DEAD_LETTER_POLICY=true``.
"""

from __future__ import annotations

import asyncio

from google.api_core.exceptions import GoogleAPICallError
from google.cloud import pubsub_v1

CHECK_TIMEOUT_S = 10.0


async def dead_letter_problem(
    client: pubsub_v1.SubscriberClient, path: str, max_delivery_attempts: int, topic: str
) -> str | None:
    """What is wrong with the subscription's dead-letter policy, or None when it is sound:
    among others, a policy whose topic is not ``topic`` (a path), where llm-bot writes each
    dead letter with its reason. Two topics would split what failed in two places, and a
    ``LLM_BOT_DEADLETTER_TOPIC`` that names no topic would lose every reason: the publish
    fails, and the message reaches the policy's topic without it after its attempts."""
    try:
        subscription = await asyncio.to_thread(
            client.get_subscription, subscription=path, timeout=CHECK_TIMEOUT_S
        )
    except GoogleAPICallError as error:
        return (
            f"could not read {path} to check its dead-letter policy ({type(error).__name__});"
            " the check needs pubsub.subscriptions.get (roles/pubsub.viewer)"
        )
    policy = subscription.dead_letter_policy
    if not policy.dead_letter_topic:
        return (
            f"{path} has no dead-letter policy: a message that fails before llm-bot records it"
            " is redelivered until it expires; deploy/pubsub.sh sets one"
        )
    if policy.dead_letter_topic != topic:
        return (
            f"{path} dead-letters to {policy.dead_letter_topic}, but llm-bot writes each"
            f" reason to {topic} (LLM_BOT_DEADLETTER_TOPIC); make them the same topic"
        )
    if policy.max_delivery_attempts < max_delivery_attempts:
        return (
            f"{path} dead-letters after {policy.max_delivery_attempts} delivery attempts, before"
            f" llm-bot forwards a failing event as ERROR at LLM_BOT_MAX_DELIVERY_ATTEMPTS="
            f"{max_delivery_attempts}; make them equal"
        )
    return None
