"""A run's memory writes: a put and a delete of one key cancel each other, the later call wins."""

from __future__ import annotations

from llm_bot.memory.run_writes import MemoryPut, RunWrites


def test_a_delete_after_puts_of_the_key_leaves_only_the_delete() -> None:
    writes = RunWrites("mira")
    writes.put_memory(MemoryPut("k", "User drinks tea", {}))
    writes.put_memory(MemoryPut("other", "User lives in Oslo", {}))
    writes.put_memory(MemoryPut("k", "User drinks coffee", {}))
    writes.delete_memory("k")
    writes.delete_memory("k")
    assert [put.key for put in writes.memory_puts] == ["other"]
    assert writes.memory_deletes == ["k"]
    assert not writes.puts_key("k")
    assert not writes.empty


def test_a_put_after_a_delete_of_the_key_leaves_only_the_put() -> None:
    writes = RunWrites("mira")
    writes.delete_memory("k")
    writes.put_memory(MemoryPut("k", "User lives in Bergen", {}))
    assert writes.memory_deletes == []
    assert writes.puts_key("k")


def test_a_run_that_only_deletes_has_writes() -> None:
    writes = RunWrites("mira")
    assert writes.empty
    writes.delete_memory("k")
    assert not writes.empty
