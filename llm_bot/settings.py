"""Every knob of the service in one pydantic-settings class.

The same variables configure production and the local stack, so a deployment differs from a
laptop only in values, never in code paths. The names are the service's contract, listed in
architecture.yaml (some carry the ``LLM_BOT_`` prefix, some do not); each field's alias is the
environment variable.
"""

from __future__ import annotations

import os
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError
from pydantic_settings import BaseSettings, SettingsConfigDict

from llm_bot.bus_names import is_pubsub_name, prefixed
from llm_bot.database_url import check_database_url

Count = Annotated[int, Field(ge=1)]
# pgvector's largest vector (and halfvec): a larger embedding is refused by every statement
# that stores or searches one, which dead-letters each event as a rejected write.
MAX_VECTOR_DIMENSIONS = 16_000
Millis = Annotated[int, Field(ge=1)]
NonNegative = Annotated[int, Field(ge=0)]
Similarity = Annotated[float, Field(ge=-1.0, le=1.0)]

# Measured on eval/memory_pairs.jsonl (best F1); 0.7 is the design's value for large API models.
CALIBRATED_THRESHOLDS = {"openai": 0.7, "local": 0.2}
CONSOLE_LOOPBACK = "127.0.0.1"

_SECRET_VARIABLES = frozenset(
    {
        "OPENAI_API_KEY",
        "LLM_API_KEY",
        "DATABASE_URL",
        "MCP_AUTH_TOKEN",
        "MCP_GATEWAY_URL",
        "LLM_BOT_CONSOLE_TOKEN",
    }
)


