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
