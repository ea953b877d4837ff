"""The name our spans and metrics carry, so a dashboard joins them under one service."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

SERVICE_NAME = "llm-bot"


def service_resource() -> Resource:
    return Resource.create({"service.name": SERVICE_NAME})
