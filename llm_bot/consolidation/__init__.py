"""Memory consolidation off the answering path: when a thread's session closes, a job on a topic
of its own derives the speakers' facts and a session summary from its turns, once.

:mod:`.jobs` is the job on the bus and its once-only key, :mod:`.extraction` the model's task
and the checks on what it returns (pure), :mod:`.derive` the job's reads, model call and
writes. Finding closed sessions and taking jobs off the bus are the transport's
(:mod:`llm_bot.transport.consolidation`).
"""
