"""Tools around the llm-bot service: the local stand-ins, the dev stack, benchmarks and the
retrieval evaluation. They ship apart from the service, so its wheel and image carry none."""
