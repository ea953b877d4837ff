-- The effectively-once record (llm_bot/db/processed_events.py): one row per event and
-- routing step, claimed with a lease before the graph runs, then holding the exact output.
CREATE TABLE IF NOT EXISTS processed_events (
    correlation_id    text        NOT NULL,
    step_key          text        NOT NULL,
    claim_token       uuid,
    lease_until       timestamptz NOT NULL,
    outcome           text CHECK (outcome IN ('OK', 'SKIP', 'ERROR')),
    output_topic      text,
    output_data       bytea,
    output_attributes jsonb,
    ordering_key      text,
    published         boolean     NOT NULL DEFAULT false,
    claimed_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    stored_at         timestamptz,
    published_at      timestamptz,
    PRIMARY KEY (correlation_id, step_key),
    CHECK ((output_data IS NULL) = (outcome IS NULL)),
    CHECK (NOT published OR output_data IS NOT NULL)
);

-- For pruning old records by age.
CREATE INDEX IF NOT EXISTS processed_events_stored_at ON processed_events (stored_at);
