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
