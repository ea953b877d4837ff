"""A measurement on a fresh clone embeds with the local model when nothing names an embeddings
API, and with whatever is named otherwise: a provider, a key or an endpoint."""

from __future__ import annotations

import pytest

from llm_bot.settings import load_settings
from llm_bot_tools.cli.measurements import embeddings_for_measurements

NAMING = ("MEMORY_EMBEDDING_PROVIDER", "OPENAI_API_KEY", "LLM_API_KEY", "OPENAI_BASE_URL")


@pytest.fixture(autouse=True)
def _unnamed(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*NAMING, "LLM_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_nothing_named_means_the_local_embedder_and_it_is_said(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert embeddings_for_measurements(load_settings()).embedding_provider == "local"
    assert "local all-MiniLM-L6-v2" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("variable", "value", "provider"),
    [
        ("MEMORY_EMBEDDING_PROVIDER", "openai", "openai"),
        ("OPENAI_API_KEY", "sk-test", "openai"),
        ("OPENAI_BASE_URL", "http://127.0.0.1:9/v1", "openai"),
    ],
)
def test_a_named_api_is_kept(
    variable: str, value: str, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    assert embeddings_for_measurements(load_settings()).embedding_provider == provider