class Settings(BaseSettings):
    """Runtime configuration, loaded once at start-up from the environment (and ``.env``)."""

    model_config = SettingsConfigDict(
        env_file=".env",
        extra="ignore",
        populate_by_name=True,
        frozen=True,
        hide_input_in_errors=True,  # a ValidationError rendered anywhere shows no secret
    )

    # --- bus -------------------------------------------------------------------------------
    google_cloud_project: str = Field("llm-bot-local", alias="GOOGLE_CLOUD_PROJECT")
    pubsub_emulator_host: str | None = Field(None, alias="PUBSUB_EMULATOR_HOST")
    bus_prefix: str = Field("", alias="BUS_PREFIX")
    input_topic: str = Field("internal.llmbot.v1", alias="LLM_BOT_INPUT_TOPIC")
    subscription: str = Field("internal.llmbot.v1.llm-bot", alias="LLM_BOT_SUBSCRIPTION")
    deadletter_topic: str = Field("internal.deadletter.v1", alias="LLM_BOT_DEADLETTER_TOPIC")
    max_in_flight: Count = Field(32, alias="LLM_BOT_MAX_IN_FLIGHT")
    max_message_bytes: Count = Field(1_048_576, alias="LLM_BOT_MAX_MESSAGE_BYTES")
    ordering: bool = Field(False, alias="LLM_BOT_ORDERING")
    shutdown_grace_s: Annotated[float, Field(gt=0)] = Field(8.0, alias="LLM_BOT_SHUTDOWN_GRACE_S")
    event_loop: Literal["uvloop", "asyncio"] = Field("uvloop", alias="LLM_BOT_EVENT_LOOP")
    lease_extension_s: Annotated[int, Field(ge=10, le=600)] = Field(
        10, alias="LLM_BOT_LEASE_EXTENSION_S"
    )
    port: Annotated[int, Field(ge=1, le=65535)] = Field(8080, alias="PORT")
    max_delivery_attempts: Count = Field(5, alias="LLM_BOT_MAX_DELIVERY_ATTEMPTS")
    event_deadline_ms: Millis = Field(120_000, alias="LLM_BOT_EVENT_DEADLINE_MS")
    max_response_ms: Millis = Field(600_000, alias="LLM_BOT_MAX_RESPONSE_MS")
    claim_lease_s: Annotated[float, Field(ge=1, le=600)] = Field(
        10.0, alias="LLM_BOT_CLAIM_LEASE_S"
    )
    max_slip_steps: Count = Field(32, alias="LLM_BOT_MAX_SLIP_STEPS")
    require_dead_letter_policy: bool = Field(False, alias="LLM_BOT_REQUIRE_DEAD_LETTER_POLICY")

    # --- memory consolidation (llm_bot/consolidation; README, "Memory consolidation") --------
    # Off by default: it spends a model call per closed session, and its topic and
    # subscription must exist on the bus (deploy/pubsub.sh makes them) before a worker turns
    # it on.
    consolidation: bool = Field(False, alias="LLM_BOT_CONSOLIDATION")
    consolidation_topic: str = Field(
        "internal.llmbot.consolidate.v1", alias="LLM_BOT_CONSOLIDATION_TOPIC"
    )
    consolidation_subscription: str = Field(
        "internal.llmbot.consolidate.v1.llm-bot", alias="LLM_BOT_CONSOLIDATION_SUBSCRIPTION"
    )
    consolidation_model: str | None = Field(None, alias="LLM_BOT_CONSOLIDATION_MODEL")
    consolidation_max_in_flight: Count = Field(2, alias="LLM_BOT_CONSOLIDATION_MAX_IN_FLIGHT")
    consolidation_sweep_s: Annotated[float, Field(gt=0)] = Field(
        30.0, alias="LLM_BOT_CONSOLIDATION_SWEEP_S"
    )
    consolidation_turn_cap: Annotated[int, Field(ge=2)] = Field(
        40, alias="LLM_BOT_CONSOLIDATION_TURN_CAP"
    )
    consolidation_deadline_s: Annotated[float, Field(gt=0)] = Field(
        120.0, alias="LLM_BOT_CONSOLIDATION_DEADLINE_S"
    )

    # --- database --------------------------------------------------------------------------
    database_url: SecretStr | None = Field(None, alias="DATABASE_URL")
    commit_max_batch: Count = Field(32, alias="LLM_BOT_COMMIT_MAX_BATCH")
    commit_max_delay_ms: Annotated[int, Field(ge=0)] = Field(
        20, alias="LLM_BOT_COMMIT_MAX_DELAY_MS"
    )
    commit_timeout_ms: Millis = Field(10_000, alias="LLM_BOT_COMMIT_TIMEOUT_MS")

    # --- model -----------------------------------------------------------------------------
    # BitBrat's names (LLM_BASE_URL, LLM_API_KEY, LLM_MODEL) are read too; ours win when both
    # are set. BitBrat's OPENAI_MAX_RETRIES is accepted and ignored, as BitBrat ignores it:
    # model retries here are bounded by LLM_BOT_MODEL_DEADLINE_MS, not by a count.
    openai_base_url: str | None = Field(
        None,
        alias="OPENAI_BASE_URL",
        validation_alias=AliasChoices("OPENAI_BASE_URL", "LLM_BASE_URL"),
    )
    openai_api_key: SecretStr | None = Field(
        None,
        alias="OPENAI_API_KEY",
        validation_alias=AliasChoices("OPENAI_API_KEY", "LLM_API_KEY"),
    )
    openai_model: str = Field(
        "gpt-4o-mini",
        alias="OPENAI_MODEL",
        validation_alias=AliasChoices("OPENAI_MODEL", "LLM_MODEL"),
    )
    openai_api_mode: Literal["chat", "responses"] = Field("chat", alias="OPENAI_API_MODE")
    openai_timeout_ms: Millis = Field(30_000, alias="OPENAI_TIMEOUT_MS")
    openai_max_tokens: Count | None = Field(None, alias="OPENAI_MAX_TOKENS")
    model_deadline_ms: Millis = Field(60_000, alias="LLM_BOT_MODEL_DEADLINE_MS")
    # Rounds of tool calls; the model is called once more without tools, so it answers in text.
    # 4 makes BitBrat's bound of 5 model steps (processor.ts: stopWhen: stepCountIs(5)), where
    # BitBrat's 5th step may still call tools and end the run with no text.
    max_tool_rounds: Annotated[int, Field(ge=0)] = Field(4, alias="LLM_BOT_MAX_TOOL_ROUNDS")
    # A chat turn calls a tool or two; a steered model may emit hundreds. Calls beyond these
    # are not run (per model turn) or refused with the reason (memory writes per event).
    max_tool_calls_per_turn: Count = Field(10, alias="LLM_BOT_MAX_TOOL_CALLS_PER_TURN")
    max_memory_writes_per_event: NonNegative = Field(20, alias="MEMORY_MAX_WRITES_PER_EVENT")
    system_prompt: str | None = Field(None, alias="LLM_BOT_SYSTEM_PROMPT")
    # BitBrat's 2 s: an event whose model is still working this long after handling began
    # gets "🤔 Thinking about your request..." on internal.egress.v1, once (0: never;
    # llm_bot/transport/progress.py).
    progress_after_ms: NonNegative = Field(2000, alias="LLM_BOT_PROGRESS_AFTER_MS")
    agent_name: str = Field("llm-bot", alias="LLM_BOT_AGENT_NAME")

    # --- platform tools over MCP (BitBrat's names; llm_bot/platform_tools/) -------------------
    # The tool-gateway's SSE endpoint (BitBrat: http://tool-gateway:3000/sse); unset, no gateway
    # and the worker offers its built-in tools only.
    mcp_gateway_url: str | None = Field(None, alias="MCP_GATEWAY_URL")
    # Sent as x-mcp-token, the header the gateway checks against its own MCP_AUTH_TOKEN.
    mcp_auth_token: SecretStr | None = Field(None, alias="MCP_AUTH_TOKEN")
    # The gateway's transport: BitBrat's gateway serves HTTP + SSE; "streamable-http" reaches an
    # MCP server that serves the current transport at MCP_GATEWAY_URL instead.
    mcp_gateway_transport: Literal["sse", "streamable-http"] = Field(
        "sse", alias="MCP_GATEWAY_TRANSPORT"
    )
    # Reconnect backoff: base * 2^(attempt-1), at most max, +-20% jitter (BitBrat's defaults).
    mcp_reconnect_base_ms: Millis = Field(1000, alias="MCP_RECONNECT_BASE_MS")
    mcp_reconnect_max_ms: Millis = Field(15_000, alias="MCP_RECONNECT_MAX_MS")
    # A ping this often: a gateway that went away unnoticed is found and reconnected.
    mcp_reconnect_monitor_ms: Millis = Field(5000, alias="MCP_RECONNECT_MONITOR_MS")
    # One tool call's limit (BitBrat's 60 s is half our event deadline; a chat reply cannot wait).
    tool_timeout_ms: Millis = Field(15_000, alias="LLM_BOT_TOOL_TIMEOUT_MS")
    # A server's circuit opens after this many calls in a row got no answer (timed out or lost
    # their connection), and its calls then fail at once for the reset timeout, after which one
    # call tries it (BitBrat's 2 and 120 s; llm_bot/platform_tools/breaker.py).
    mcp_circuit_failure_threshold: Count = Field(2, alias="MCP_CIRCUIT_FAILURE_THRESHOLD")
    mcp_circuit_reset_timeout_ms: Millis = Field(120_000, alias="MCP_CIRCUIT_RESET_TIMEOUT_MS")
    # The gateway's tools the model may be offered: comma-separated glob patterns over BitBrat's
    # tool ids (fnmatch; "mcp:*" offers every one that acts for the requester alone; empty:
    # none). A tool whose subject cannot be pinned to the requester (get_state, which reads any
    # key; propose_mutation) is offered only when named by its exact id
    # (platform_tools/subjects.py).
    # The default is the tools of BitBrat's services (0.33.3) that act for the requester alone
    # once their user, channel and destination arguments are set from the event: reading
    # schedules, the story engine (the requester's own adventure), image generation, stream
    # summaries, the requester's own facts in the state engine (get_state_prefix, confined to
    # user.fact.<requester>.), and progress messages to where the reply goes. Left out:
    # get_state (any key, every user's facts), moderation and accounts (ban_user, update_user,
    # create_api_token), operator tools (writing schedules, which publish any event; routing
    # rules; reflexes; state mutations such as OBS scenes; event stream observers; EventSub;
    # every service's bit.* tools: config, flags, log level, shutdown, restart) and any tool
    # not named here (OBS, new services). The built-in tools are not filtered by it.
    tools_allow: str = Field(
        "mcp:list_schedules,mcp:get_schedule,"
        "mcp:start_story,mcp:get_current_scene,mcp:process_action,mcp:commit_scene,"
        "mcp:update_world_state,mcp:generate_image,mcp:summarize_stream,"
        "mcp:get_state_prefix,mcp:agent.sendProgressUpdate",
        alias="LLM_BOT_TOOLS_ALLOW",
    )
    # A platform tool's result is cut to this many characters, with a marker that says how much
    # was left out, before the model reads it and before tool_calls stores it: a result is
    # data for one answer, and the in-run working set (LLM_BOT_MEMORY_MAX_CHARS) must hold it.
    tool_result_max_chars: Count = Field(4000, alias="LLM_BOT_TOOL_RESULT_MAX_CHARS")

    # --- personalities (BitBrat's names and defaults) ----------------------------------------
    # False: personality annotations are ignored (no identity, no constraints, no model).
    personality_enabled: bool = Field(True, alias="PERSONALITY_ENABLED")
    personality_max_annotations: NonNegative = Field(3, alias="PERSONALITY_MAX_ANNOTATIONS")
    personality_max_chars: NonNegative = Field(4000, alias="PERSONALITY_MAX_CHARS")  # 0: no cut
    personality_cache_ttl_ms: NonNegative = Field(300_000, alias="PERSONALITY_CACHE_TTL_MS")
    # --- behaviour layer (BitBrat's flags, under its names) ----------------------------------
    # Off, gating lets refused, escalated and spam messages reach the model; tool filtering
    # offers every tool whatever the risk; guidance leaves the profile out of the prompt.
    behavioral_gating_enabled: bool = Field(True, alias="LLM_BOT_BEHAVIORAL_GATING_ENABLED")
    behavioral_tool_filter_enabled: bool = Field(
        True, alias="LLM_BOT_BEHAVIORAL_TOOL_FILTER_ENABLED"
    )
    behavioral_guidance_enabled: bool = Field(True, alias="LLM_BOT_BEHAVIORAL_GUIDANCE_ENABLED")
    # safe-complete also marks medium privacy, illegal and sexual risk for safe completion
    # (medium self-harm always is); either way they get the canned refusal.
    risk_response_mode: Literal["refuse", "safe-complete"] = Field(
        "refuse", alias="LLM_BOT_RISK_RESPONSE_MODE"
    )
    # --- explanations (llm_bot/explanation) ------------------------------------------------
    explanations: bool = Field(True, alias="LLM_BOT_EXPLANATIONS")

    # --- in-run working set ----------------------------------------------------------------
    memory_max_messages: Count = Field(8, alias="LLM_BOT_MEMORY_MAX_MESSAGES")
    memory_max_chars: Count = Field(8000, alias="LLM_BOT_MEMORY_MAX_CHARS")

    # --- thread history and context --------------------------------------------------------
    context_pairs: Annotated[int, Field(ge=0)] = Field(15, alias="CONTEXT_PAIRS")
    history_max_chars: Count = Field(16_000, alias="HISTORY_MAX_CHARS")
    private_in_public: bool = Field(False, alias="MEMORY_PRIVATE_IN_PUBLIC")
    session_idle_seconds: Count = Field(21_600, alias="SESSION_IDLE_SECONDS")
    max_context_tokens: Count = Field(8000, alias="MAX_CONTEXT_TOKENS")
    notes_max_chars: Count = Field(8000, alias="NOTES_MAX_CHARS")

    # --- long-term memory ------------------------------------------------------------------
    embedding_provider: Literal["openai", "local"] = Field(
        "openai", alias="MEMORY_EMBEDDING_PROVIDER"
    )
    embedding_endpoint: str | None = Field(None, alias="MEMORY_EMBEDDING_ENDPOINT")
    embedding_model: str = Field("text-embedding-3-small", alias="MEMORY_EMBEDDING_MODEL")
    embedding_dimensions: Annotated[int, Field(ge=1, le=MAX_VECTOR_DIMENSIONS)] | None = Field(
        None, alias="MEMORY_EMBEDDING_DIMENSIONS"
    )
    embedding_batch_wait_ms: Annotated[int, Field(ge=0)] = Field(
        3, alias="MEMORY_EMBEDDING_BATCH_WAIT_MS"
    )
    # About 2k tokens of English, well under text-embedding-3's 8191 per input; a prompt's
    # beginning says what it is about (llm_bot.llm.embeddings.embeddable).
    embedding_max_chars: Count = Field(8000, alias="MEMORY_EMBEDDING_MAX_CHARS")
    memory_max_tokens: Count = Field(2048, alias="MEMORY_MAX_TOKENS")
    dedup_threshold: Similarity = Field(0.95, alias="MEMORY_DEDUP_THRESHOLD")
    similarity_threshold: Similarity | None = Field(None, alias="MEMORY_SIMILARITY_THRESHOLD")
    injection_budget: Count = Field(1000, alias="MEMORY_INJECTION_BUDGET")
    recall_budget: Count = Field(1000, alias="MEMORY_RECALL_BUDGET")
    retrieval_timeout_ms: Millis = Field(5000, alias="MEMORY_RETRIEVAL_TIMEOUT_MS")
    # The server ends any one statement of the memory pool past this (0: never). The slowest
    # normal one, recall of a deep user, takes under 100 ms at p95 on a loaded 2-core machine
    # (docs/performance.md, "Per-user depth"); a commit may wait out `llm-bot reembed`'s
    # switch, a few seconds. A retrieval statement that meets it costs the event that part of
    # its context, as any retrieval failure does.
    memory_statement_timeout_ms: NonNegative = Field(5000, alias="MEMORY_STATEMENT_TIMEOUT_MS")

    # --- database connections, per instance (README, "Sizing the database"; llm_bot/db/pools.py)
    # Each instance holds up to LLM_BOT_DB_POOL_MAX + MEMORY_DB_POOL_MAX connections, so the
    # database must allow instances x that sum, plus the jobs'; the defaults suit one instance.
    # At least 2 each: the ledger's claims and the group commit, the store's schema check and
    # its set-up, each hold one connection while the other takes one.
    db_pool_max: Annotated[int, Field(ge=2)] = Field(10, alias="LLM_BOT_DB_POOL_MAX")
    memory_db_pool_max: Annotated[int, Field(ge=2)] = Field(10, alias="MEMORY_DB_POOL_MAX")
    # libpq counts whole seconds and treats less than 2 as 2.
    db_connect_timeout_s: Annotated[int, Field(ge=2)] = Field(5, alias="DATABASE_CONNECT_TIMEOUT_S")

    # --- retention (llm-bot maintain; 0 keeps forever) -----------------------------------------
    retention_processed_events_days: NonNegative = Field(7, alias="RETENTION_PROCESSED_EVENTS_DAYS")
    retention_history_days: NonNegative = Field(365, alias="RETENTION_HISTORY_DAYS")
    retention_history_turns_per_thread: NonNegative = Field(
        10_000, alias="RETENTION_HISTORY_TURNS_PER_THREAD"
    )
    # Also the cap at write time: a new memory beyond it is refused (llm_bot.memory.tools).
    retention_memories_per_user: NonNegative = Field(1_000, alias="RETENTION_MEMORIES_PER_USER")
    retention_batch_rows: Count = Field(1_000, alias="RETENTION_BATCH_ROWS")

    # --- operator console (llm-bot console; llm_bot/console/) ------------------------------
    console_host: str = Field(CONSOLE_LOOPBACK, alias="LLM_BOT_CONSOLE_HOST")
    console_port: Annotated[int, Field(ge=1, le=65535)] = Field(8090, alias="LLM_BOT_CONSOLE_PORT")
    console_token: SecretStr | None = Field(None, alias="LLM_BOT_CONSOLE_TOKEN")
    console_iap_audience: str | None = Field(None, alias="LLM_BOT_CONSOLE_IAP_AUDIENCE")
    console_iap_certs_url: str = Field(
        "https://www.gstatic.com/iap/verify/public_key", alias="LLM_BOT_CONSOLE_IAP_CERTS_URL"
    )

    # --- telemetry -------------------------------------------------------------------------
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field("INFO", alias="LOG_LEVEL")

    @field_validator("openai_base_url", mode="before")
    @classmethod
    def _unset_base_url(cls, value: object) -> object:
        """BitBrat's convention: an empty or ``n/a`` base URL means none."""
        if isinstance(value, str) and value.strip().lower() in ("", "n/a"):
            return None
        return value

    @field_validator("openai_base_url", "embedding_endpoint", "mcp_gateway_url")
    @classmethod
    def _optional_http_url(cls, value: str | None) -> str | None:
        """An endpoint the worker calls, or none (blank: unset)."""
        return _http_url(value) if value is not None and value.strip() else None

    @field_validator(
        "google_cloud_project", "openai_model", "embedding_model", "agent_name", mode="before"
    )
    @classmethod
    def _required_name(cls, value: object) -> object:
        """A name sent with every call (a project, a model) or stored with every row (the agent):
        blank, each request would be refused or every row filed under no agent, event after event,
        where here it costs one line at start. The whitespace around it is not part of it."""
        if isinstance(value, str):
            value = value.strip()
            if not value:
                raise PydanticCustomError("blank", "must not be blank")
        return value

    @field_validator("bus_prefix", mode="before")
    @classmethod
    def _checked_prefix(cls, value: object) -> object:
        """The start of every topic's and subscription's name, so it must be able to start one
        (a name it begins with a few letters after it is one)."""
        if isinstance(value, str):
            value = value.strip()
            if value and not is_pubsub_name(value + "abc"):
                raise PydanticCustomError(
                    "pubsub_name",
                    "must be empty or start a Pub/Sub name: letters, digits and - _ . ~ + %,"
                    " the first a letter, not 'goog'",
                )
        return value

    @field_validator(
        "input_topic",
        "subscription",
        "deadletter_topic",
        "consolidation_topic",
        "consolidation_subscription",
        mode="before",
    )
    @classmethod
    def _pubsub_name(cls, value: object, info: ValidationInfo) -> object:
        """A topic or subscription, named as Pub/Sub names them with ``BUS_PREFIX`` before it
        as the worker puts it there. Refused here, a bad one costs one line at start; passed
        on, the subscription is refused once the worker has started, and a dead-letter topic
        only at each dead letter, whose reason is then lost."""
        if not isinstance(value, str):
            return value
        name = value.strip()
        if not (name and is_pubsub_name(prefixed(name, info.data.get("bus_prefix", "")))):
            raise PydanticCustomError(
                "pubsub_name",
                "must be a Pub/Sub name: letters, digits and - _ . ~ + %, the first a letter"
                " (of BUS_PREFIX, when set), not 'goog', 3-255 with BUS_PREFIX",
            )
        return name

    @field_validator("console_iap_certs_url")
    @classmethod
    def _certs_url(cls, value: str) -> str:
        return _http_url(value)

    @field_validator("console_host", mode="before")
    @classmethod
    def _console_host(cls, value: object) -> object:
        """Blank means unset, so loopback: uvicorn binds an empty host to every interface
        (0.0.0.0 and ::), the opposite of what leaving it empty says. Whitespace around a
        value is no part of a host, and would fail its lookup."""
        if isinstance(value, str):
            return value.strip() or CONSOLE_LOOPBACK
        return value

    @field_validator("consolidation_model", "console_token", "console_iap_audience", mode="before")
    @classmethod
    def _blank_is_unset(cls, value: object) -> object:
        """Blank means unset (consolidation then uses ``OPENAI_MODEL``), and whitespace around
        the value (a secret stored with its trailing newline) is no part of it: kept, no token
        offered would match the console's, every request answered 401."""
        if isinstance(value, str):
            return value.strip() or None
        return value

    @field_validator("risk_response_mode", mode="before")
    @classmethod
    def _trimmed_mode(cls, value: object) -> object:
        """BitBrat trims the mode; a value that is neither mode is an error here, where BitBrat
        would quietly refuse."""
        return value.strip() if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _checked_database_url(cls, value: SecretStr | None) -> SecretStr | None:
        """Refused here, a malformed URL costs one line naming its flaw; passed on, libpq's
        error (and a traceback) would quote the password. Empty means unset; whitespace around
        the value (a secret stored with its trailing newline) is not part of it."""
        url = value.get_secret_value().strip() if value is not None else ""
        if not url:
            return None
        check_database_url(url)
        return SecretStr(url)

    def memory_threshold(self) -> float:
        """``MEMORY_SIMILARITY_THRESHOLD``, else the calibrated default of the embedding provider
        (see ``llm-bot eval calibrate`` and docs/memory.md)."""
        if self.similarity_threshold is not None:
            return self.similarity_threshold
        return CALIBRATED_THRESHOLDS[self.embedding_provider]


