#!/usr/bin/env bash
# Create (or bring up to date) the Pub/Sub resources llm-bot needs. Idempotent: every resource is
# described first and created only when missing; an existing subscription is updated to the
# policies below, so running it again after changing a value applies the change.
#
# What it makes (names get BUS_PREFIX in front, as the worker does, llm_bot/events/routing.py):
#   topics        internal.llmbot.v1 (input), internal.deadletter.v1 (DLQ), internal.egress.v1
#   subscription  internal.llmbot.v1.llm-bot on the input topic:
#                   ack deadline 60 s (the client library extends leases while an event runs;
#                   60 s bounds how long a crashed instance holds a message),
#                   retry policy 10 s .. 600 s exponential backoff (a retryable failure nacks),
#                   dead-letter policy to the DLQ after MAX_DELIVERY_ATTEMPTS (5, equal to the
#                   worker's LLM_BOT_MAX_DELIVERY_ATTEMPTS, which forwards the last attempt as
#                   ERROR itself rather than nacking it into the DLQ),
#                   message ordering only with --ordering (it cannot be changed later).
#   topic and subscription  internal.llmbot.consolidate.v1 and internal.llmbot.consolidate.v1.llm-bot:
#                   memory consolidation's jobs (LLM_BOT_CONSOLIDATION), published by the
#                   workers' sweep and taken off by them, with the same policies, never ordered.
#   subscription  internal.deadletter.v1.operators: a pull subscription on the DLQ so operators
#                   can read what was dead-lettered (7 days retention, never expires).
#   IAM           the Pub/Sub service agent may publish to the DLQ and ack on the source
#                   subscription: without both, dead-lettering silently does not happen.
#                 With --worker-sa, the worker's service account may pull the subscription and
#                 publish to the DLQ and egress topics (the next routing steps' topics are the
#                 other services' to grant). The account is created first when it is one of
#                 this project's and missing (a fresh project), and waited for until IAM sees
#                 it: a grant naming an account IAM cannot see yet is refused.
set -euo pipefail

# shellcheck source=deploy/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

readonly ACK_DEADLINE_S=60
readonly MIN_RETRY_DELAY=10s
readonly MAX_RETRY_DELAY=600s
readonly DLQ_RETENTION=7d

usage() {
    cat <<'EOF'
usage: deploy/pubsub.sh [--ordering] [--worker-sa EMAIL] [--skip-iam] [--dry-run] [-h|--help]

Creates or updates llm-bot's Pub/Sub topics, subscription (retry and dead-letter policy) and
the dead-letter topic's operator subscription, in GOOGLE_CLOUD_PROJECT. Safe to run again.

  --ordering         create the subscription with message ordering enabled (set
                     LLM_BOT_ORDERING=true on the publishers too); fixed at creation
  --worker-sa EMAIL  also grant the worker's service account subscriber on the subscription
                     and publisher on the dead-letter and egress topics (created first when
                     it is this project's and missing)
  --skip-iam         do not touch IAM (for an emulator, or when an admin grants it)
  --dry-run          print the gcloud commands that would change something, change nothing
  -h, --help         this text

environment:
  GOOGLE_CLOUD_PROJECT           project (required)
  BUS_PREFIX                     prefix of every topic and subscription name (default "")
  LLM_BOT_MAX_DELIVERY_ATTEMPTS  max delivery attempts of the dead-letter policy (default 5)
EOF
}

ordering=false
worker_sa=""
skip_iam=false
dry_run=false

while [[ $# -gt 0 ]]; do
    case "$1" in
        --ordering) ordering=true ;;
        --worker-sa)
            [[ $# -ge 2 ]] || { echo "pubsub.sh: --worker-sa needs an email" >&2; exit 2; }
            worker_sa="$2"
            shift
            ;;
        --skip-iam) skip_iam=true ;;
        --dry-run) dry_run=true ;;
        -h | --help) usage; exit 0 ;;
        *) echo "pubsub.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done

