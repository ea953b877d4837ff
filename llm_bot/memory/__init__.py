"""Memory layers, all in Postgres: history, semantic store, notes, recall, context assembly.

The modules are the public API; none is imported here, so that importing one module (or the
command line) loads only what that module needs."""
