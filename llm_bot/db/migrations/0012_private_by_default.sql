-- Where a row was learned fails closed: a row that does not say is private (learned in a DM),
-- so it never reaches a shared channel. Rows written before 0007 recorded where they were
-- learned got 'public' by default; the notes among them may hold what a user said in a DM.

-- Notes last written before 0007 was applied: their origin is unknown, so private.
UPDATE agent_notes n SET learned_in = 'dm'
  FROM schema_migrations m
 WHERE m.version = 7 AND n.updated_at <= m.applied_at AND n.learned_in <> 'dm';

-- Memories (LangGraph's `store`, created by the worker, so it may not exist yet) whose value
-- has no `learnedIn`, and the earlier versions of those facts.
DO $$
BEGIN
    IF to_regclass('store') IS NOT NULL THEN
        IF to_regclass('memory_versions') IS NOT NULL THEN
            UPDATE memory_versions v SET learned_in = 'dm'
              FROM store s
             WHERE s.prefix = v.prefix AND s.key = v.key AND NOT s.value ? 'learnedIn';
        END IF;
        UPDATE store SET value = value || '{"learnedIn": "dm"}'::jsonb
         WHERE prefix LIKE 'memories.%' AND NOT value ? 'learnedIn';
    END IF;
END
$$;

ALTER TABLE conversation_turns ALTER COLUMN learned_in SET DEFAULT 'dm';
ALTER TABLE agent_notes ALTER COLUMN learned_in SET DEFAULT 'dm';
ALTER TABLE memory_versions ALTER COLUMN learned_in SET DEFAULT 'dm';
