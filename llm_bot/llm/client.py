"""The model call: one place that talks to an OpenAI-compatible endpoint.

The ``openai`` client's own retries are off; tenacity retries transient failures (429, 5xx,
timeouts, connection errors) with jittered exponential backoff inside one total deadline, so
the time an event can spend waiting on the model is bounded no matter how the failures mix.
Whatever still fails leaves as a :class:`~llm_bot.llm.errors.ModelError` whose class tells the
worker whether a redelivery can help.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import openai
from opentelemetry.trace import SpanKind
from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception_type,
    stop_before_delay,
    wait_random_exponential,
)

from llm_bot.llm import errors, openai_format
from llm_bot.llm.http import openai_client
from llm_bot.llm.messages import ChatMessage, ModelReply, ToolSpec
from llm_bot.settings import Settings
from llm_bot.telemetry import metrics
from llm_bot.telemetry.traces import child_span

logger = logging.getLogger(__name__)

TRANSIENT = (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError)


class ModelClient:
    """Chat Completions (default) or Responses API, with bounded retries."""

    def __init__(
        self,
        client: openai.AsyncOpenAI,
        model: str,
        mode: str,
        deadline_s: float,
        *,
        max_tokens: int | None = None,
    ) -> None:
        self._client = client
        self.model = model
        self._mode = mode
        self._deadline_s = deadline_s
        self._max_tokens = max_tokens

    @classmethod
    def from_settings(
        cls, settings: Settings, *, model: str | None = None, max_tokens: int | None = None
    ) -> ModelClient:
        """The configured endpoint; ``model`` and ``max_tokens`` replace the answering's
        (consolidation may name a cheaper model and bounds its replies)."""
        client = openai_client(
            settings.openai_api_key, settings.openai_base_url, settings.openai_timeout_ms / 1000
        )
        return cls(
            client,
            model or settings.openai_model,
            settings.openai_api_mode,
            settings.model_deadline_ms / 1000,
            max_tokens=max_tokens or settings.openai_max_tokens,
        )

    async def close(self) -> None:
        await self._client.close()

    async def complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], model: str | None = None
    ) -> ModelReply:
        """One model turn; tools may be empty to demand a text answer. ``model`` replaces the
        configured model for this call (an event's personality may name one)."""
        model = model or self.model
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": model,
        }
        with child_span(f"chat {model}", kind=SpanKind.CLIENT, attributes=attributes) as span:
            reply = await self._complete(messages, tools, model)
            span.set_attributes(
                {
                    "gen_ai.response.model": reply.model,
                    "gen_ai.usage.input_tokens": reply.usage.input_tokens,
                    "gen_ai.usage.output_tokens": reply.usage.output_tokens,
                }
            )
        metrics.model_tokens.add(reply.usage.input_tokens, {"direction": "input"})
        metrics.model_tokens.add(reply.usage.output_tokens, {"direction": "output"})
        return reply

    async def _complete(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], model: str
    ) -> ModelReply:
        try:
            async with asyncio.timeout(self._deadline_s):
                async for attempt in AsyncRetrying(
                    retry=retry_if_exception_type(TRANSIENT),
                    wait=wait_random_exponential(multiplier=0.25, max=8),
                    stop=stop_before_delay(self._deadline_s),
                    before_sleep=_log_retry,
                    reraise=True,
                ):
                    with attempt:
                        return await self._request(messages, tools, model)
        except TimeoutError:
            raise errors.ModelTimeout(
                f"model gave no answer within {self._deadline_s:g} s"
            ) from None
        except openai.OpenAIError as error:
            raise classify(error) from None
        raise RuntimeError("unreachable: tenacity either returns or re-raises")

    async def _request(
        self, messages: Sequence[ChatMessage], tools: Sequence[ToolSpec], model: str
    ) -> ModelReply:
        if self._mode == "responses":
            response = await self._client.responses.create(
                model=model,
                **openai_format.responses_request(messages, tools, max_tokens=self._max_tokens),
            )
            return openai_format.parse_responses_reply(response)
        # ``post`` is the client's documented door for raw requests. ``create`` would walk every
        # message through its TypedDict transform and build its pydantic models from the reply,
        # each about a third of the request's CPU, for a plain, already JSON-shaped exchange.
        raw = await self._client.post(
            "/chat/completions",
            body={
                "model": model,
                **openai_format.chat_request(messages, tools, max_tokens=self._max_tokens),
            },
            cast_to=bytes,
            options=openai_format.RAW_REQUEST_OPTIONS,
        )
        return openai_format.parse_chat_reply(raw)


def classify(error: openai.OpenAIError) -> errors.ModelError:
    """Map an ``openai`` exception to our error classes, keeping only safe details."""
    name = type(error).__name__
    status = getattr(error, "status_code", None)
    detail = f"{name} (HTTP {status})" if status else name
    if isinstance(error, openai.APITimeoutError):
        return errors.ModelTimeout(f"model request timed out: {detail}")
    if isinstance(error, TRANSIENT):
        return errors.ModelUnavailable(f"model unavailable after retries: {detail}")
    if isinstance(error, openai.AuthenticationError | openai.PermissionDeniedError):
        return errors.ModelAuthFailed(f"model endpoint refused the credentials: {detail}")
    if isinstance(error, openai.ContentFilterFinishReasonError):
        return errors.ModelRefused(f"model output stopped by a content filter: {detail}")
    return errors.ModelRequestInvalid(f"model rejected the request: {detail}")


def _log_retry(state: RetryCallState) -> None:
    metrics.retries.add(1, {"dependency": "model"})
    outcome = state.outcome
    cause = type(outcome.exception()).__name__ if outcome and outcome.failed else "unknown"
    logger.warning(
        "model call failed, retrying",
        extra={"attempt": state.attempt_number, "cause": cause},
    )
