"""The operator's and the evaluation's reads of the turns: an explanation's turns by id, the
console's newest turns and user search, and every stored turn for ``llm-bot eval``."""

from __future__ import annotations

# An explanation's turns by id (:mod:`llm_bot.explanation.reader`), whoever spoke them: a shared
# channel's window cites other speakers' turns. An operator's read, so every shard is asked.
TURNS_BY_ID = """
SELECT t.thread_id, t.seq, t.pair_index, t.content FROM conversation_turns t
  JOIN unnest(%(threads)s::text[], %(seqs)s::bigint[]) AS id(thread_id, seq)
    ON t.thread_id = id.thread_id AND t.seq = id.seq
"""

# The operator console (:mod:`llm_bot.console`): a user's newest turns, from every thread, and
# the users whose id starts with a prefix (the ids in [start, end), read in the order of the
# ``(user_id, created_at)`` index, so a search reads the matching users' turns and stops).
RECENT_TURNS_OF_USER = (
    "SELECT thread_id, seq, role, content, visibility, created_at FROM conversation_turns"
    " WHERE user_id = %(user)s"
    " ORDER BY created_at DESC, seq DESC LIMIT %(limit)s"
)
USERS_BETWEEN = (
    "SELECT user_id FROM conversation_turns WHERE user_id >= %(start)s AND user_id < %(end)s"
    " GROUP BY user_id ORDER BY user_id LIMIT %(limit)s"
)

# Every turn of every user but session summaries (``llm-bot eval``'s scratch schema: the corpus
# read back as it was stored, to map each stored turn to its corpus id).
STORED_TURNS = (
    "SELECT thread_id, seq, user_id, role, content, created_at, visibility, source_event"
    " FROM conversation_turns WHERE role <> 'summary'"
)
