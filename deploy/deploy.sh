#!/usr/bin/env bash
# Build the llm-bot image, migrate the database, and deploy the worker to Cloud Run.
#
# Order matters: the schema must be current before a new revision starts pulling, so the
# `llm-bot migrate` job runs (and must succeed) between the build and the rollout. Every step
# is idempotent: the repository, service account and bindings are created only when missing,
# `gcloud run jobs deploy` and `... replace` converge on the given spec, and `llm-bot migrate`
# applies only what is not applied yet (under an advisory lock).
#
# Run deploy/pubsub.sh first (topics, subscription, dead-letter policy) and create the two
# secrets (see the README's "Deploying to Cloud Run").
set -euo pipefail

usage() {
    cat <<'EOF'
usage: deploy/deploy.sh [--service] [--skip-build] [--tag TAG] [-h|--help]

Builds the image with Cloud Build, runs `llm-bot migrate` as a Cloud Run job, then applies
deploy/cloudrun-worker-pool.yaml (default) or deploy/cloudrun-service.yaml (--service), and
schedules `llm-bot maintain` (retention) as a daily Cloud Run job.

  --service     deploy the Cloud Run service variant instead of the worker pool
  --skip-build  deploy an image already pushed with this tag
  --tag TAG     image tag (default: the current git commit, short)
  -h, --help    this text

environment:
  GOOGLE_CLOUD_PROJECT  project (required)
  REGION                Cloud Run and Artifact Registry region (required), e.g. europe-west1
  CLOUDSQL_INSTANCE     Cloud SQL connection name PROJECT:REGION:INSTANCE (required)
  SERVICE_ACCOUNT       runtime identity (default llm-bot@PROJECT.iam.gserviceaccount.com)
  REPOSITORY            Artifact Registry Docker repository (default llm-bot)
  BUS_PREFIX            prefix of topic and subscription names (default "")
  MAINTAIN_SCHEDULE     cron schedule (UTC) of `llm-bot maintain` (default "17 3 * * *")

secrets (Secret Manager, created beforehand): llm-bot-database-url, llm-bot-openai-api-key
EOF
}

variant=worker-pool
build=true
tag=""

while [[ $# -gt 0 ]]; do
    case "$1" in
        --service) variant=service ;;
        --skip-build) build=false ;;
        --tag)
            [[ $# -ge 2 ]] || { echo "deploy.sh: --tag needs a value" >&2; exit 2; }
            tag="$2"
            shift
            ;;
        -h | --help) usage; exit 0 ;;
        *) echo "deploy.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

missing=()
for name in GOOGLE_CLOUD_PROJECT REGION CLOUDSQL_INSTANCE; do
    [[ -n "${!name:-}" ]] || missing+=("$name")
