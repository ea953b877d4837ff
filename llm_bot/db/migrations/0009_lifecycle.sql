-- Data over months (llm_bot/lifecycle): erasure and export find a user's and a thread's
-- processed-event records by column instead of by reading every stored event, and retention
-- (`llm-bot maintain`) finds expired rows by index.
ALTER TABLE processed_events ADD COLUMN IF NOT EXISTS user_id text;
ALTER TABLE processed_events ADD COLUMN IF NOT EXISTS thread_id text;

-- Records stored before this migration: the ids are read back from the stored event, by the
-- rules of llm_bot/events/identity.py (every part but the last escaped). A row whose bytes are
-- not an event keeps NULL ids; retention removes it like any other.
CREATE FUNCTION pg_temp.escaped(part text) RETURNS text LANGUAGE sql IMMUTABLE AS
$$ SELECT replace(replace(coalesce(part, ''), '%', '%25'), ':', '%3A') $$;

CREATE FUNCTION pg_temp.event_ids(data bytea, OUT user_id text, OUT thread_id text)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    event jsonb;
    channel text;
BEGIN
    event := convert_from(data, 'UTF8')::jsonb;
    user_id := coalesce(
        event #>> '{identity,user,id}',
        pg_temp.escaped(event #>> '{identity,external,platform}') || ':'
            || (event #>> '{identity,external,id}'));
    channel := coalesce(nullif(event #>> '{egress,channel}', ''),
                        nullif(event #>> '{ingress,channel}', ''));
    thread_id := pg_temp.escaped(event #>> '{egress,connector}') || ':'
        || pg_temp.escaped(channel);
    IF event #>> '{egress,type}' = 'dm' OR channel IS NULL THEN
        thread_id := thread_id || ':' || user_id;
    END IF;
EXCEPTION WHEN others THEN
    user_id := NULL;
    thread_id := NULL;
END $$;

UPDATE processed_events p
   SET user_id = ids.user_id, thread_id = ids.thread_id
  FROM (SELECT correlation_id, step_key, (pg_temp.event_ids(output_data)).*
          FROM processed_events WHERE output_data IS NOT NULL AND user_id IS NULL) ids
 WHERE p.correlation_id = ids.correlation_id AND p.step_key = ids.step_key;

CREATE INDEX IF NOT EXISTS processed_events_user_idx ON processed_events (user_id);
CREATE INDEX IF NOT EXISTS processed_events_thread_idx ON processed_events (thread_id);

-- Retention reads records by age; stored_at had an index and no job.
DROP INDEX IF EXISTS processed_events_stored_at;
CREATE INDEX IF NOT EXISTS processed_events_claimed_at_idx ON processed_events (claimed_at);
CREATE INDEX IF NOT EXISTS conversation_turns_created_at_idx ON conversation_turns (created_at);
