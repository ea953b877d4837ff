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
