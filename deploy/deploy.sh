#!/usr/bin/env bash
# Build the llm-bot image, migrate the database, and deploy the worker to Cloud Run.
#
# Order matters: the schema must be current before a new revision starts pulling, so the
# `llm-bot migrate` job runs (and must succeed) between the build and the rollout. Every step
# is idempotent: the repository, service accounts and bindings are created only when missing,
# `gcloud run jobs deploy` and `... replace` converge on the given spec, and `llm-bot migrate`
# applies only what is not applied yet (under an advisory lock).
#
# Run deploy/pubsub.sh first (topics, subscription, dead-letter policy, and the worker's account
# with its Pub/Sub roles) and create the two secrets (see the README's "Deploying to Cloud Run").
set -euo pipefail

# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

usage() {
    cat <<'EOF'
usage: deploy/deploy.sh [--service] [--console] [--skip-build] [--tag TAG] [-h|--help]

Builds the image with Cloud Build, runs `llm-bot migrate` as a Cloud Run job, then applies
deploy/cloudrun-worker-pool.yaml (default) or deploy/cloudrun-service.yaml (--service), and
schedules `llm-bot maintain` (retention) as a daily Cloud Run job.

  --service     deploy the Cloud Run service variant instead of the worker pool
  --console     also deploy the operator console (deploy/cloudrun-console.yaml) behind IAP
  --skip-build  deploy an image already pushed with this tag
  --tag TAG     image tag (default: the current git commit, short)
  -h, --help    this text

environment:
  GOOGLE_CLOUD_PROJECT  project (required)
  REGION                Cloud Run and Artifact Registry region (required), e.g. europe-west1
  CLOUDSQL_INSTANCE     Cloud SQL connection name PROJECT:REGION:INSTANCE (required)
  SERVICE_ACCOUNT       runtime identity (default llm-bot@PROJECT.iam.gserviceaccount.com)
  BUILD_SERVICE_ACCOUNT Cloud Build identity (default llm-bot-build@PROJECT.iam.gserviceaccount.com)
  INSTANCES             worker pool instances (default: the pool's current count, 2 at first)
  REPOSITORY            Artifact Registry Docker repository (default llm-bot)
  BUS_PREFIX            prefix of topic and subscription names (default "")
  MAINTAIN_SCHEDULE     cron schedule (UTC) of `llm-bot maintain` (default "17 3 * * *")
  CONSOLE_SERVICE_ACCOUNT the console's identity (default llm-bot-console@PROJECT.iam.gserviceaccount.com)
  CONSOLE_OPERATORS     with --console: comma-separated IAP members allowed in (user:..., group:...)

secrets (Secret Manager, created beforehand): llm-bot-database-url, llm-bot-openai-api-key;
with --console also llm-bot-console-database-url (a login role in llm_bot_console)
EOF
}

variant=worker-pool
console=false
build=true
tag=""

while [[ $# -gt 0 ]]; do
    case "$1" in
        --service) variant=service ;;
        --console) console=true ;;
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
readonly BUILD_SERVICE_ACCOUNT="${BUILD_SERVICE_ACCOUNT:-llm-bot-build@${PROJECT}.iam.gserviceaccount.com}"
readonly REPOSITORY="${REPOSITORY:-llm-bot}"
readonly BUS_PREFIX="${BUS_PREFIX:-}"
readonly REQUESTED_INSTANCES="${INSTANCES:-}"
readonly SECRETS=(llm-bot-database-url llm-bot-openai-api-key)
readonly MIGRATE_JOB=llm-bot-migrate
readonly MAINTAIN_JOB=llm-bot-maintain
readonly CONSOLE_SERVICE=llm-bot-console
readonly CONSOLE_SERVICE_ACCOUNT="${CONSOLE_SERVICE_ACCOUNT:-llm-bot-console@${PROJECT}.iam.gserviceaccount.com}"
readonly CONSOLE_SECRETS=(llm-bot-console-database-url llm-bot-openai-api-key)
CONSOLE_IAP_AUDIENCE=""
readonly WORKER_POOL=llm-bot
# Retention runs once a day (UTC), off the busy hours of most chats.
readonly MAINTAIN_SCHEDULE="${MAINTAIN_SCHEDULE:-17 3 * * *}"
if [[ -z "$tag" ]]; then
    tag="$(git -C "$ROOT" rev-parse --short HEAD)"
fi
readonly IMAGE="${REGION}-docker.pkg.dev/${PROJECT}/${REPOSITORY}/llm-bot:${tag}"
# Every `gcloud run` command below takes its region from here.
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

# Binding an existing member to a role is a no-op, so the grants below are safe to repeat.
grant_project_role() {
    gcloud projects add-iam-policy-binding "$PROJECT" --condition=None --quiet \
        --member="serviceAccount:$1" --role="$2" >/dev/null
}

ensure_runtime_account() {
    ensure_service_account "$SERVICE_ACCOUNT" "$PROJECT" "llm-bot worker"
    grant_project_role "$SERVICE_ACCOUNT" roles/cloudsql.client
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

# Builds run as an account of their own with only what a build needs: write its logs, read the
# uploaded source (gcloud stages it in the project's Cloud Build bucket), push to this
# repository. Cloud Build's default account is the Compute Engine default one on projects
# created since 2024, and organisation policy often leaves it without roles.
ensure_build_account() {
    ensure_service_account "$BUILD_SERVICE_ACCOUNT" "$PROJECT" "llm-bot image builds"
    grant_project_role "$BUILD_SERVICE_ACCOUNT" roles/logging.logWriter
    grant_project_role "$BUILD_SERVICE_ACCOUNT" roles/storage.objectViewer
    gcloud artifacts repositories add-iam-policy-binding "$REPOSITORY" --location="$REGION" \
        --member="serviceAccount:$BUILD_SERVICE_ACCOUNT" --role=roles/artifactregistry.writer \
        >/dev/null
}

build_image() {
    # Cloud Build runs `docker build` on the repository root with its Dockerfile; the
    # .dockerignore keeps the local venv and database out of the context.
    gcloud builds submit "$ROOT" --region="$REGION" --config="$ROOT/deploy/cloudbuild.yaml" \
        --substitutions="_IMAGE=$IMAGE" \
        --service-account="projects/$PROJECT/serviceAccounts/$BUILD_SERVICE_ACCOUNT"
}

# The value of env variable $1 in the manifest: the migrate job embeds with the workers' model
# settings, read from there so the two cannot drift apart.
manifest_env() {
    awk -v name="$1" '$0 ~ "- name: " name "$" {
        getline; sub(/^ *value: */, ""); gsub(/"/, ""); sub(/ *#.*/, ""); print; exit
    }' "$ROOT/deploy/cloudrun-${variant}.yaml"
}

embedding_env() {
    local name pairs=()
    for name in MEMORY_EMBEDDING_PROVIDER MEMORY_EMBEDDING_MODEL MEMORY_EMBEDDING_DIMENSIONS; do
        pairs+=("$name=$(manifest_env "$name")")
    done
    local IFS=,
    printf '%s' "${pairs[*]}"
}

migrate() {
    # `jobs deploy` creates the job or updates it to this image; `execute --wait` fails the
    # script when the migration fails, before any worker runs against an old schema. The
    # migration also records the embedding model at the manifests' vector size
    # (MEMORY_EMBEDDING_DIMENSIONS, so the model is not asked). It is idempotent, so retries
    # are safe: 3, as Cloud Run recommends; an unreachable database fails each within
    # DATABASE_CONNECT_TIMEOUT_S instead of hanging to the task timeout.
    gcloud run jobs deploy "$MIGRATE_JOB" --image="$IMAGE" --args=migrate \
        --service-account="$SERVICE_ACCOUNT" \
        --set-cloudsql-instances="$CLOUDSQL_INSTANCE" \
        --set-secrets="DATABASE_URL=llm-bot-database-url:latest,OPENAI_API_KEY=llm-bot-openai-api-key:latest" \
        --set-env-vars="$(embedding_env)" \
        --tasks=1 --max-retries=3 --task-timeout=600s
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

# A redeploy keeps the instance count an operator set (`gcloud run worker-pools update
# --instances`, or an autoscaler); INSTANCES overrides it, and a first deploy starts 2.
worker_pool_instances() {
    local current
    current="$(gcloud run worker-pools describe "$WORKER_POOL" --format=export 2>/dev/null |
        sed -n 's/.*run\.googleapis\.com\/manualInstanceCount: *["'"'"']\{0,1\}\([0-9][0-9]*\).*/\1/p' |
        head -n 1 || true)"
    printf '%s' "${REQUESTED_INSTANCES:-${current:-2}}"
}

# Fill the manifest's ${...} placeholders (only these eight, so nothing else is touched).
render() {
    local text name placeholder
    text="$(<"$1")"
    for name in PROJECT IMAGE SERVICE_ACCOUNT CLOUDSQL_INSTANCE BUS_PREFIX INSTANCES \
        CONSOLE_SERVICE_ACCOUNT CONSOLE_IAP_AUDIENCE; do
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
    INSTANCES=""
    if [[ "$variant" == worker-pool ]]; then
        INSTANCES="$(worker_pool_instances)"
    fi
    render "$ROOT/deploy/cloudrun-${variant}.yaml" >"$manifest"
    if [[ "$variant" == service ]]; then
        gcloud run services replace "$manifest"
    else
        gcloud run worker-pools replace "$manifest"
    fi
}

# The console: its own account with the database and the embeddings key only, the service
# behind IAP (the signed header's audience names it by project number, region and name), and
# IAP's service agent as its only invoker; people get in through IAP's policy.
deploy_console() {
    local secret number workdir manifest member
    for secret in "${CONSOLE_SECRETS[@]}"; do
        if ! gcloud secrets describe "$secret" --format='value(name)' >/dev/null 2>&1; then
            echo "deploy.sh: secret $secret is missing; create it first (README, \"The operator console\")" >&2
            exit 1
        fi
    done
    ensure_service_account "$CONSOLE_SERVICE_ACCOUNT" "$PROJECT" "llm-bot operator console"
    grant_project_role "$CONSOLE_SERVICE_ACCOUNT" roles/cloudsql.client
    for secret in "${CONSOLE_SECRETS[@]}"; do
        gcloud secrets add-iam-policy-binding "$secret" --condition=None --quiet \
            --member="serviceAccount:$CONSOLE_SERVICE_ACCOUNT" \
            --role=roles/secretmanager.secretAccessor >/dev/null
    done
    number="$(gcloud projects describe "$PROJECT" --format='value(projectNumber)')"
    # IAP's service agent exists once the API is on and its identity made (both idempotent).
    gcloud services enable iap.googleapis.com
    gcloud beta services identity create --service=iap.googleapis.com --project="$PROJECT" \
        >/dev/null
    # shellcheck disable=SC2034 # read by render, by name
    CONSOLE_IAP_AUDIENCE="/projects/${number}/locations/${REGION}/services/${CONSOLE_SERVICE}"
    workdir="$(mktemp -d)"
    trap 'rm -rf "$workdir"' RETURN
    manifest="$workdir/llm-bot-console.yaml"
    render "$ROOT/deploy/cloudrun-console.yaml" >"$manifest"
    gcloud run services replace "$manifest"
    # A service agent just created is granted once IAM sees it.
    retry gcloud run services add-iam-policy-binding "$CONSOLE_SERVICE" --quiet \
        --member="serviceAccount:service-${number}@gcp-sa-iap.iam.gserviceaccount.com" \
        --role=roles/run.invoker >/dev/null
    if [[ -n "${CONSOLE_OPERATORS:-}" ]]; then
        for member in ${CONSOLE_OPERATORS//,/ }; do
            gcloud iap web add-iam-policy-binding --resource-type=cloud-run \
                --service="$CONSOLE_SERVICE" --region="$REGION" --member="$member" \
                --role=roles/iap.httpsResourceAccessor >/dev/null
        done
    fi
}

step "checking secrets"
check_secrets
step "service account $SERVICE_ACCOUNT"
ensure_runtime_account
if [[ "$build" == true ]]; then
    step "building $IMAGE as $BUILD_SERVICE_ACCOUNT"
    ensure_repository
    ensure_build_account
    build_image
fi
step "migrating the database (job $MIGRATE_JOB)"
migrate
step "deploying the $variant"
apply_manifest
step "scheduling retention (job $MAINTAIN_JOB, \"$MAINTAIN_SCHEDULE\" UTC)"
schedule_maintenance
if [[ "$console" == true ]]; then
    step "deploying the operator console ($CONSOLE_SERVICE, behind IAP)"
    deploy_console
fi
step "done: $IMAGE is deployed as the llm-bot $variant in $REGION"
if [[ "$variant" == service ]]; then
    echo "readiness: gcloud run services proxy llm-bot --port=8081, then curl localhost:8081/ready"
else
    echo "status: gcloud run worker-pools describe $WORKER_POOL"
fi
