"""Local stand-ins for external services (model server, emulator and Postgres launchers)."""
