-- Only a deep user's turns enter recall's HNSW index (llm_bot/db/turn_index.py): inserting a
-- turn into it costs ~3 ms inside the group commit, and a typical user's recall never reads it.
-- ``indexed`` is set by the writer when recall found the user deep, and by `llm-bot maintain`
-- for the older turns of a user who became deep (llm_bot/lifecycle/turn_backfill.py).
ALTER TABLE conversation_turns ADD COLUMN IF NOT EXISTS indexed boolean NOT NULL DEFAULT false;

-- A deep user's turns not yet in the index are read exactly, through this index. It holds
-- every typical user's turns: a btree insertion per turn (measured in docs/performance.md,
-- "Recall at depth"), against an HNSW one.
CREATE INDEX IF NOT EXISTS conversation_turns_unindexed_idx ON conversation_turns (user_id)
    WHERE NOT indexed;

-- The turns of users who may be deep already (at least DEEP_FROM, 5,000 turns, the least depth
-- from which recall reads the index: llm_bot/memory/recall.py) go into the index as it is built
-- below, once over the rows, far cheaper than `llm-bot maintain`'s insertion row by row (~4 ms
-- a turn). A user below the depth recall computes is scanned whatever the flag says.
UPDATE conversation_turns SET indexed = true
 WHERE NOT indexed
   AND user_id IN (SELECT user_id FROM conversation_turns GROUP BY user_id
                    HAVING count(*) >= 5000);

-- The HNSW indexes again with the flag in their predicate (the definition of
-- llm_bot/db/turn_index.py). A shadow index of an unfinished `llm-bot reembed` goes too: that
-- command builds it again.
DO $$
DECLARE
    size integer;
    old text;
BEGIN
    FOR old IN SELECT indexname FROM pg_indexes
                WHERE schemaname = current_schema() AND tablename = 'conversation_turns'
                  AND indexname LIKE 'conversation\_turns\_%\_hnsw'
    LOOP
        EXECUTE format('DROP INDEX %I', old);
    END LOOP;
    SELECT dimensions INTO size FROM embedding_space;
    IF size IS NOT NULL AND size <= 4000 THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON conversation_turns'
            ' USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops)'
            ' WHERE indexed AND vector_dims(embedding) = %s',
            'conversation_turns_embedding_' || size || '_hnsw', size, size);
    END IF;
END
$$;
