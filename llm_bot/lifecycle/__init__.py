"""What happens to stored data over months: retention (``llm-bot maintain``), erasure and export
of one user's data, and moving every stored vector to a new embedding model (``llm-bot
reembed``). Operator jobs, never on an event's path; modules are listed, not imported, so the
CLI stays light."""

__all__ = ["erasure", "export", "reembed", "retention"]
