"""The LangGraph graph: ingest_prompt, retrieve_memory_context, call_model and tools,
build_candidate.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""

__all__ = [
    "annotations",
    "assembly",
    "behavior",
    "behavior_annotations",
    "behavior_texts",
    "build_candidate",
    "builder",
    "call_model",
    "composition",
    "ingest_prompt",
    "process",
    "prompt_sections",
    "reducer",
    "retrieve_memory_context",
    "run_tools",
    "state",
    "story",
    "system_prompt",
    "tools",
]
