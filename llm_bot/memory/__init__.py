"""Memory layers, all in Postgres: history, semantic store, notes, recall, context assembly."""

from llm_bot.memory.commit import MemoryCommit, Pair
from llm_bot.memory.context import ContextLimits, PostgresMemoryRetriever
from llm_bot.memory.notes_store import ManageNotesTool
from llm_bot.memory.personalities import Personalities, Personality, PersonalityLookup
from llm_bot.memory.retrieval import MemoryContext, MemoryRetriever, NoMemory
from llm_bot.memory.run_writes import RunWrites
from llm_bot.memory.store import MemoryStore, StoreOptions
from llm_bot.memory.tools import DeleteMemoryTool, Tool, UpsertMemoryTool
from llm_bot.memory.wiring import MemoryServices, memory_services, open_memory_store

__all__ = [
    "ContextLimits",
    "DeleteMemoryTool",
    "ManageNotesTool",
    "MemoryCommit",
    "MemoryContext",
    "MemoryRetriever",
    "MemoryServices",
    "MemoryStore",
    "NoMemory",
    "Pair",
    "Personalities",
    "Personality",
    "PersonalityLookup",
    "PostgresMemoryRetriever",
    "RunWrites",
    "StoreOptions",
    "Tool",
    "UpsertMemoryTool",
    "memory_services",
    "open_memory_store",
]
