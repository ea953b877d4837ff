"""The service name on spans and metrics: ours by default, the standard variables' when set."""

from __future__ import annotations

import pytest

from llm_bot.telemetry.resource import service_resource


@pytest.fixture(autouse=True)
def no_resource_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)


def test_the_service_is_llm_bot_by_default() -> None:
    assert service_resource().attributes["service.name"] == "llm-bot"


def test_otel_service_name_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifests set it, and it wins over the code's own name."""
    monkeypatch.setenv("OTEL_SERVICE_NAME", "llm-bot-staging")
    assert service_resource().attributes["service.name"] == "llm-bot-staging"


def test_service_name_in_otel_resource_attributes_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.name=bot-b,deployment.environment=x")
    attributes = service_resource().attributes
    assert (attributes["service.name"], attributes["deployment.environment"]) == ("bot-b", "x")
