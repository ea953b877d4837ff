"""Memory consolidation off the answering path: when a thread's session closes, a job on a topic
of its own derives the speakers' facts and a session summary from its turns, once.

:mod:`.sweep` finds closed sessions and publishes their jobs, :mod:`.jobs` is the job on the
bus and its once-only key, :mod:`.unit` one job's steps top to bottom, :mod:`.extraction` the
model's task and the checks on what it returns and :mod:`.grounding` whether a fact's cited
turns say it (both pure), :mod:`.derive` the job's reads, model call and writes. Taking a job
off the bus, its claim and settlement are the transport's
(:mod:`llm_bot.transport.consolidation`).
"""
