-- What was derived from turns goes with them (llm_bot/lifecycle/provenance.py): when turns are
-- erased or expire, every session summary whose window covered one goes too, in whichever
-- speaker's rows it lies. A summary is found by its thread and window, through this index of
-- the summaries alone (the table's key starts with the author, whom the erased turn does not
-- name for another speaker's copy).
CREATE INDEX IF NOT EXISTS conversation_turns_summaries_idx ON conversation_turns (thread_id, seq)
    WHERE role = 'summary';
