# shellcheck shell=bash
# Sourced by deploy/pubsub.sh and deploy/deploy.sh: what both need of IAM on a fresh project.
#
# A new service account is not visible everywhere at once: IAM reads are eventually
# consistent, and a grant naming an account created a moment ago is refused with "service
# account ... does not exist". Google's advice is to retry with exponential backoff, so an
# account made here is waited for (described until it answers) before anything names it.

# First delay of the backoff, doubled each attempt (2 s .. about 4 min in all).
RETRY_DELAY_S="${DEPLOY_RETRY_DELAY_S:-2}"
RETRY_ATTEMPTS=8

# Run "$@" until it succeeds, RETRY_ATTEMPTS times at most; its last failure is returned.
retry() {
    local attempt delay="$RETRY_DELAY_S"
    for ((attempt = 1; attempt < RETRY_ATTEMPTS; attempt++)); do
        if "$@"; then
            return 0
        fi
        echo "  not yet (attempt $attempt of $RETRY_ATTEMPTS), again in ${delay}s" >&2
        sleep "$delay"
        delay=$((delay * 2))
    done
    "$@"
}

account_visible() {
    gcloud iam service-accounts describe "$1" --project="$2" --format='value(email)' \
        >/dev/null 2>&1
}

# ensure_service_account EMAIL PROJECT DISPLAY_NAME: create the account when it is missing,
# then wait until IAM sees it, so the grants that follow are not refused.
ensure_service_account() {
    local email="$1" project="$2" display="$3"
    if account_visible "$email" "$project"; then
        return 0
    fi
    if [[ "$email" != *"@${project}.iam.gserviceaccount.com" ]]; then
        echo "service account $email does not exist (and is not one of $project's to create)" >&2
        return 1
    fi
    gcloud iam service-accounts create "${email%%@*}" --project="$project" \
        --display-name="$display"
    if ! retry account_visible "$email" "$project"; then
        echo "service account $email was created but IAM still does not see it" >&2
        return 1
    fi
}
