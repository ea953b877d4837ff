"""The tools' ``llm-bot`` subcommands."""
