"""The LangGraph graph: one event in, one outcome out.

- ``nodes/``: the nodes, ingest_prompt, retrieve_memories, call_model, tools (``run_tools``)
  and build_candidate;
- ``prompt/``: what the model is sent, section by section (its ``__init__`` lists them);
- ``behavior/``: BitBrat's behaviour profile, its gate, texts and annotations;
- ``state.py`` (the state and the run context), ``reducer.py`` (the bounded message reducer),
  ``offering.py`` (the tools one event offers), ``tool_round.py`` (the runner of one round of
  tool calls), ``builder.py`` (the shape) and ``assembly.py`` (compiled from settings).

Inside ``graph/`` imports point one way, down this list: ``assembly``, ``builder``,
``nodes/``, ``state``, ``tool_round``, ``offering``, then ``behavior/``, ``prompt/`` and
``reducer``, which import nothing else of ``graph/``.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
