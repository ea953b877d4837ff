"""The LangGraph graph: ingest_prompt, retrieve_memories, call_model and tools, build_candidate."""
