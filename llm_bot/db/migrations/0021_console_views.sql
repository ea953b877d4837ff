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
