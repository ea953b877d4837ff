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