if [[ -z "${GOOGLE_CLOUD_PROJECT:-}" ]]; then
    echo "pubsub.sh: set GOOGLE_CLOUD_PROJECT to the project of the topics" >&2
    exit 2
fi
readonly PROJECT="$GOOGLE_CLOUD_PROJECT"
readonly PREFIX="${BUS_PREFIX:-}"
readonly MAX_ATTEMPTS="${LLM_BOT_MAX_DELIVERY_ATTEMPTS:-5}"
# Pub/Sub accepts 5..100 delivery attempts in a dead-letter policy.
if ! [[ "$MAX_ATTEMPTS" =~ ^[0-9]+$ ]] || ((MAX_ATTEMPTS < 5 || MAX_ATTEMPTS > 100)); then
    echo "pubsub.sh: LLM_BOT_MAX_DELIVERY_ATTEMPTS must be 5..100 (got $MAX_ATTEMPTS)" >&2
    exit 2
fi

# Same rule as the worker: the prefix goes in front unless the name already starts with it.
prefixed() {
    if [[ -n "$PREFIX" && "$1" != "$PREFIX"* ]]; then
        printf '%s%s' "$PREFIX" "$1"
    else
        printf '%s' "$1"
    fi
}

INPUT_TOPIC="$(prefixed internal.llmbot.v1)"
DLQ_TOPIC="$(prefixed internal.deadletter.v1)"
EGRESS_TOPIC="$(prefixed internal.egress.v1)"
SUBSCRIPTION="$(prefixed internal.llmbot.v1.llm-bot)"
DLQ_SUBSCRIPTION="$(prefixed internal.deadletter.v1.operators)"
JOBS_TOPIC="$(prefixed internal.llmbot.consolidate.v1)"
JOBS_SUBSCRIPTION="$(prefixed internal.llmbot.consolidate.v1.llm-bot)"
readonly INPUT_TOPIC DLQ_TOPIC EGRESS_TOPIC SUBSCRIPTION DLQ_SUBSCRIPTION JOBS_TOPIC
readonly JOBS_SUBSCRIPTION

# Commands that change something go through here, so --dry-run shows exactly them.
change() {
    if [[ "$dry_run" == true ]]; then
        printf 'would run: gcloud'
        printf ' %q' "$@"
        printf '\n'
    else
        gcloud "$@"
    fi
}

exists() {
    gcloud pubsub "$1" describe "$2" --project="$PROJECT" --format='value(name)' >/dev/null 2>&1
}

ensure_topic() {
    if exists topics "$1"; then
        echo "topic $1: exists"
    else
        change pubsub topics create "$1" --project="$PROJECT"
    fi
}

# ensure_worker_subscription SUBSCRIPTION TOPIC ORDERING
ensure_worker_subscription() {
    local subscription="$1" topic="$2" ordered="$3"
    local policy=(
        --ack-deadline="$ACK_DEADLINE_S"
        --min-retry-delay="$MIN_RETRY_DELAY"
        --max-retry-delay="$MAX_RETRY_DELAY"
        --dead-letter-topic="projects/$PROJECT/topics/$DLQ_TOPIC"
        --max-delivery-attempts="$MAX_ATTEMPTS"
    )
    if exists subscriptions "$subscription"; then
        local current
        current="$(gcloud pubsub subscriptions describe "$subscription" --project="$PROJECT" \
            --format='value(enableMessageOrdering)')"
        current="${current,,}"
        [[ "$current" == true ]] || current=false
        if [[ "$current" != "$ordered" ]]; then
            echo "warning: subscription $subscription has message ordering $current;" \
                "ordering is fixed at creation: delete and re-create it to change" >&2
        fi
        change pubsub subscriptions update "$subscription" --project="$PROJECT" "${policy[@]}"
    else
        local extra=()
        if [[ "$ordered" == true ]]; then
            extra+=(--enable-message-ordering)
        fi
        change pubsub subscriptions create "$subscription" --project="$PROJECT" \
            --topic="$topic" "${policy[@]}" "${extra[@]}"
    fi
}

