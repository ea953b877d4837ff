"""The graph's nodes, one module each, in the order an event meets them: ``ingest_prompt``
(the behaviour profile and its gate, the user message), ``retrieve_memories`` (the memory
context), ``call_model`` (one model turn), ``run_tools`` (one tool round, the node ``tools``)
and ``build_candidate`` (the ``CandidateV1``). ``builder.py`` joins them.

The modules are the public API; none is imported here."""
