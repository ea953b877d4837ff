-- The once-only ledger of platform-tool calls (llm_bot/platform_tools/ledger.py): one row per call of
-- an event's run, written before the call is sent ('started') and again with its outcome
-- ('done'), each in its own short transaction, so a retried event answers what the first run
-- got instead of calling again. Keyed by the user first: the graph's user owns the row
-- (erasure finds it by the key's prefix, and a table sharded by user keeps it on one shard).
-- Every time is a parameter of the statement, never the database's clock.
CREATE TABLE tool_calls (
    user_id        text        NOT NULL,
    correlation_id text        NOT NULL,
    step_key       text        NOT NULL,
    call_index     integer     NOT NULL CHECK (call_index >= 0),
    tool_id        text        NOT NULL,
    arguments      jsonb       NOT NULL,
    state          text        NOT NULL CHECK (state IN ('started', 'done')),
    -- How many times the call was sent: 1, or 2 after one repeat; never more.
    attempts       integer     NOT NULL CHECK (attempts BETWEEN 1 AND 2),
    outcome        text,
    is_error       boolean,
    started_at     timestamptz NOT NULL,
    -- Until then the sender may still be waiting for the answer; after it, a started call
    -- is one whose sender stopped (died, was cancelled) between sending and recording.
    hold_until     timestamptz NOT NULL,
    finished_at    timestamptz,
    PRIMARY KEY (user_id, correlation_id, step_key, call_index),
    CHECK ((state = 'done') = (outcome IS NOT NULL)),
    CHECK ((outcome IS NULL) = (is_error IS NULL)),
    CHECK ((outcome IS NULL) = (finished_at IS NULL))
);

-- Retention (`llm-bot maintain`) reads calls by age.
CREATE INDEX tool_calls_started_at_idx ON tool_calls (started_at);