ensure_dlq_subscription() {
    if exists subscriptions "$DLQ_SUBSCRIPTION"; then
        echo "subscription $DLQ_SUBSCRIPTION: exists"
    else
        # --expiration-period=never: an unread DLQ subscription must not be garbage-collected.
        change pubsub subscriptions create "$DLQ_SUBSCRIPTION" --project="$PROJECT" \
            --topic="$DLQ_TOPIC" --ack-deadline="$ACK_DEADLINE_S" \
            --message-retention-duration="$DLQ_RETENTION" --expiration-period=never
    fi
}

# add-iam-policy-binding is itself idempotent: an existing binding is left as it is.
grant_dead_lettering() {
    local number agent
    number="$(gcloud projects describe "$PROJECT" --format='value(projectNumber)')"
    agent="serviceAccount:service-${number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    # Google creates a service agent lazily, so on a fresh project the Pub/Sub one may not
    # exist yet; this creates it (a no-op when it exists), and the first grant retries while
    # IAM catches up.
    change beta services identity create --service=pubsub.googleapis.com --project="$PROJECT"
    if [[ "$dry_run" == true ]]; then
        change pubsub topics add-iam-policy-binding "$DLQ_TOPIC" --project="$PROJECT" \
            --member="$agent" --role=roles/pubsub.publisher
    else
        retry gcloud pubsub topics add-iam-policy-binding "$DLQ_TOPIC" --project="$PROJECT" \
            --member="$agent" --role=roles/pubsub.publisher
    fi
    local subscription
    for subscription in "$SUBSCRIPTION" "$JOBS_SUBSCRIPTION"; do
        change pubsub subscriptions add-iam-policy-binding "$subscription" --project="$PROJECT" \
            --member="$agent" --role=roles/pubsub.subscriber
    done
}

grant_worker() {
    local member="serviceAccount:$worker_sa"
    if [[ "$dry_run" == true ]]; then
        account_visible "$worker_sa" "$PROJECT" ||
            echo "would create service account $worker_sa (and wait until IAM sees it)"
    else
        ensure_service_account "$worker_sa" "$PROJECT" "llm-bot worker"
    fi
    local subscription
    for subscription in "$SUBSCRIPTION" "$JOBS_SUBSCRIPTION"; do
        change pubsub subscriptions add-iam-policy-binding "$subscription" \
            --project="$PROJECT" --member="$member" --role=roles/pubsub.subscriber
    done
    local topic
    for topic in "$DLQ_TOPIC" "$EGRESS_TOPIC" "$JOBS_TOPIC"; do
        change pubsub topics add-iam-policy-binding "$topic" --project="$PROJECT" \
            --member="$member" --role=roles/pubsub.publisher
    done
}

ensure_topic "$INPUT_TOPIC"
ensure_topic "$DLQ_TOPIC"
ensure_topic "$EGRESS_TOPIC"
ensure_topic "$JOBS_TOPIC"
ensure_worker_subscription "$SUBSCRIPTION" "$INPUT_TOPIC" "$ordering"
ensure_worker_subscription "$JOBS_SUBSCRIPTION" "$JOBS_TOPIC" false
ensure_dlq_subscription
if [[ "$skip_iam" == true ]]; then
    echo "IAM skipped: grant the Pub/Sub service agent roles/pubsub.publisher on $DLQ_TOPIC" \
        "and roles/pubsub.subscriber on $SUBSCRIPTION and $JOBS_SUBSCRIPTION," \
        "or dead-lettering does not happen"
else
    grant_dead_lettering
    if [[ -n "$worker_sa" ]]; then
        grant_worker
    fi
fi
echo "pubsub: $INPUT_TOPIC -> $SUBSCRIPTION (dead letters -> $DLQ_TOPIC after $MAX_ATTEMPTS" \
    "attempts, ordering requested: $ordering), egress $EGRESS_TOPIC," \
    "operators read $DLQ_SUBSCRIPTION, consolidation jobs $JOBS_TOPIC -> $JOBS_SUBSCRIPTION"
