"""Answering's statements: the pair's append and the thread's window
(:mod:`llm_bot.memory.history` runs them)."""

from __future__ import annotations

# One statement for the caller: migration 0019's ``append_pair`` (it says why a function). It
# appends the pair under the thread's tenant (:func:`thread_row`)
# unless the event's pair is there already (a batch rerun after a commit whose
# acknowledgement was lost). A concurrent write of the same event cannot get this far: its
# transaction stored the event's output first, under the claim's token
# (:mod:`llm_bot.db.processed_events`), and (user_id, source_event, role) is unique besides.
APPEND_PAIR = """
SELECT append_pair(%(tenant)s, %(thread_id)s, %(user_id)s, %(at)s, %(idle)s, %(source_event)s,
                   %(user_text)s, %(assistant_text)s, %(user_vector)s::vector,
                   %(assistant_vector)s::vector, %(visibility)s, %(indexed)s, %(window_turns)s)
"""

# The newest turns of the thread's current session (newest first), unless it idled, from the
# tenant's shard: a DM's from its user's turns, a shared channel's from its copy of its newest
# turns (channel_turns). A query a caller may also compose with others into one statement
# (context assembly does): :func:`llm_bot.memory.history.window_sql` picks the thread's.
_WINDOW_SQL = """
SELECT t.thread_id, t.seq, t.user_id, t.session_id, t.role, t.content, t.created_at
  FROM conversation_threads th JOIN {table} t
    ON {same_rows} AND t.session_id = th.session_id
 WHERE th.tenant = %(tenant)s AND th.thread_id = %(thread_id)s AND th.last_turn_at >= %(since)s
 ORDER BY t.seq DESC LIMIT %(turns)s
"""
DM_WINDOW_SQL = _WINDOW_SQL.format(
    table="conversation_turns",
    same_rows="t.user_id = th.tenant AND t.thread_id = th.thread_id",
)
CHANNEL_WINDOW_SQL = _WINDOW_SQL.format(table="channel_turns", same_rows="t.thread_id = th.tenant")