done
if ((${#missing[@]} > 0)); then
    echo "deploy.sh: set ${missing[*]}" >&2
    exit 2
fi

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly ROOT
readonly PROJECT="$GOOGLE_CLOUD_PROJECT"
readonly SERVICE_ACCOUNT="${SERVICE_ACCOUNT:-llm-bot@${PROJECT}.iam.gserviceaccount.com}"
readonly REPOSITORY="${REPOSITORY:-llm-bot}"
readonly BUS_PREFIX="${BUS_PREFIX:-}"
readonly SECRETS=(llm-bot-database-url llm-bot-openai-api-key)
readonly MIGRATE_JOB=llm-bot-migrate
readonly MAINTAIN_JOB=llm-bot-maintain
# Retention runs once a day (UTC), off the busy hours of most chats.
readonly MAINTAIN_SCHEDULE="${MAINTAIN_SCHEDULE:-17 3 * * *}"
if [[ -z "$tag" ]]; then
    tag="$(git -C "$ROOT" rev-parse --short HEAD)"
fi
readonly IMAGE="${REGION}-docker.pkg.dev/${PROJECT}/${REPOSITORY}/llm-bot:${tag}"
# Every `gcloud run` command below (and the worker-pool one, which has no --region flag in
# some gcloud releases) takes its region from here.
export CLOUDSDK_RUN_REGION="$REGION"
export CLOUDSDK_CORE_PROJECT="$PROJECT"

step() { printf '\n== %s\n' "$*"; }

check_secrets() {
    local secret
    for secret in "${SECRETS[@]}"; do
        if ! gcloud secrets describe "$secret" --format='value(name)' >/dev/null 2>&1; then
            echo "deploy.sh: secret $secret is missing; create it first (README, step 3)" >&2
            exit 1
        fi
    done
}

ensure_service_account() {
    if ! gcloud iam service-accounts describe "$SERVICE_ACCOUNT" >/dev/null 2>&1; then
        gcloud iam service-accounts create "${SERVICE_ACCOUNT%%@*}" \
            --display-name="llm-bot worker"
    fi
    # Binding an existing member to a role is a no-op, so these are safe to repeat.
    gcloud projects add-iam-policy-binding "$PROJECT" --condition=None --quiet \
        --member="serviceAccount:$SERVICE_ACCOUNT" --role=roles/cloudsql.client >/dev/null
    local secret
    for secret in "${SECRETS[@]}"; do
        gcloud secrets add-iam-policy-binding "$secret" --condition=None --quiet \
            --member="serviceAccount:$SERVICE_ACCOUNT" \
            --role=roles/secretmanager.secretAccessor >/dev/null
    done
}

ensure_repository() {
    if ! gcloud artifacts repositories describe "$REPOSITORY" --location="$REGION" \
        >/dev/null 2>&1; then
        gcloud artifacts repositories create "$REPOSITORY" --location="$REGION" \
            --repository-format=docker --description="llm-bot images"
    fi
}

build_image() {
    # Cloud Build runs `docker build` on the repository root with its Dockerfile; the
    # .dockerignore keeps the local venv and database out of the context.
    gcloud builds submit "$ROOT" --tag="$IMAGE"
}

migrate() {
    # `jobs deploy` creates the job or updates it to this image; `execute --wait` fails the
    # script when the migration fails, before any worker runs against an old schema. The
    # migration also creates the memory store's tables at the embedding model's vector size,
    # so the job asks that model (the same settings as the manifests) once.
    gcloud run jobs deploy "$MIGRATE_JOB" --image="$IMAGE" --args=migrate \
        --service-account="$SERVICE_ACCOUNT" \
        --set-cloudsql-instances="$CLOUDSQL_INSTANCE" \
        --set-secrets="DATABASE_URL=llm-bot-database-url:latest,OPENAI_API_KEY=llm-bot-openai-api-key:latest" \
        --set-env-vars="MEMORY_EMBEDDING_PROVIDER=openai,MEMORY_EMBEDDING_MODEL=text-embedding-3-small" \
        --tasks=1 --max-retries=1 --task-timeout=600s
    gcloud run jobs execute "$MIGRATE_JOB" --wait
}

schedule_maintenance() {
    # `llm-bot maintain` applies the RETENTION_* settings (their defaults unless set here); it
    # is idempotent and safe beside another run, so a retried or overlapping execution is fine.
    # It needs the database only: no model key.
    gcloud run jobs deploy "$MAINTAIN_JOB" --image="$IMAGE" --args=maintain \
        --service-account="$SERVICE_ACCOUNT" \
        --set-cloudsql-instances="$CLOUDSQL_INSTANCE" \
        --set-secrets="DATABASE_URL=llm-bot-database-url:latest" \
        --tasks=1 --max-retries=3 --task-timeout=3600s
    # Cloud Scheduler starts the job through the Cloud Run Admin API as the worker's account.
    gcloud run jobs add-iam-policy-binding "$MAINTAIN_JOB" --quiet \
        --member="serviceAccount:$SERVICE_ACCOUNT" --role=roles/run.invoker >/dev/null
    local uri="https://run.googleapis.com/v2/projects/${PROJECT}/locations/${REGION}/jobs/${MAINTAIN_JOB}:run"
    local verb=create
    if gcloud scheduler jobs describe "$MAINTAIN_JOB" --location="$REGION" >/dev/null 2>&1; then
        verb=update
    fi
    gcloud scheduler jobs "$verb" http "$MAINTAIN_JOB" --location="$REGION" \
        --schedule="$MAINTAIN_SCHEDULE" --time-zone=UTC --http-method=POST --uri="$uri" \
        --oauth-service-account-email="$SERVICE_ACCOUNT"
}

# Fill the manifest's ${...} placeholders (only these five, so nothing else is touched).
render() {
    local text name placeholder
    text="$(<"$1")"
    for name in PROJECT IMAGE SERVICE_ACCOUNT CLOUDSQL_INSTANCE BUS_PREFIX; do
        placeholder="\${${name}}"
        text="${text//"$placeholder"/${!name}}"
    done
    printf '%s\n' "$text"
}

apply_manifest() {
    local workdir manifest
    workdir="$(mktemp -d)"
    trap 'rm -rf "$workdir"' RETURN
    manifest="$workdir/llm-bot-${variant}.yaml"
    render "$ROOT/deploy/cloudrun-${variant}.yaml" >"$manifest"
    if [[ "$variant" == service ]]; then
        gcloud run services replace "$manifest"
    else
        gcloud beta run worker-pools replace "$manifest"
    fi
}

step "checking secrets"
check_secrets
step "service account $SERVICE_ACCOUNT"
ensure_service_account
if [[ "$build" == true ]]; then
    step "building $IMAGE"
    ensure_repository
    build_image
fi
step "migrating the database (job $MIGRATE_JOB)"
migrate
step "deploying the $variant"
apply_manifest
step "scheduling retention (job $MAINTAIN_JOB, \"$MAINTAIN_SCHEDULE\" UTC)"
schedule_maintenance
step "done: $IMAGE is deployed as the llm-bot $variant in $REGION"
if [[ "$variant" == service ]]; then
    echo "readiness: gcloud run services proxy llm-bot --port=8081, then curl localhost:8081/readyz"
else
    echo "status: gcloud beta run worker-pools describe llm-bot"
fi
