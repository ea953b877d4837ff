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
