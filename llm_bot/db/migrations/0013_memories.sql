-- Long-term memories in a table of ours (llm_bot/memory/store.py): one row per memory, keyed by
-- the user's id as conversation_turns.user_id holds it. The vector sits in the row, beside the
-- slot `llm-bot reembed` fills for the next model (embedding_next, as in conversation_turns),
-- and the full-text vector is stored, so memory search reads it instead of parsing every
-- memory per query; a search reads one user's rows by the primary key (llm_bot/memory/search.py
-- says why no index over every user's rows). Where a row was learned is its `visibility`,
-- 'dm' or 'public', in this table, memory_versions, conversation_turns and agent_notes alike.
CREATE TABLE memories (
    user_id        text        NOT NULL,
    key            text        NOT NULL,
    content        text        NOT NULL,
    metadata       jsonb       NOT NULL DEFAULT '{}',
    visibility     text        NOT NULL DEFAULT 'dm' CHECK (visibility IN ('dm', 'public')),
    -- No fixed dimension: the embedding model is a setting; `llm-bot reembed` moves them.
    embedding      vector,
    embedding_next vector,
    search         tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    PRIMARY KEY (user_id, key)
);

-- The memories held so far by LangGraph's PostgresStore, in its tables (created by the worker
-- at start, so they may not exist): namespace 'memories.<user id>' with '%' and '.' of the id
-- percent-encoded, value {content, metadata, learnedIn}. A value without learnedIn, or with
-- anything but 'public', is private. A vector older than its memory describes an earlier text,
-- so it is left behind (`llm-bot reembed` gives the memory one). store_vectors_next holds the
-- vectors of a re-embedding under way, which goes on from them.
CREATE FUNCTION pg_temp.memory_user(prefix text) RETURNS text LANGUAGE sql IMMUTABLE AS
$$ SELECT replace(replace(substr(prefix, length('memories.') + 1), '%2E', '.'), '%25', '%') $$;

DO $$
BEGIN
    IF to_regclass('store') IS NOT NULL THEN
        INSERT INTO memories (user_id, key, content, metadata, visibility, created_at,
                              updated_at)
        SELECT pg_temp.memory_user(prefix), key, coalesce(value->>'content', ''),
               CASE WHEN jsonb_typeof(value->'metadata') = 'object'
                    THEN value->'metadata' ELSE '{}' END,
               CASE WHEN value->>'learnedIn' = 'public' THEN 'public' ELSE 'dm' END,
               coalesce(created_at, updated_at, now()), coalesce(updated_at, created_at, now())
          FROM store
         WHERE starts_with(prefix, 'memories.');
    END IF;
    IF to_regclass('store_vectors') IS NOT NULL THEN
        UPDATE memories m SET embedding = v.embedding
          FROM store_vectors v JOIN store s ON s.prefix = v.prefix AND s.key = v.key
         WHERE v.field_name = 'content' AND starts_with(v.prefix, 'memories.')
           AND m.user_id = pg_temp.memory_user(v.prefix) AND m.key = v.key
           AND coalesce(v.updated_at >= s.updated_at, true);
    END IF;
    IF to_regclass('store_vectors_next') IS NOT NULL THEN
        UPDATE memories m SET embedding_next = v.embedding
          FROM store_vectors_next v JOIN store s ON s.prefix = v.prefix AND s.key = v.key
         WHERE v.field_name = 'content' AND starts_with(v.prefix, 'memories.')
           AND m.user_id = pg_temp.memory_user(v.prefix) AND m.key = v.key
           AND coalesce(v.updated_at >= s.updated_at, true);
    END IF;
END
$$;

DROP TABLE IF EXISTS store_vectors_next, store_vectors, store, store_migrations,
    vector_migrations;

-- Earlier texts of memories, by user id as the memories are.
ALTER TABLE memory_versions ADD COLUMN user_id text;
UPDATE memory_versions SET user_id = pg_temp.memory_user(prefix);
ALTER TABLE memory_versions
    ALTER COLUMN user_id SET NOT NULL,
    DROP COLUMN prefix,  -- and the primary key it was part of
    ADD PRIMARY KEY (user_id, key, version);
ALTER TABLE memory_versions RENAME COLUMN learned_in TO visibility;
UPDATE memory_versions SET visibility = 'dm' WHERE visibility <> 'public';
ALTER TABLE memory_versions ADD CHECK (visibility IN ('dm', 'public'));

ALTER TABLE conversation_turns RENAME COLUMN learned_in TO visibility;
ALTER TABLE conversation_turns
    RENAME CONSTRAINT conversation_turns_learned_in_check TO conversation_turns_visibility_check;
ALTER TABLE agent_notes RENAME COLUMN learned_in TO visibility;
ALTER TABLE agent_notes
    RENAME CONSTRAINT agent_notes_learned_in_check TO agent_notes_visibility_check;
