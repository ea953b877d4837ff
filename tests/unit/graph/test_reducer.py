"""The in-run message reducer: bounds, order, pinned system, newest user message kept."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from llm_bot.graph.reducer import (
    TOOL_RESULT_FLOOR,
    TRUNCATION_MARKER,
    MessageLimits,
    reduce_messages,
)
from llm_bot.llm.messages import ChatMessage, ToolCall

LIMITS = MessageLimits(max_messages=8, max_chars=8000)


def user(text: str) -> ChatMessage:
    return ChatMessage("user", text)


def assistant(text: str) -> ChatMessage:
    return ChatMessage("assistant", text)


def counted(messages: list[ChatMessage]) -> list[ChatMessage]:
    return [m for m in messages if m.role != "system"]


# --- examples --------------------------------------------------------------------------------


def test_appends_when_within_limits() -> None:
    existing = [ChatMessage("system", "rules"), user("hi")]
    assert reduce_messages(existing, [assistant("hello")], LIMITS) == [
        *existing,
        assistant("hello"),
    ]


def test_keeps_the_last_eight_by_count() -> None:
    messages = [user(f"m{i}") if i % 2 == 0 else assistant(f"m{i}") for i in range(12)]
    kept = reduce_messages([], messages, LIMITS)
    assert [m.content for m in kept] == [f"m{i}" for i in range(4, 12)]


def test_drops_the_oldest_by_characters_first() -> None:
    messages = [user("a" * 3000), assistant("b" * 3000), user("c" * 3000)]
    kept = reduce_messages([], messages, LIMITS)
    assert [m.content[0] for m in kept] == ["b", "c"]


def test_system_message_is_pinned_and_not_counted() -> None:
    system = ChatMessage("system", "s" * 20_000)
    messages = [system, *(user(f"u{i}") for i in range(10))]
    kept = reduce_messages([], messages, LIMITS)
    assert kept[0] == system
    assert len(counted(kept)) == 8


def test_an_oversized_newest_user_message_is_truncated_with_a_marker() -> None:
    kept = reduce_messages([assistant("old")], [user("x" * 10_000)], LIMITS)
    assert len(kept) == 1
    assert len(kept[0].content) == 8000
    assert kept[0].content.endswith(TRUNCATION_MARKER)


def test_newest_user_message_survives_a_long_tool_loop() -> None:
    loop = [
        message
        for n in range(12)
        for message in (
            ChatMessage("assistant", "", (ToolCall(f"c{n}", "lookup", "{}"),)),
            ChatMessage("tool", "r", tool_call_id=f"c{n}"),
        )
    ]
    kept = reduce_messages([], [user("question"), *loop], LIMITS)
    assert kept[0] == user("question")
    assert kept[1:] == loop[-2 * 7 :]  # the newest 7 turns, each with its result


def test_a_turn_of_many_tool_calls_is_kept_with_all_its_results() -> None:
    calls = tuple(ToolCall(f"c{n}", "upsertMemory", "{}") for n in range(10))
    turn = [
        ChatMessage("assistant", "", calls),
        *(ChatMessage("tool", f"saved {n}", tool_call_id=f"c{n}") for n in range(10)),
    ]
    kept = reduce_messages([assistant("older"), user("q")], turn, LIMITS)
    assert kept == [assistant("older"), user("q"), *turn]


def test_a_tool_result_whose_call_was_trimmed_is_dropped() -> None:
    kept = reduce_messages([], [ChatMessage("tool", "r", tool_call_id="gone"), user("q")], LIMITS)
    assert kept == [user("q")]


def test_a_tool_turn_over_the_characters_is_shortened_never_dropped() -> None:
    """Dropped, the model would not see what its tool answered and would ask again."""
    call = ToolCall("c1", "lookup", "{}")
    messages = [
        user("q"),
        ChatMessage("assistant", "", (call,)),
        ChatMessage("tool", "r" * 20_000, tool_call_id="c1"),
    ]
    kept = reduce_messages([], messages, LIMITS)
    assert [m.role for m in kept] == ["user", "assistant", "tool"]
    assert sum(len(m.content) for m in kept) <= LIMITS.max_chars
    assert kept[2].content.startswith("r" * 7000)
    assert kept[2].content.endswith("of 20000 characters shown]")


def test_results_of_many_rounds_are_shortened_to_a_floor_oldest_first() -> None:
    rounds = [
        message
        for n in range(3)
        for message in (
            ChatMessage("assistant", "", (ToolCall(f"c{n}", "lookup", "{}"),)),
            ChatMessage("tool", str(n) * 4000, tool_call_id=f"c{n}"),
        )
    ]
    kept = reduce_messages([], [user("q"), *rounds], LIMITS)
    assert [m.tool_call_id for m in kept if m.role == "tool"] == ["c0", "c1", "c2"]
    first, second, third = (m.content for m in kept if m.role == "tool")
    assert len(first) == TOOL_RESULT_FLOOR
    assert len(second) + len(third) <= LIMITS.max_chars
    assert third == "2" * 4000


# --- properties ------------------------------------------------------------------------------

roles = st.sampled_from(["system", "user", "assistant"])
messages_strategy = st.lists(
    st.builds(ChatMessage, role=roles, content=st.text(max_size=300)), max_size=30
)
limits_strategy = st.builds(
    MessageLimits,
    max_messages=st.integers(min_value=1, max_value=10),
    max_chars=st.integers(min_value=20, max_value=1500),
)


@given(existing=messages_strategy, new=messages_strategy, limits=limits_strategy)
def test_reducer_invariants(
    existing: list[ChatMessage], new: list[ChatMessage], limits: MessageLimits
) -> None:
    merged = [*existing, *new]
    kept = reduce_messages(existing, new, limits)

    # bounds (system messages are not counted)
    assert len(counted(kept)) <= limits.max_messages
    assert sum(len(m.content) for m in counted(kept)) <= limits.max_chars
    # system messages pinned, all of them, in order
    assert [m for m in kept if m.role == "system"] == [m for m in merged if m.role == "system"]
    # newest user message kept (possibly truncated to fit)
    users = [m for m in merged if m.role == "user"]
    if users:
        newest = users[-1]
        kept_users = [m for m in kept if m.role == "user"]
        assert kept_users, "the newest user message was dropped"
        survivor = kept_users[-1].content
        assert survivor == newest.content or (
            len(newest.content) > limits.max_chars and len(survivor) <= limits.max_chars
        )
    # order kept: apart from a truncated newest user message, survivors are a subsequence
    truncated = [m for m in kept if m not in merged]
    assert len(truncated) <= 1
    remaining = iter(merged)
    assert all(any(m == other for other in remaining) for m in kept if m in merged)
    # deterministic
    assert reduce_messages(existing, new, limits) == kept
