-- History recall at depth (llm_bot/memory/recall.py, llm_bot/db/turn_index.py).
--
-- A deep user's nearest turns come from an HNSW index on the vectors of the embedding space's
-- size: built here when the space is recorded (a database that has run the worker); otherwise
-- the worker builds it as it records the space. Naming and definition are those of
-- llm_bot/db/turn_index.py (index_definition). On a large table this build takes minutes and
-- holds writes to conversation_turns off meanwhile; `llm-bot reembed`, run with the live model
-- before migrating, builds the same index concurrently, and this step then finds it.
DO $$
DECLARE
    size integer;
BEGIN
    SELECT dimensions INTO size FROM embedding_space;
    IF size IS NOT NULL AND size <= 4000 THEN
        EXECUTE format(
            'CREATE INDEX IF NOT EXISTS %I ON conversation_turns'
            ' USING hnsw ((embedding::halfvec(%s)) halfvec_cosine_ops)'
            ' WHERE vector_dims(embedding) = %s',
            'conversation_turns_embedding_' || size || '_hnsw', size, size);
    END IF;
END
$$;

-- Recall's lexical side reads a user's most recent turns through conversation_turns_user_idx
-- and matches them there; the full-text index over every user's turns serves no query and
-- cost every write a GIN insertion.
DROP INDEX IF EXISTS conversation_turns_search_idx;