def _http_url(value: str) -> str:
    """``value`` without the whitespace around it, when it is an http:// or https:// URL with a
    host (and a port in range, no space or control character). Refused with the settings, a
    value without its scheme (``localhost:8080/v1``) or of another one costs one line at start;
    passed on, the HTTP client refuses it at every request, which the model client retries as a
    connection failure until each event's deadline."""
    url = value.strip()
    try:
        parts = urlsplit(url)
        usable = (
            parts.scheme in ("http", "https")
            and bool(parts.hostname)
            and (parts.port is None or parts.port > 0)
            and all(character.isprintable() and not character.isspace() for character in url)
        )
    except ValueError:  # an IPv6 host not closed, a port that is not a number or out of range
        usable = False
    if not usable:
        raise PydanticCustomError("http_url", "must be an http:// or https:// URL with a host")
    return url


class SettingsError(ValueError):
    """A configuration value broke its rule; the message is one line, fit for a terminal."""


def describe_validation_error(error: ValidationError) -> str:
    """Turn pydantic's multi-line report into one line naming each variable and its rule."""
    parts = []
    for item in error.errors():
        name = _variable(".".join(str(part) for part in item["loc"])) or "settings"
        value = item.get("input")
        hidden = name in _SECRET_VARIABLES or isinstance(value, dict) or value is None
        shown = "" if hidden else f" (got {value!r})"
        parts.append(f"{name}: {item['msg']}{shown}")
    return "; ".join(parts)


def _variable(name: str) -> str:
    """The environment variable a reported field came from: pydantic reports a default by its
    field's name, and a value read from the environment by the field's first name, even when it
    was read from another (BitBrat's ``LLM_BASE_URL`` for ``OPENAI_BASE_URL``)."""
    field = Settings.model_fields.get(name)
    if field is not None and field.alias:
        return field.alias
    for field in Settings.model_fields.values():
        choices = field.validation_alias
        if isinstance(choices, AliasChoices) and choices.choices[0] == name:
            present = {variable.upper() for variable in os.environ}
            if name not in present:
                return next((str(c) for c in choices.choices if str(c) in present), name)
    return name


def load_settings(**overrides: object) -> Settings:
    """Load settings from the environment, raising :class:`SettingsError` on a bad value."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as error:
        raise SettingsError(describe_validation_error(error)) from None
