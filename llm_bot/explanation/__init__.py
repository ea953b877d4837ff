"""Why an answer is what it is: per answered event, what reached the model (the behaviour
decision, each prompt section with the ids, ranks and scores of its sources, the tool calls)
and what was left out, by reason; stored with the event's output and shown with the words read
from their own rows (``llm-bot explain``, the operator console).

Two sides, imported apart. The answering path builds the record, ``record.py``, and imports
nothing else of the package. The operator's side reads it: ``reader.py`` (the one reader,
:func:`llm_bot.explanation.reader.explanation_for`) fills ``view.py``'s view, which
``render.py`` renders as text; ``cli`` and ``console`` alone import them
(``tests/unit/test_layers.py``). ``table.py`` holds the ``answer_explanations`` table's
statements.
"""
