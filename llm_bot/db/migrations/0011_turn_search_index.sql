-- Recall's lexical side finds a user's turns by the query's distinguishing words (BM25,
-- llm_bot/memory/recall.py): for a long history those are the words held by at most half of
-- the user's recent turns, so the matching turns are few and this index finds them without
-- reading the rest of the history. (Before BM25 every turn sharing any word was ranked, and the
-- index could not help: docs/performance.md, "Per-user depth".)
CREATE INDEX IF NOT EXISTS conversation_turns_search_idx ON conversation_turns USING gin (search);
