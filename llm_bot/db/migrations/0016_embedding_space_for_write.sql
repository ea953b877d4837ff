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
