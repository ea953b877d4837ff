"""Settings: defaults, one-line errors, and agreement with architecture.yaml and the README."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from llm_bot.settings import Settings, SettingsError, load_settings

ROOT = Path(__file__).resolve().parents[3]


def documented_settings() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "architecture.yaml").read_text())
    settings: dict[str, Any] = document["settings"]
    return settings


def code_defaults() -> dict[str, Any]:
    defaults = {}
    for field in Settings.model_fields.values():
        assert field.alias is not None
        defaults[field.alias] = field.default
    return defaults


def test_architecture_yaml_lists_every_variable_with_the_code_default() -> None:
    documented = {name: entry["default"] for name, entry in documented_settings().items()}
    assert documented == code_defaults()


def test_every_variable_has_a_meaning_and_a_row_in_the_readme() -> None:
    readme = (ROOT / "README.md").read_text()
    for name, entry in documented_settings().items():
        assert entry.get("meaning"), name
        assert f"| `{name}` |" in readme, f"README configuration table lacks {name}"


def test_defaults_from_the_design(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in code_defaults():
        monkeypatch.delenv(name, raising=False)
    settings = load_settings()
    assert (settings.memory_max_messages, settings.memory_max_chars) == (8, 8000)
    assert (settings.context_pairs, settings.session_idle_seconds) == (15, 21600)
    assert settings.input_topic == "internal.llmbot.v1"


def test_environment_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_BOT_MEMORY_MAX_MESSAGES", "4")
    monkeypatch.setenv("OPENAI_API_MODE", "responses")
    settings = load_settings()
    assert (settings.memory_max_messages, settings.openai_api_mode) == (4, "responses")


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("LLM_BOT_MEMORY_MAX_MESSAGES", "abc", "valid integer"),
        ("LLM_BOT_MEMORY_MAX_CHARS", "0", "greater than or equal to 1"),
        ("MEMORY_SIMILARITY_THRESHOLD", "1.5", "less than or equal to 1"),
        ("OPENAI_API_MODE", "soap", "'chat' or 'responses'"),
        ("MEMORY_EMBEDDING_DIMENSIONS", "16001", "less than or equal to 16000"),
    ],
)
def test_a_bad_value_names_the_variable_and_the_rule(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, rule: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(SettingsError) as raised:
        load_settings()
    message = str(raised.value)
    assert message.startswith(f"{name}: ")
    assert rule in message
    assert "\n" not in message


def test_a_bad_secret_is_not_echoed(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(DATABASE_URL=["sk-very-secret"])
    assert "sk-very-secret" not in str(raised.value)


def test_bad_start_up_value_exits_2_with_one_line() -> None:
    env = {"LLM_BOT_MEMORY_MAX_MESSAGES": "abc", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "llm_bot.cli", "schema"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "llm-bot: configuration error: LLM_BOT_MEMORY_MAX_MESSAGES: Input should be a valid "
        "integer, unable to parse string as an integer (got 'abc')"
    ]


BITBRAT_NAMES = {
    "openai_model": ("OPENAI_MODEL", "LLM_MODEL"),
    "openai_base_url": ("OPENAI_BASE_URL", "LLM_BASE_URL"),
    "openai_api_key": ("OPENAI_API_KEY", "LLM_API_KEY"),
}


def _value(settings: Settings, field: str) -> Any:
    value = getattr(settings, field)
    return value.get_secret_value() if hasattr(value, "get_secret_value") else value


@pytest.fixture
def no_model_variables(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for names in BITBRAT_NAMES.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(ROOT / "tests")  # no .env of the working copy
    return monkeypatch


@pytest.mark.parametrize("field", sorted(BITBRAT_NAMES))
@pytest.mark.parametrize("which", [0, 1])
def test_ours_and_bitbrats_variable_names_each_work_alone(
    no_model_variables: pytest.MonkeyPatch, field: str, which: int
) -> None:
    no_model_variables.setenv(BITBRAT_NAMES[field][which], "http://one/v1")
    assert _value(load_settings(), field) == "http://one/v1"


@pytest.mark.parametrize("field", sorted(BITBRAT_NAMES))
def test_our_name_wins_when_both_are_set(
    no_model_variables: pytest.MonkeyPatch, field: str
) -> None:
    ours, theirs = BITBRAT_NAMES[field]
    no_model_variables.setenv(theirs, "http://bitbrat/v1")
    no_model_variables.setenv(ours, "http://ours/v1")
    assert _value(load_settings(), field) == "http://ours/v1"


@pytest.mark.parametrize("value", ["n/a", "N/A", ""])
@pytest.mark.parametrize("name", ["LLM_BASE_URL", "OPENAI_BASE_URL"])
def test_an_na_or_empty_base_url_is_unset(
    no_model_variables: pytest.MonkeyPatch, name: str, value: str
) -> None:
    no_model_variables.setenv(name, value)
    assert load_settings().openai_base_url is None


URL_VARIABLES = (
    "OPENAI_BASE_URL",
    "MEMORY_EMBEDDING_ENDPOINT",
    "MCP_GATEWAY_URL",
    "LLM_BOT_CONSOLE_IAP_CERTS_URL",
)
UNUSABLE_URLS = [
    "localhost:8080/v1",  # no scheme: read as the scheme "localhost"
    "model-server/v1",
    "ftp://models/v1",
    "http://",
    "http:///v1",
    "http://host:99999/v1",
    "http://host:0/v1",
    "http://host:eighty/v1",
    "http://[::1/v1",
    "http://exa mple.com/v1",
    "http://host/v1\x01",
]


@pytest.mark.parametrize("value", UNUSABLE_URLS)
@pytest.mark.parametrize("name", URL_VARIABLES)
def test_an_endpoint_url_the_http_client_cannot_use_is_refused_at_start(
    name: str, value: str
) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(**{name: value})
    assert str(refused.value).startswith(f"{name}: must be an http:// or https:// URL with a host")


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("https://api.example.com/v1", "https://api.example.com/v1"),
        ("http://127.0.0.1:8080/v1", "http://127.0.0.1:8080/v1"),
        ("http://[::1]:8080/v1", "http://[::1]:8080/v1"),
        ("  http://tool-gateway:3000/sse\n", "http://tool-gateway:3000/sse"),
    ],
)
@pytest.mark.parametrize("name", URL_VARIABLES)
def test_an_endpoint_url_is_kept_without_the_whitespace_around_it(
    name: str, value: str, kept: str
) -> None:
    settings = load_settings(**{name: value})
    assert kept in {
        settings.openai_base_url,
        settings.embedding_endpoint,
        settings.mcp_gateway_url,
        settings.console_iap_certs_url,
    }


@pytest.mark.parametrize("name", ["MEMORY_EMBEDDING_ENDPOINT", "MCP_GATEWAY_URL"])
def test_a_blank_optional_endpoint_is_unset(name: str) -> None:
    settings = load_settings(**{name: "  "})
    assert (settings.embedding_endpoint, settings.mcp_gateway_url) == (None, None)


def test_a_bitbrat_name_is_reported_as_the_variable_that_was_set(
    no_model_variables: pytest.MonkeyPatch,
) -> None:
    no_model_variables.setenv("LLM_BASE_URL", "notaurl")
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert str(refused.value).startswith("LLM_BASE_URL: must be an http")


NAME_VARIABLES = (
    "GOOGLE_CLOUD_PROJECT",
    "OPENAI_MODEL",
    "MEMORY_EMBEDDING_MODEL",
    "LLM_BOT_AGENT_NAME",
)


@pytest.mark.parametrize("value", ["", "   ", "\n"])
@pytest.mark.parametrize("name", NAME_VARIABLES)
def test_a_blank_name_sent_with_every_call_is_refused_at_start(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(**{name: value})
    assert str(refused.value).startswith(f"{name}: must not be blank")


def test_names_are_kept_without_the_whitespace_around_them() -> None:
    settings = load_settings(OPENAI_MODEL=" gpt-4o\n", LLM_BOT_CONSOLIDATION_MODEL="  ")
    assert (settings.openai_model, settings.consolidation_model) == ("gpt-4o", None)


PUBSUB_VARIABLES = (
    "LLM_BOT_INPUT_TOPIC",
    "LLM_BOT_SUBSCRIPTION",
    "LLM_BOT_DEADLETTER_TOPIC",
    "LLM_BOT_CONSOLIDATION_TOPIC",
    "LLM_BOT_CONSOLIDATION_SUBSCRIPTION",
)


@pytest.mark.parametrize(
    "value",
    ["", "  ", "my topic", "ab", "1topic", "goog-topic", "a/b", "dead\u00e9", "x" * 256],
)
@pytest.mark.parametrize("name", PUBSUB_VARIABLES)
def test_a_name_pubsub_refuses_is_refused_at_start(name: str, value: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(**{name: value})
    assert str(refused.value).startswith(f"{name}: must be a Pub/Sub name")


@pytest.mark.parametrize("name", PUBSUB_VARIABLES)
def test_a_pubsub_name_counts_bus_prefix_as_its_start(name: str) -> None:
    settings = load_settings(**{name: " x\n", "BUS_PREFIX": "dev."})
    assert "x" in {
        settings.input_topic,
        settings.subscription,
        settings.deadletter_topic,
        settings.consolidation_topic,
        settings.consolidation_subscription,
    }
    assert load_settings(**{name: "a.b~c+d%e_f-1"})
    with pytest.raises(SettingsError) as refused:
        load_settings(**{name: "g.x", "BUS_PREFIX": "goo"})
    assert f"{name}: must be a Pub/Sub name" in str(refused.value)


@pytest.mark.parametrize("value", ["1dev.", "dev .", "goog.", "dev/"])
def test_a_bus_prefix_no_pubsub_name_may_start_with_is_refused(value: str) -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(BUS_PREFIX=value)
    assert str(refused.value).startswith("BUS_PREFIX: must be empty or start a Pub/Sub name")


def test_a_default_made_too_long_by_bus_prefix_is_reported_by_its_variable() -> None:
    with pytest.raises(SettingsError) as refused:
        load_settings(BUS_PREFIX="p" * 250)
    assert str(refused.value).startswith("LLM_BOT_INPUT_TOPIC: must be a Pub/Sub name")


def test_bitbrats_max_retries_is_accepted_and_ignored(
    no_model_variables: pytest.MonkeyPatch,
) -> None:
    no_model_variables.setenv("OPENAI_MAX_RETRIES", "not even a number")
    settings = load_settings()
    assert "OPENAI_MAX_RETRIES" not in settings.model_dump(by_alias=True)


def test_settings_can_still_be_given_by_our_name() -> None:
    assert load_settings(OPENAI_MODEL="m").openai_model == "m"
    assert load_settings(openai_model="m").openai_model == "m"


PASSWORD = "hunter2-Sekrit"


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"postgresql://bob:{PASSWORD} x@db.internal/app", "the password holds a space"),
        (f"postgresql://bob:{PASSWORD}%zz@db.internal/app", "the password holds a % without"),
        (f"postgresql://bob:{PASSWORD}%@db.internal/app", "the password holds a % without"),
        (f"postgresql://bob:{PASSWORD}%00@db.internal/app", "the password holds %00"),
        (f"postgresql://bob:{PASSWORD}\t@db.internal/app", "control character"),
        (f"postgresql://bob:{PASSWORD}@x@db.internal/app", "the host holds '@'"),
        (f"postgresql://bob:{PASSWORD}/x@db.internal/app", "the database name holds '@'"),
        (f"mysql://bob:{PASSWORD}@db.internal/app", "scheme must be postgresql://"),
        (f"postgresql://bob:{PASSWORD}@db.internal:99999/app", "a port is not a number"),
        (f"postgresql://bob:{PASSWORD}@db.internal/app?port=x", "a port is not a number"),
        (f"postgresql://bob:{PASSWORD}@db.internal/app?colour=red", "parameter 'colour'"),
        (f"postgresql://bob:{PASSWORD}@db.internal/app?sslmode=%zz", "after ? holds a %"),
        (f"host=db.internal password={PASSWORD} x", "not a postgresql:// URL"),
        (PASSWORD, "not a postgresql:// URL"),
    ],
)
def test_a_malformed_database_url_names_its_flaw_and_never_shows_the_password(
    url: str, problem: str
) -> None:
    with pytest.raises(SettingsError) as raised:
        load_settings(DATABASE_URL=url)
    message = str(raised.value)
    assert message.startswith("DATABASE_URL: ")
    assert problem in message
    assert PASSWORD not in message
    assert "\n" not in message
    with pytest.raises(ValidationError) as rendered:  # wherever pydantic's error is printed
        Settings(DATABASE_URL=url)  # type: ignore[call-arg]
    assert PASSWORD not in str(rendered.value)
    assert PASSWORD not in repr(rendered.value)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres@/postgres?host=/srv/postgres&port=5432",  # llm-bot dev's
        "postgres://bob:p%40ss%2Fw%20rd@db.internal:5432/app?sslmode=require",
        "postgresql://bob:p:ss?word@db.internal/app",  # libpq ends the password at '@'
        "postgresql://bob:pw@[::1]:5432,db2.internal:5433/app",
        "postgresql://bob:pw@/app?host=/cloudsql/project:region:instance",
        "host=/tmp dbname=app user=bob password='p w'",
    ],
)
def test_well_formed_database_urls_are_kept_as_given(url: str) -> None:
    settings = load_settings(DATABASE_URL=url)
    assert settings.database_url is not None
    assert settings.database_url.get_secret_value() == url


def test_an_empty_database_url_is_unset_and_surrounding_whitespace_is_no_part_of_one() -> None:
    assert load_settings(DATABASE_URL=" ").database_url is None
    settings = load_settings(DATABASE_URL=" postgresql://bob:pw@db.internal/app\n")
    assert settings.database_url is not None
    assert settings.database_url.get_secret_value() == "postgresql://bob:pw@db.internal/app"
