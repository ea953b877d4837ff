-- Why each answer is what it is (llm_bot/explanation/table.py): one row per answered event,
-- written in the transaction that stores the event's output. The record holds ids, ranks,
-- scores and hashes of what reached the model and counts of what was left out, never a copy of
-- anyone's words: the words are read from their own rows when the explanation is shown, so
-- erasing a speaker erases them from every explanation that cited them. Keyed by the requester
-- first: the requester's tenant (docs/citus.md), erased, exported and retained with their
-- records; the thread names it for `llm-bot forget-thread`.
CREATE TABLE answer_explanations (
    user_id        text        NOT NULL,
    correlation_id text        NOT NULL,
    thread_id      text,
    created_at     timestamptz NOT NULL,
    record         jsonb       NOT NULL,
    PRIMARY KEY (user_id, correlation_id)
);

-- `llm-bot explain CORRELATION_ID` names no user; retention reads by age; forget-thread by thread.
CREATE INDEX answer_explanations_correlation_idx ON answer_explanations (correlation_id);
CREATE INDEX answer_explanations_created_at_idx ON answer_explanations (created_at);
CREATE INDEX answer_explanations_thread_idx ON answer_explanations (thread_id);

-- The output and its explanation in one statement: the event's output as 0019's function
-- stores it, then, when it was stored (the claim still ours) and the event has an explanation,
-- the explanation on the same user's shard. The function of 0019 stays for workers of the
-- version before, still running while this one rolls out.
CREATE FUNCTION store_event_output(
    lock_id bigint, owner text, event text, step text, token uuid, result text, topic text,
    data bytea, attributes jsonb, ordering text, thread text, at timestamptz, explanation jsonb,
    OUT stored boolean, OUT model text, OUT dimensions integer, OUT next_model text,
    OUT next_dimensions integer)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT s.stored, s.model, s.dimensions, s.next_model, s.next_dimensions
      INTO stored, model, dimensions, next_model, next_dimensions
      FROM store_event_output(lock_id, owner, event, step, token, result, topic, data,
                              attributes, ordering, thread, at) s;
    IF stored AND explanation IS NOT NULL THEN
        INSERT INTO answer_explanations (user_id, correlation_id, thread_id, created_at, record)
        VALUES (owner, event, thread, at, explanation)
        ON CONFLICT (user_id, correlation_id) DO UPDATE
           SET thread_id = EXCLUDED.thread_id, created_at = EXCLUDED.created_at,
               record = EXCLUDED.record;
    END IF;
END
$$;
