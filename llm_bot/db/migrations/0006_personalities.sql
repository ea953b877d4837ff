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
