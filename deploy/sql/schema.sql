-- llm-bot schema for a managed Postgres >= 15 with pgvector (Cloud SQL, AlloyDB, ...).
--
-- Generated from llm_bot/db/migrations/*.sql, in order; `llm-bot migrate` applies the same
-- files (deploy/deploy.sh runs it as a Cloud Run job), so prefer that. This file is for review
-- and for applying by hand: psql "$DATABASE_URL" --single-transaction -f deploy/sql/schema.sql
-- It records each file in schema_migrations like `llm-bot migrate` does, so the two mix.
-- Regenerate: .venv/bin/python tests/unit/deploy/test_deploy_files.py --write-schema
-- (tests/unit/deploy/test_deploy_files.py fails when this file and the migrations differ).
--
-- CREATE EXTENSION vector needs a privileged role (on Cloud SQL, a cloudsqlsuperuser member
-- such as the postgres user) the first time.

CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY,
    name text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- ==== 0001_extensions.sql ====
-- pgvector holds every embedding the service stores (memories, history recall).
CREATE EXTENSION IF NOT EXISTS vector;
INSERT INTO schema_migrations (version, name) VALUES (1, '0001_extensions.sql') ON CONFLICT DO NOTHING;

-- ==== 0002_processed_events.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (2, '0002_processed_events.sql') ON CONFLICT DO NOTHING;

-- ==== 0003_conversation_memory.sql ====
-- Thread history: user/assistant pairs with gap-free seq per thread, idle-split sessions,
-- and what recall searches (an embedding of each message and a full-text vector).

CREATE TABLE IF NOT EXISTS conversation_threads (
    thread_id     text PRIMARY KEY,
    last_seq      bigint NOT NULL DEFAULT 0,
    session_id    bigint NOT NULL DEFAULT 0,
    last_turn_at  timestamptz
);

CREATE TABLE IF NOT EXISTS conversation_turns (
    thread_id     text NOT NULL,
    seq           bigint NOT NULL,
    user_id       text NOT NULL,
    session_id    bigint NOT NULL,
    pair_index    bigint NOT NULL,
    role          text NOT NULL CHECK (role IN ('user', 'assistant')),
    content       text NOT NULL,
    created_at    timestamptz NOT NULL,
    source_event  text NOT NULL,
    -- No fixed dimension: the embedding model is a setting; `llm-bot memories reembed` rewrites.
    embedding     vector,
    search        tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (source_event, role)
);

CREATE INDEX IF NOT EXISTS conversation_turns_user_idx ON conversation_turns (user_id, created_at);

-- One natural-language notes document per (user, agent), curated by the model.
CREATE TABLE IF NOT EXISTS agent_notes (
    user_id     text NOT NULL,
    agent_name  text NOT NULL,
    content     text NOT NULL,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (user_id, agent_name)
);
INSERT INTO schema_migrations (version, name) VALUES (3, '0003_conversation_memory.sql') ON CONFLICT DO NOTHING;

-- ==== 0004_processed_event_attempts.sql ====
-- How many times an event was claimed (each delivery that reached processing, on any
-- instance): a count of our own, since Pub/Sub counts delivery attempts only on subscriptions
-- with a dead-letter policy. An event over the limit is given up instead of retried forever.
ALTER TABLE processed_events ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0;
INSERT INTO schema_migrations (version, name) VALUES (4, '0004_processed_event_attempts.sql') ON CONFLICT DO NOTHING;

-- ==== 0005_unambiguous_thread_ids.sql ====
-- Thread ids escape ':' and '%' in the connector and the channel (llm_bot/events/identity.py),
-- so a channel named 'a:b' is no longer the DM of user 'b' in channel 'a'. Rewrite the ids
-- written before, read as '<connector>:<channel>[:<user id>]' with a connector free of ':' (a
-- platform name): a thread whose every turn is one user's and whose id ends with ':' and that
-- user's id is that user's DM. Ids without ':' or '%' in their channel stay as they are.
CREATE TEMPORARY TABLE thread_renames ON COMMIT DROP AS
WITH parts AS (
    SELECT t.thread_id,
           CASE WHEN count(DISTINCT u.user_id) = 1
                 AND t.thread_id LIKE '%:%:' || replace(replace(replace(min(u.user_id),
                     '\', '\\'), '%', '\%'), '_', '\_')
                THEN min(u.user_id) END AS dm_user
      FROM conversation_threads t
      LEFT JOIN conversation_turns u ON u.thread_id = t.thread_id
     GROUP BY t.thread_id
), split AS (
    SELECT thread_id, dm_user,
           CASE WHEN dm_user IS NULL THEN thread_id
                ELSE left(thread_id, length(thread_id) - length(dm_user) - 1) END AS base
      FROM parts
), renamed AS (
    SELECT thread_id,
           split_part(base, ':', 1) || ':'
           || replace(replace(substr(base, length(split_part(base, ':', 1)) + 2), '%', '%25'),
                      ':', '%3A')
           || coalesce(':' || dm_user, '') AS new_id
      FROM split
     WHERE position(':' IN base) > 0
)
SELECT thread_id AS old_id, new_id FROM renamed WHERE new_id <> thread_id;

UPDATE conversation_turns u SET thread_id = r.new_id
  FROM thread_renames r WHERE u.thread_id = r.old_id;
UPDATE conversation_threads t SET thread_id = r.new_id
  FROM thread_renames r WHERE t.thread_id = r.old_id;
INSERT INTO schema_migrations (version, name) VALUES (5, '0005_unambiguous_thread_ids.sql') ON CONFLICT DO NOTHING;

-- ==== 0006_personalities.sql ====
-- Personalities by name (BitBrat's personality documents, personality.v1.schema.json): a
-- `personality` annotation naming one gets the text of its highest active version
-- (llm_bot/db/personalities.py). One row per name and version.
CREATE TABLE IF NOT EXISTS personalities (
    name        text        NOT NULL,
    version     integer     NOT NULL CHECK (version >= 1),
    status      text        NOT NULL CHECK (status IN ('active', 'inactive', 'archived')),
    text        text        NOT NULL,
    platform    text,
    model       text,
    tags        text[],
    description text,
    author      text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (name, version)
);
INSERT INTO schema_migrations (version, name) VALUES (6, '0006_personalities.sql') ON CONFLICT DO NOTHING;

-- ==== 0007_learned_in.sql ====
-- Where each turn and the notes document were learned: in a DM or in a shared channel. In a
-- shared channel, only what was learned in shared channels reaches the model's context
-- (MEMORY_PRIVATE_IN_PUBLIC widens it); memories carry the same as `learnedIn` in their value.
-- Turns written before: a DM thread's id ends with ':' and its user's id (identity.py).
ALTER TABLE conversation_turns
    ADD COLUMN IF NOT EXISTS learned_in text NOT NULL DEFAULT 'public'
    CHECK (learned_in IN ('dm', 'public'));
UPDATE conversation_turns SET learned_in = 'dm'
 WHERE learned_in = 'public' AND thread_id LIKE '%:%:%'
   AND right(thread_id, length(user_id) + 1) = ':' || user_id;
ALTER TABLE agent_notes
    ADD COLUMN IF NOT EXISTS learned_in text NOT NULL DEFAULT 'public'
    CHECK (learned_in IN ('dm', 'public'));
INSERT INTO schema_migrations (version, name) VALUES (7, '0007_learned_in.sql') ON CONFLICT DO NOTHING;

-- ==== 0008_embedding_space.sql ====
-- Which embedding model made every stored vector (memories in store_vectors, history in
-- conversation_turns.embedding): one row, written when the store is first set up and changed
-- only by `llm-bot reembed` when it switches to a new model (llm_bot/db/embedding_space.py).
-- While a re-embedding is under way, `next_model` names its target and the new vectors are
-- built beside the live ones: conversation_turns.embedding_next and store_vectors_next.
CREATE TABLE IF NOT EXISTS embedding_space (
    singleton       boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    model           text        NOT NULL,
    dimensions      integer     NOT NULL CHECK (dimensions > 0),
    next_model      text,
    next_dimensions integer     CHECK (next_dimensions > 0),
    switched_at     timestamptz NOT NULL DEFAULT now(),
    CHECK ((next_model IS NULL) = (next_dimensions IS NULL))
);

ALTER TABLE conversation_turns ADD COLUMN IF NOT EXISTS embedding_next vector;
INSERT INTO schema_migrations (version, name) VALUES (8, '0008_embedding_space.sql') ON CONFLICT DO NOTHING;

-- ==== 0009_lifecycle.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (9, '0009_lifecycle.sql') ON CONFLICT DO NOTHING;

-- ==== 0010_memory_versions.sql ====
-- Facts that change (llm_bot/memory/versions.py): when a memory is rewritten under its key (the
-- model corrects it, or a near-duplicate is merged into it), the text it had is kept here with
-- the period it was current. `store` holds only current facts, so only they are injected.
-- A memory that is deleted (forgotten) takes its versions with it.
CREATE TABLE IF NOT EXISTS memory_versions (
    prefix     text        NOT NULL,  -- the user's namespace, as store.prefix
    key        text        NOT NULL,
    version    integer     NOT NULL CHECK (version >= 1),
    content    text        NOT NULL,
    metadata   jsonb       NOT NULL DEFAULT '{}',
    learned_in text        NOT NULL DEFAULT 'public',
    valid_from timestamptz NOT NULL,
    valid_to   timestamptz NOT NULL,
    PRIMARY KEY (prefix, key, version),
    CHECK (valid_from <= valid_to)
);
CREATE INDEX IF NOT EXISTS memory_versions_valid_to_idx ON memory_versions (valid_to);
INSERT INTO schema_migrations (version, name) VALUES (10, '0010_memory_versions.sql') ON CONFLICT DO NOTHING;

-- ==== 0011_turn_search_index.sql ====
-- Recall's lexical side finds a user's turns by the query's distinguishing words (BM25,
-- llm_bot/memory/recall.py): for a long history those are the words held by at most half of
-- the user's recent turns, so the matching turns are few and this index finds them without
-- reading the rest of the history. (Before BM25 every turn sharing any word was ranked, and the
-- index could not help: docs/performance.md, "Per-user depth".)
CREATE INDEX IF NOT EXISTS conversation_turns_search_idx ON conversation_turns USING gin (search);
INSERT INTO schema_migrations (version, name) VALUES (11, '0011_turn_search_index.sql') ON CONFLICT DO NOTHING;

-- ==== 0012_private_by_default.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (12, '0012_private_by_default.sql') ON CONFLICT DO NOTHING;

-- ==== 0013_memories.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (13, '0013_memories.sql') ON CONFLICT DO NOTHING;

-- ==== 0014_memory_words.sql ====
-- Memory search's lexical side finds a user's memories by the question's words through this
-- index (llm_bot/memory/search.py) instead of reading every memory of the user. Each word is
-- indexed under its user: a key is a hash of the user id and the lexeme, so one key holds one
-- user's memories with that word, and a word common among all users does not make the index
-- read other users' rows (what a GIN index on `search` alone did). Built-in GIN over text[]:
-- btree_gin's (user_id, search) would do the same on Cloud SQL, but not on every Postgres we
-- test on. The key is derived from the content and the user id, so it is deleted with the row
-- (erasure, retention) and untouched by `llm-bot reembed`.
CREATE FUNCTION memory_words(owner text, content text) RETURNS text[]
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN ARRAY(
        SELECT md5(owner) || ' ' || lexeme
          FROM unnest(tsvector_to_array(to_tsvector('english', content))) AS lexeme
    );

-- fastupdate off: a pending list would be read by every search until it is merged.
CREATE INDEX memories_words_idx ON memories USING gin (memory_words(user_id, content))
    WITH (fastupdate = off);
INSERT INTO schema_migrations (version, name) VALUES (14, '0014_memory_words.sql') ON CONFLICT DO NOTHING;

-- ==== 0015_turn_vector_index.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (15, '0015_turn_vector_index.sql') ON CONFLICT DO NOTHING;

-- ==== 0016_embedding_space_for_write.sql ====
-- The embedding space as a write transaction must see it, in one statement: the shared lock that
-- `llm-bot reembed`'s switch takes exclusively, then the row, read with a snapshot taken after
-- the lock was granted (a VOLATILE PL/pgSQL function takes a fresh snapshot for each query it
-- runs; the calling statement's own snapshot is older than the lock). The lock's id is the
-- caller's (llm_bot/db/embedding_space.py), so it is defined in one place.
CREATE OR REPLACE FUNCTION embedding_space_for_write(lock_id bigint)
RETURNS TABLE (model text, dimensions integer, next_model text, next_dimensions integer)
LANGUAGE plpgsql VOLATILE AS
$$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(lock_id);
    RETURN QUERY SELECT s.model, s.dimensions, s.next_model, s.next_dimensions
                   FROM embedding_space s;
END
$$;
INSERT INTO schema_migrations (version, name) VALUES (16, '0016_embedding_space_for_write.sql') ON CONFLICT DO NOTHING;

-- ==== 0017_tool_calls.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (17, '0017_tool_calls.sql') ON CONFLICT DO NOTHING;

-- ==== 0018_turns_indexed_when_deep.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (18, '0018_turns_indexed_when_deep.sql') ON CONFLICT DO NOTHING;

-- ==== 0019_tenant_keys.sql ====
-- The tenant first in every primary and unique key (docs/citus.md, "The shard key"): the value
-- a Citus cluster distributes each table by (llm_bot/db/distribution.py), so a statement that
-- names it goes to one shard, and one event of a DM commits on one node. On one Postgres the
-- keys serve the same statements as before. The keys are rebuilt here, which locks each table
-- while its index is built: apply with the workers stopped (a worker of an earlier release
-- claims by a key that no longer exists and fails).

-- The effectively-once record: by the event's user (llm_bot/events/identity.py), then the
-- event. A record without a user (NULL since 0009) is a claim that never stored an output, or
-- a stored output whose bytes were not an event: it gets the user '', which no event has, so
-- nothing claims it again, and retention (`llm-bot maintain`) removes it as it ages.
UPDATE processed_events SET user_id = '' WHERE user_id IS NULL;
ALTER TABLE processed_events
    ALTER COLUMN user_id SET NOT NULL,
    DROP CONSTRAINT processed_events_pkey,
    ADD PRIMARY KEY (user_id, correlation_id, step_key);
-- The primary key starts with the user: erasure and export find a user's records by it.
DROP INDEX IF EXISTS processed_events_user_idx;

-- A thread's counter lives with its tenant: a DM's is its user, a shared channel's is the
-- channel's thread id. A DM thread id is '<connector>:<channel>:<user id>' with the connector
-- and the channel escaped so they hold no ':' (0005), so the user is everything after the
-- second ':'; a thread id with fewer is a shared channel's.
ALTER TABLE conversation_threads ADD COLUMN tenant text;
UPDATE conversation_threads
   SET tenant = coalesce(substring(thread_id FROM '^[^:]*:[^:]*:(.*)$'), thread_id);
ALTER TABLE conversation_threads
    ALTER COLUMN tenant SET NOT NULL,
    DROP CONSTRAINT conversation_threads_pkey,
    ADD PRIMARY KEY (tenant, thread_id);

-- The window of a shared channel, on the channel's shard (its turns are on their authors'):
-- a copy of the channel's newest turns, without vectors or full text, at most
-- 2 * CONTEXT_PAIRS of them (llm_bot/memory/history.py deletes the older ones as it writes).
CREATE TABLE channel_turns (
    thread_id    text        NOT NULL,
    seq          bigint      NOT NULL,
    user_id      text        NOT NULL,
    session_id   bigint      NOT NULL,
    role         text        NOT NULL CHECK (role IN ('user', 'assistant')),
    content      text        NOT NULL,
    created_at   timestamptz NOT NULL,
    source_event text        NOT NULL,
    visibility   text        NOT NULL DEFAULT 'dm' CHECK (visibility IN ('dm', 'public')),
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, source_event, role)
);

-- Each shared channel's newest 30 turns: the window at the default CONTEXT_PAIRS (15). With a
-- larger setting a channel's window is shorter until its new turns fill it.
INSERT INTO channel_turns (thread_id, seq, user_id, session_id, role, content, created_at,
                           source_event, visibility)
SELECT t.thread_id, t.seq, t.user_id, t.session_id, t.role, t.content, t.created_at,
       t.source_event, t.visibility
  FROM conversation_threads th
 CROSS JOIN LATERAL (
    SELECT * FROM conversation_turns u WHERE u.thread_id = th.thread_id
     ORDER BY u.seq DESC LIMIT 30) t
 WHERE th.tenant = th.thread_id;

-- Turns by their author: recall reads one user's turns from every thread.
ALTER TABLE conversation_turns
    DROP CONSTRAINT conversation_turns_pkey,
    DROP CONSTRAINT conversation_turns_source_event_role_key,
    ADD PRIMARY KEY (user_id, thread_id, seq),
    ADD UNIQUE (user_id, source_event, role);

-- A pair of turns appended to its thread (llm_bot/memory/history.py), one statement for the
-- caller. Each statement inside names one tenant, so on Citus each goes to one shard, and a
-- DM's pair commits on its user's node alone: a modifying CTE is planned apart from the
-- statement holding it, and an INSERT ... SELECT from its rows goes through the coordinator
-- with two-phase commit. A pair already written for the event (a group commit rerun after
-- its commit's acknowledgement was lost) writes nothing. The thread's row is created on its
-- first pair, else locked and moved on by two seqs, and the pair takes the two seqs it made
-- room for; a thread silent for longer than ``idle`` starts a new session. A shared channel
-- (``owner`` is the thread id) also keeps its newest ``window_turns`` turns in channel_turns.
CREATE FUNCTION append_pair(
    owner text, thread text, author text, at timestamptz, idle interval, source text,
    user_text text, assistant_text text, user_vector vector, assistant_vector vector,
    shown_as text, in_index boolean, window_turns integer)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    last bigint;
    session bigint;
BEGIN
    IF EXISTS (SELECT FROM conversation_turns t
                WHERE t.user_id = author AND t.source_event = source) THEN
        RETURN;
    END IF;
    INSERT INTO conversation_threads AS th (tenant, thread_id, last_seq, session_id, last_turn_at)
    VALUES (owner, thread, 2, 1, at)
    ON CONFLICT (tenant, thread_id) DO UPDATE
       SET last_seq = th.last_seq + 2,
           session_id = th.session_id + CASE
               WHEN th.last_turn_at IS NULL OR EXCLUDED.last_turn_at - th.last_turn_at > idle
               THEN 1 ELSE 0 END,
           last_turn_at = EXCLUDED.last_turn_at
    RETURNING th.last_seq, th.session_id INTO last, session;
    INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index, role, content,
                                    created_at, source_event, embedding, visibility, indexed)
    VALUES (thread, last - 1, author, session, last / 2, 'user', user_text, at, source,
            user_vector, shown_as, in_index),
           (thread, last, author, session, last / 2, 'assistant', assistant_text, at, source,
            assistant_vector, shown_as, in_index);
    IF owner = thread THEN
        INSERT INTO channel_turns (thread_id, seq, user_id, session_id, role, content, created_at,
                                   source_event, visibility)
        VALUES (thread, last - 1, author, session, 'user', user_text, at, source, shown_as),
               (thread, last, author, session, 'assistant', assistant_text, at, source, shown_as);
        DELETE FROM channel_turns c WHERE c.thread_id = thread AND c.seq <= last - window_turns;
    END IF;
END
$$;

-- An event's output stored under its claim (llm_bot/db/processed_events.py), with the embedding
-- space under its write guard (0016) for the memory writes of the same transaction: one
-- statement for the caller, as before. A function, so that on Citus the guard's lock is taken
-- on the coordinator, where `llm-bot reembed` takes it exclusively: a statement holding both
-- would be sent whole to the event's shard, lock and all. The guard comes first (the record is
-- not a table the re-embedding's switch alters). ``stored`` is false when the claim was lost;
-- the space's columns are null when no model is recorded.
CREATE FUNCTION store_event_output(
    lock_id bigint, owner text, event text, step text, token uuid, result text, topic text,
    data bytea, attributes jsonb, ordering text, thread text, at timestamptz,
    OUT stored boolean, OUT model text, OUT dimensions integer, OUT next_model text,
    OUT next_dimensions integer)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT s.model, s.dimensions, s.next_model, s.next_dimensions
      INTO model, dimensions, next_model, next_dimensions
      FROM embedding_space_for_write(lock_id) s;
    UPDATE processed_events p
       SET outcome = result, output_topic = topic, output_data = data,
           output_attributes = attributes, ordering_key = ordering, thread_id = thread,
           stored_at = at
     WHERE p.user_id = owner AND p.correlation_id = event AND p.step_key = step
       AND p.claim_token = token;
    stored := FOUND;
END
$$;

-- A table's estimated rows, by its oid: recall (llm_bot/memory/recall.py) reads the size of the
-- table holding a user's turns through one of them, which on Citus is the user's shard.
CREATE FUNCTION relation_rows(relation oid) RETURNS real LANGUAGE sql STABLE PARALLEL SAFE
    RETURN (SELECT reltuples FROM pg_class WHERE oid = relation);
INSERT INTO schema_migrations (version, name) VALUES (19, '0019_tenant_keys.sql') ON CONFLICT DO NOTHING;

-- ==== 0020_answer_explanations.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (20, '0020_answer_explanations.sql') ON CONFLICT DO NOTHING;

-- ==== 0021_console_views.sql ====
-- The operator console's audit (llm_bot/db/console_views.py): one row per view of a user's
-- data in `llm-bot console`: which user, who looked (the bearer token's name or the IAP
-- identity), which page, when. The viewed user's own record: erased with them and shown in
-- their export, so it is keyed, and on Citus sharded, by that user.
CREATE TABLE console_views (
    user_id   text        NOT NULL,
    viewed_at timestamptz NOT NULL,
    viewer    text        NOT NULL,
    page      text        NOT NULL
);

CREATE INDEX console_views_user_idx ON console_views (user_id, viewed_at);

-- The console's database role: it reads every table and writes only its audit. A login role
-- for the console is made a member (README, "The operator console"), so a console can never
-- change what the worker stores, whatever its code does. Roles belong to the server, not the
-- database: made once, kept when the schema is made again.
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'llm_bot_console') THEN
        CREATE ROLE llm_bot_console NOLOGIN;
    END IF;
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO llm_bot_console', current_schema());
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO llm_bot_console', current_schema());
    -- Tables later migrations create are readable too.
    EXECUTE format(
        'ALTER DEFAULT PRIVILEGES IN SCHEMA %I GRANT SELECT ON TABLES TO llm_bot_console',
        current_schema()
    );
END $$;

GRANT INSERT ON console_views TO llm_bot_console;
INSERT INTO schema_migrations (version, name) VALUES (21, '0021_console_views.sql') ON CONFLICT DO NOTHING;

-- ==== 0022_consolidation.sql ====
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
INSERT INTO schema_migrations (version, name) VALUES (22, '0022_consolidation.sql') ON CONFLICT DO NOTHING;

-- ==== 0023_summaries_by_thread.sql ====
-- What was derived from turns goes with them (llm_bot/lifecycle/provenance.py): when turns are
-- erased or expire, every session summary whose window covered one goes too, in whichever
-- speaker's rows it lies. A summary is found by its thread and window, through this index of
-- the summaries alone (the table's key starts with the author, whom the erased turn does not
-- name for another speaker's copy).
CREATE INDEX IF NOT EXISTS conversation_turns_summaries_idx ON conversation_turns (thread_id, seq)
    WHERE role = 'summary';
INSERT INTO schema_migrations (version, name) VALUES (23, '0023_summaries_by_thread.sql') ON CONFLICT DO NOTHING;

-- ==== 0024_console_views_replica_identity.sql ====
-- A table without a primary key has no replica identity, and Citus moves a shard without
-- blocking its writes (`citus_rebalance_start()`, `citus_drain_node()` in their default
-- mode) by logical replication, which needs one on every table of the shard's group: the
-- console's audit alone had none, so adding or draining a node failed (docs/citus.md). Its
-- rows are appended and deleted whole with their user, never updated, and may repeat: the
-- whole row is their identity.
ALTER TABLE console_views REPLICA IDENTITY FULL;
INSERT INTO schema_migrations (version, name) VALUES (24, '0024_console_views_replica_identity.sql') ON CONFLICT DO NOTHING;
