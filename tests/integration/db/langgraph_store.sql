-- LangGraph's PostgresStore tables as AsyncPostgresStore(index={dims, "distance_type": "cosine",
-- ann_index_config {"kind": "hnsw"}}).setup() creates them (langgraph-checkpoint-postgres 3.2:
-- its MIGRATIONS and VECTOR_MIGRATIONS, each recorded in its migrations table), and the table
-- `llm-bot reembed` built beside store_vectors while a re-embedding was under way. %(dims)s
-- and %(next_dims)s are the sizes of the live and the next model.
CREATE TABLE store_migrations (v INTEGER PRIMARY KEY);
CREATE TABLE store (
    prefix text NOT NULL,
    key text NOT NULL,
    value jsonb NOT NULL,
    created_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (prefix, key)
);
CREATE INDEX store_prefix_idx ON store USING btree (prefix text_pattern_ops);
ALTER TABLE store
ADD COLUMN IF NOT EXISTS expires_at TIMESTAMP WITH TIME ZONE,
ADD COLUMN IF NOT EXISTS ttl_minutes INT;
CREATE INDEX idx_store_expires_at ON store (expires_at) WHERE expires_at IS NOT NULL;
INSERT INTO store_migrations (v) VALUES (0), (1), (2), (3);

CREATE TABLE vector_migrations (v INTEGER PRIMARY KEY);
CREATE TABLE store_vectors (
    prefix text NOT NULL,
    key text NOT NULL,
    field_name text NOT NULL,
    embedding vector(%(dims)s),
    created_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP,
    updated_at TIMESTAMP WITH TIME ZONE DEFAULT CURRENT_TIMESTAMP,
    PRIMARY KEY (prefix, key, field_name),
    FOREIGN KEY (prefix, key) REFERENCES store(prefix, key) ON DELETE CASCADE
);
CREATE INDEX store_vectors_embedding_idx ON store_vectors USING hnsw (embedding vector_cosine_ops);
INSERT INTO vector_migrations (v) VALUES (0), (1), (2);

CREATE TABLE store_vectors_next (
    prefix text NOT NULL, key text NOT NULL, field_name text NOT NULL,
    embedding vector(%(next_dims)s),
    created_at timestamptz DEFAULT CURRENT_TIMESTAMP,
    updated_at timestamptz DEFAULT CURRENT_TIMESTAMP,
    CONSTRAINT store_vectors_next_pkey PRIMARY KEY (prefix, key, field_name),
    CONSTRAINT store_vectors_next_prefix_key_fkey FOREIGN KEY (prefix, key)
      REFERENCES store (prefix, key) ON DELETE CASCADE
);
