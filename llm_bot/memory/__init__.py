"""Memory layers, all in Postgres: history, semantic store, notes, recall, context assembly."""
