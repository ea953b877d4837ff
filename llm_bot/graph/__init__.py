"""The LangGraph graph: ingest_prompt, retrieve_memories, call_model and tools,
build_candidate.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
