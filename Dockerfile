# syntax=docker/dockerfile:1
# llm-bot worker image for Cloud Run (worker pool or service), see deploy/ and the README.
#
# Two stages so the runtime image carries no build tools, no pip cache and no source tree:
# the builder turns the checkout into a wheel and installs it with its runtime dependencies
# into /opt/venv; the runtime stage copies only that venv and architecture.yaml.
#
# Only the service and its runtime dependencies: `pip install` of the bare wheel (llm_bot/ alone,
# tests/unit/deploy/test_wheel.py), never the tools in tools/ nor the `local` extra (the tools,
# torch, MiniLM) or `dev`, each at its pin in constraints.txt, so rebuilding a
# commit installs what was tested rather than whatever was released since. Production embeds through an OpenAI-compatible
# /embeddings endpoint (MEMORY_EMBEDDING_PROVIDER=openai) and talks to a managed Postgres.
# Every dependency ships manylinux wheels (psycopg[binary], grpcio), so no apt and no compiler.
#
# The base tag is pinned to a patch release; pin it further by digest
# (python:3.11.11-slim-bookworm@sha256:...) in the registry you build from.

FROM python:3.11.11-slim-bookworm AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
RUN python -m venv /opt/venv

# README.md is the project's readme in pyproject.toml, so the wheel build needs it.
COPY pyproject.toml README.md constraints.txt ./
COPY llm_bot ./llm_bot
RUN python -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels . \
    && /opt/venv/bin/pip install --no-cache-dir --constraint constraints.txt \
       /wheels/llm_bot-*.whl


FROM python:3.11.11-slim-bookworm AS runtime

# PYTHONUNBUFFERED: JSON log lines reach Cloud Logging as they are written, also on a crash.
# PORT: the health (/healthz, /readyz) and /metrics listener; Cloud Run services set it too.
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PORT=8080

# A fixed numeric uid so `runAsNonRoot`-style policies can verify it without /etc/passwd.
RUN groupadd --system --gid 10001 llmbot \
    && useradd --system --uid 10001 --gid llmbot --no-log-init \
       --home-dir /app --shell /usr/sbin/nologin llmbot

COPY --from=builder /opt/venv /opt/venv

# The system prompt is read from architecture.yaml in the working directory
# (llm_bot/graph/prompt/system_prompt.py), so it sits in WORKDIR. Owned by root: read-only to the app.
WORKDIR /app
COPY architecture.yaml ./architecture.yaml

USER 10001:10001

EXPOSE 8080

# No HEALTHCHECK: Cloud Run ignores Docker's HEALTHCHECK and uses the startup/liveness probes of
# deploy/cloudrun-service.yaml instead. Elsewhere, `llm-bot check` asks the worker's /readyz.
ENTRYPOINT ["llm-bot"]
CMD ["run"]
