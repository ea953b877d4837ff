"""The files under deploy/ stay true to the code they deploy.

Each of them restates something the package owns (the migrations, the settings, the metric
names), and nothing else would notice when one side changes: these tests do. Regenerate the
SQL schema after adding a migration with
``.venv/bin/python tests/unit/deploy/test_deploy_files.py --write-schema``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from llm_bot.db.migrate import available_migrations

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
SCHEMA = DEPLOY / "sql" / "schema.sql"
MANIFESTS = [DEPLOY / "cloudrun-worker-pool.yaml", DEPLOY / "cloudrun-service.yaml"]
CONSOLE = DEPLOY / "cloudrun-console.yaml"
SECRETS = {"DATABASE_URL", "OPENAI_API_KEY"}

# The metric names the service exposes on /metrics (llm_bot/telemetry/metrics.py, through the
# Prometheus naming rules: counters get _total, histograms in seconds get _seconds).
METRICS = {
    "llmbot_events_total",
    "llmbot_event_duration_seconds",
    "llmbot_stage_duration_seconds",
    "llmbot_queue_lag_seconds",
    "llmbot_in_flight",
    "llmbot_model_tokens_total",
    "llmbot_memory_retrieval_duration_seconds",
    "llmbot_memory_hits_total",
    "llmbot_memory_retrievals_total",
    "llmbot_memory_score",
    "llmbot_context_tokens",
    "llmbot_retries_total",
    "llmbot_deadletters_total",
    "llmbot_commit_duration_seconds",
    "llmbot_commit_batch_size",
    "llmbot_event_loop_lag_seconds",
    "llmbot_worker_counts_total",
    "llmbot_lease_renewal_failures_total",
}

SCHEMA_HEADER = """\
-- llm-bot schema for a managed Postgres >= 15 with pgvector (Cloud SQL, AlloyDB, ...).
--
-- Generated from llm_bot/db/migrations/*.sql, in order; `llm-bot migrate` applies the same
-- files (deploy/deploy.sh runs it as a Cloud Run job), so prefer that. This file is for review
-- and for applying by hand: psql "$DATABASE_URL" --single-transaction -f deploy/sql/schema.sql
-- It records each file in schema_migrations like `llm-bot migrate` does, so the two mix.
-- Regenerate: .venv/bin/python tests/unit/deploy/test_deploy_files.py --write-schema
-- (tests/unit/deploy/test_deploy_files.py fails when this file and the migrations differ).
--
-- CREATE EXTENSION vector needs a privileged role (on Cloud SQL, a cloudsqlsuperuser member
-- such as the postgres user) the first time.

CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
"""


def render_schema() -> str:
    """deploy/sql/schema.sql as it must read for the migrations shipped now."""
    parts = [SCHEMA_HEADER]
    for migration in available_migrations():
        parts.append(
            f"\n-- ==== {migration.name} ====\n"
            f"{migration.sql.rstrip()}\n"
            "INSERT INTO schema_migrations (version, name)"
            f" VALUES ({migration.version}, '{migration.name}') ON CONFLICT DO NOTHING;\n"
        )
    return "".join(parts)


def test_schema_holds_every_migration_in_order() -> None:
    text = SCHEMA.read_text(encoding="utf-8")
    position = 0
    for migration in available_migrations():
        found = text.find(migration.sql.rstrip(), position)
        assert found >= 0, f"{migration.name} is missing or out of order in {SCHEMA.name}"
        position = found + len(migration.sql.rstrip())
    assert text == render_schema(), "regenerate it (see this module's docstring)"


def _manifest(path: Path) -> dict[str, Any]:
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


def _container_env(path: Path) -> list[dict[str, Any]]:
    containers = _manifest(path)["spec"]["template"]["spec"]["containers"]
    return [entry for container in containers for entry in container.get("env", [])]


def _settings() -> dict[str, Any]:
    document = yaml.safe_load((ROOT / "architecture.yaml").read_text(encoding="utf-8"))
    settings = document["settings"]
    assert isinstance(settings, dict)
    return settings


@pytest.mark.parametrize("path", [*MANIFESTS, CONSOLE], ids=lambda path: path.name)
def test_manifest_env_vars_are_settings(path: Path) -> None:
    """A typo in a manifest would silently leave a default in force; OTEL_* are the standard
    OpenTelemetry SDK variables, not settings of ours."""
    settings = _settings()
    names = [entry["name"] for entry in _container_env(path)]
    unknown = [name for name in names if name not in settings and not name.startswith("OTEL_")]
    assert not unknown, f"not in architecture.yaml settings: {unknown}"
    assert len(names) == len(set(names))


@pytest.mark.parametrize("path", [*MANIFESTS, CONSOLE], ids=lambda path: path.name)
def test_manifest_secrets_come_from_secret_manager(path: Path) -> None:
    by_name = {entry["name"]: entry for entry in _container_env(path)}
    for secret in SECRETS:
        entry = by_name[secret]
        assert "value" not in entry, f"{secret} given as a plain value"
        assert entry["valueFrom"]["secretKeyRef"]["name"]


def test_the_console_runs_behind_iap_and_embeds_as_the_workers() -> None:
    """Try a recall embeds the query: with another model its scores would mean nothing."""
    manifest = _manifest(CONSOLE)
    assert manifest["metadata"]["annotations"]["run.googleapis.com/iap-enabled"] == "true"
    console = {entry["name"]: entry.get("value") for entry in _container_env(CONSOLE)}
    assert console["LLM_BOT_CONSOLE_IAP_AUDIENCE"] == "${CONSOLE_IAP_AUDIENCE}"
    assert "LLM_BOT_CONSOLE_TOKEN" not in console  # IAP's signed header is the only way in
    for path in MANIFESTS:
        worker = {entry["name"]: entry.get("value") for entry in _container_env(path)}
        for name in ("MEMORY_EMBEDDING_PROVIDER", "MEMORY_EMBEDDING_MODEL"):
            assert console[name] == worker[name], (path.name, name)
        assert console["MEMORY_EMBEDDING_DIMENSIONS"] == worker["MEMORY_EMBEDDING_DIMENSIONS"]


def test_manifests_match_the_shutdown_and_delivery_contract() -> None:
    """Cloud Run kills 10 s after SIGTERM; the subscription dead-letters after 5 attempts."""
    for path in MANIFESTS:
        env = {entry["name"]: entry.get("value") for entry in _container_env(path)}
        assert float(env["LLM_BOT_SHUTDOWN_GRACE_S"]) < 10
        assert env["LLM_BOT_MAX_DELIVERY_ATTEMPTS"] == "5"
    assert "--max-delivery-attempts" in (DEPLOY / "pubsub.sh").read_text(encoding="utf-8")


def test_service_variant_keeps_cpu_and_an_instance() -> None:
    template = _manifest(DEPLOY / "cloudrun-service.yaml")["spec"]["template"]
    annotations = template["metadata"]["annotations"]
    assert annotations["run.googleapis.com/cpu-throttling"] == "false"
    assert annotations["autoscaling.knative.dev/minScale"] == "1"
    container = template["spec"]["containers"][0]
    assert container["startupProbe"]["httpGet"] == {"path": "/ready", "port": 8080}
    assert container["livenessProbe"]["httpGet"] == {"path": "/live", "port": 8080}


def _dashboard_queries() -> list[str]:
    dashboard = json.loads((DEPLOY / "dashboard.json").read_text(encoding="utf-8"))
    return [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if "expr" in target
    ]


def test_dashboard_queries_only_known_metrics() -> None:
    queries = _dashboard_queries()
    assert queries
    used = {
        re.sub(r"_(bucket|sum|count)$", "", name)
        for query in queries
        for name in re.findall(r"\bllmbot_[a-z_]+", query)
    }
    assert used <= METRICS, f"unknown metrics: {sorted(used - METRICS)}"
    assert used == METRICS, f"metrics without a panel: {sorted(METRICS - used)}"


if __name__ == "__main__" and sys.argv[1:] == ["--write-schema"]:
    SCHEMA.parent.mkdir(parents=True, exist_ok=True)
    SCHEMA.write_text(render_schema(), encoding="utf-8")
    print(f"wrote {SCHEMA.relative_to(ROOT)}")
