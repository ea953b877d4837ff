-- Memory consolidation (llm_bot/consolidation): a thread's turns up to `consolidated_seq` went
-- into a consolidation job; those after it wait for their session to close. Threads that exist
-- when this runs start consolidated: what came before the feature is not derived after the fact.
ALTER TABLE conversation_threads ADD COLUMN consolidated_seq bigint NOT NULL DEFAULT 0;
UPDATE conversation_threads SET consolidated_seq = last_seq;

-- The sweep's bounded read (llm_bot/memory/turns/consolidation.py, closed_windows): only threads with turns
-- not yet consolidated, oldest silence first.
CREATE INDEX conversation_threads_unconsolidated_idx ON conversation_threads (last_turn_at)
    WHERE consolidated_seq < last_seq;

-- A session's summary is a row of the history its turns are in, so recall, export, erasure and
-- retention treat it as they treat a turn: role 'summary', under a negative seq (minus the last
-- seq it covers) so it never takes a turn's place, and session 0, so no window shows it.
ALTER TABLE conversation_turns DROP CONSTRAINT conversation_turns_role_check;
ALTER TABLE conversation_turns ADD CONSTRAINT conversation_turns_role_check
    CHECK (role IN ('user', 'assistant', 'summary')) NOT VALID;
ALTER TABLE conversation_turns VALIDATE CONSTRAINT conversation_turns_role_check;
