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
