"""Why an answer is what it is: per answered event, what reached the model (the behaviour
decision, each prompt section with the ids, ranks and scores of its sources, the tool calls)
and what was left out, by reason; stored with the event's output and shown with the words read
from their own rows (``llm-bot explain``, the operator console).

``record.py`` is what is stored, ``store.py`` the table and the one reader,
:func:`llm_bot.explanation.store.explanation_for`.
"""
