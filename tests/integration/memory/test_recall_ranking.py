"""Recall's ranking on the real database, with vectors chosen by the test: BM25 weighs a word by
how few of the user's turns hold it, a turn comes with its neighbours (never another user's,
never a private one in public), a month named in the question prefers turns of then, and each
recalled turn says how each side ranked it; a statement that consolidation's versions record as
corrected and its correction trade places."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import pytest

from llm_bot.db.hybrid import SearchMode
from llm_bot.db.vectors import vector_param
from llm_bot.memory.derived import derived_metadata
from llm_bot.memory.recall import RecalledTurn, recall_turns
from llm_bot.memory.run_writes import Visibility
from llm_bot.memory.store import put_memory
from llm_bot.memory.turns.consolidation import Summary, insert_summary

from .conftest import Connection

pytestmark = pytest.mark.integration
START = datetime(2026, 5, 1, 12, tzinfo=UTC)
FAR = [0.0, 0.0, 1.0]  # a vector orthogonal to every query of these tests


async def add(
    connection: Connection,
    thread: str,
    turns: Sequence[tuple[str, str]],
    *,
    at: datetime = START,
    visibility: str = "public",
    vector: list[float] = FAR,
    first_seq: int = 1,
    session: int = 1,
) -> None:
    """(user, text) turns at consecutive seqs of ``thread``, a minute apart, in ``session``."""
    for offset, (user, text) in enumerate(turns):
        seq = first_seq + offset
        await connection.execute(
            "INSERT INTO conversation_turns (thread_id, seq, user_id, session_id, pair_index,"
            " role, content, created_at, source_event, embedding, visibility)"
            " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s::vector, %s)",
            (
                thread,
                seq,
                user,
                session,
                (seq + 1) // 2,  # as the history's writer numbers them: a user's turn and its reply
                "user" if seq % 2 else "assistant",
                text,
                at + timedelta(minutes=seq),
                f"{thread}-{seq}",
                vector_param(vector),
                visibility,
            ),
        )


async def recalled(
    connection: Connection,
    user: str,
    text: str,
    *,
    mode: SearchMode = "lexical",
    limit: int = 10,
    include_private: bool = True,
) -> list[str]:
    turns = await recall_turns(
        connection,
        user,
        text,
        [1.0, 0.0, 0.0],
        exclude=(),
        limit=limit,
        threshold=-1.0,
        mode=mode,
        include_private=include_private,
    )
    return [turn.content for turn in turns]


async def test_a_rare_word_outranks_a_word_every_turn_has_however_often_it_repeats(
    connection: Connection,
) -> None:
    names = [("ana", f"Caroline: chat number {n} about nothing") for n in range(8)]
    await add(connection, "long", names)
    await add(connection, "other", [("ana", "Caroline: Caroline, Caroline, listen")])
    await add(connection, "trip", [("ana", "Caroline: the Zanzibar ferry was late")])
    top = await recalled(connection, "ana", "Did Caroline ever mention Zanzibar?", limit=1)
    assert top == ["Caroline: the Zanzibar ferry was late"]


async def test_the_answer_next_to_the_matching_question_is_recalled(
    connection: Connection,
) -> None:
    await add(
        connection,
        "vet",
        [("ana", "what did the vet say about Miso?"), ("ana", "she needs a lighter diet")],
    )
    await add(connection, "noise", [("ana", f"unrelated turn {n}") for n in range(6)])
    found = await recalled(connection, "ana", "What did the vet say about Miso?", limit=2)
    assert found == ["what did the vet say about Miso?", "she needs a lighter diet"]


async def test_neighbours_are_only_the_users_own_and_only_public_ones_in_public(
    connection: Connection,
) -> None:
    await add(connection, "room", [("ana", "the Zanzibar ferry"), ("bo", "bo's own secret")])
    await add(connection, "room", [("ana", "ana's private aside")], visibility="dm", first_seq=3)
    modes: tuple[SearchMode, ...] = ("lexical", "hybrid", "dense")
    for mode in modes:
        public = await recalled(connection, "ana", "Zanzibar?", mode=mode, include_private=False)
        assert public == ["the Zanzibar ferry"]
        everything = await recalled(connection, "ana", "Zanzibar?", mode=mode)
        assert sorted(everything) == ["ana's private aside", "the Zanzibar ferry"]
    assert await recalled(connection, "bo", "Zanzibar?") == []  # no score crosses users
    assert await recalled(connection, "bo", "Zanzibar?", mode="hybrid") == ["bo's own secret"]


async def test_a_month_named_in_the_question_prefers_turns_written_then(
    connection: Connection,
) -> None:
    await add(
        connection, "june", [("ana", "we went camping by the lake")], at=START.replace(month=6)
    )
    await add(
        connection, "aug", [("ana", "we went camping by the lake")], at=START.replace(month=8)
    )
    await add(connection, "noise", [("ana", f"unrelated turn {n}") for n in range(6)])
    for month in (6, 8):
        name = START.replace(month=month).strftime("%B")
        found = await recall_turns(
            connection,
            "ana",
            f"Where did we go camping in {name}?",
            [1.0, 0.0, 0.0],
            exclude=(),
            limit=1,
            threshold=-1.0,
        )
        assert [turn.created_at.month for turn in found] == [month]


async def test_a_relative_date_prefers_turns_of_then_counted_from_when_it_was_asked(
    connection: Connection,
) -> None:
    """The same words told twice, a week apart: "last week" and "yesterday" each find the one
    of their day, as counted from the question's own time, and nothing is preferred without it."""
    asked = datetime(2026, 10, 15, 9, tzinfo=UTC)  # a Thursday
    for days in (1, 8):
        at = asked - timedelta(days=days)
        await add(connection, f"d{days}", [("ana", "my locker code is the old one")], at=at)
    await add(connection, "noise", [("ana", f"unrelated turn {n}") for n in range(6)])

    async def days_back(question: str, asked_at: datetime | None) -> list[tuple[int, float]]:
        """How many days before ``asked`` each of the two best turns was told, and its score."""
        found = await recall_turns(
            connection,
            "ana",
            question,
            [1.0, 0.0, 0.0],
            exclude=(),
            limit=2,
            threshold=-1.0,
            asked_at=asked_at,
        )
        return [((asked - turn.created_at).days, turn.fused_score) for turn in found]

    assert (await days_back("what locker code did I give you last week?", asked))[0][0] == 7
    assert (await days_back("what locker code did I give you yesterday?", asked))[0][0] == 0
    (_, one), (_, other) = await days_back("what locker code did I give you yesterday?", None)
    assert one == other  # without the time of asking, no day is preferred


async def test_each_turn_says_its_session_and_how_each_side_ranked_it(
    connection: Connection,
) -> None:
    await add(connection, "near", [("ana", "a sunny afternoon")], vector=[1.0, 0.0, 0.0])
    await add(connection, "words", [("ana", "the Zanzibar ferry")], session=7)

    async def recall_in(mode: SearchMode) -> list[RecalledTurn]:
        return await recall_turns(
            connection,
            "ana",
            "Zanzibar?",
            [1.0, 0.0, 0.0],
            exclude=(),
            limit=2,
            threshold=-1.0,
            mode=mode,
        )

    by_text = {turn.content: turn for turn in await recall_in("hybrid")}
    near, words = by_text["a sunny afternoon"], by_text["the Zanzibar ferry"]
    assert (near.session_id, near.dense_rank, near.lexical_rank) == (1, 1, None)
    assert near.lexical_score == 0
    assert (words.session_id, words.dense_rank, words.lexical_rank) == (7, 2, 1)
    assert words.lexical_score > 0
    assert words.similarity < near.similarity
    lexical = await recall_in("lexical")
    assert [(turn.dense_rank, turn.lexical_rank) for turn in lexical] == [(None, 1)]


async def test_a_recalled_summary_brings_the_turns_it_covers_nearest_the_question(
    connection: Connection,
) -> None:
    session = [("ana", f"we talked about thing {n}") for n in range(6)]
    await add(connection, "dm:ana", session)
    await connection.execute(  # the turn nearest the question within the session
        "UPDATE conversation_turns SET embedding = %s::vector WHERE thread_id = 'dm:ana'"
        " AND seq = 5",
        (vector_param([1.0, 0.0, 0.0]),),
    )
    await add(connection, "dm:ana", [("ana", "a later session, other words")], first_seq=7)
    summary = Summary(
        "dm:ana",
        0,
        6,
        "ana",
        "Ana planned her Hemsedal ski trip",
        START + timedelta(minutes=6),
        "consolidate:dm:ana:0-6",
        FAR,
        "public",
    )
    await insert_summary(connection, summary)
    found = await recalled(connection, "ana", "What about the Hemsedal ski trip?")
    assert found[0] == "Ana planned her Hemsedal ski trip"
    assert sorted(found[1:]) == [f"we talked about thing {n}" for n in (0, 1, 4)]


async def put_fact(
    connection: Connection,
    key: str,
    text: str,
    thread: str,
    seqs: Sequence[int],
    at: datetime,
    visibility: Visibility = "public",
) -> None:
    """A fact of ana's as consolidation writes it: under ``key`` (a correction names the memory
    it replaces), citing ``seqs`` of ``thread``, at its sources' time."""
    metadata = derived_metadata(thread, f"0-{max(seqs)}", seqs, at)
    await put_memory(connection, "ana", key, text, metadata, visibility, None, at)


async def phone_history(
    connection: Connection, correction_visibility: Visibility = "public"
) -> None:
    """Ana's number told in May, noise, then a new number told in September in other words
    (orthogonal to the question, no word of it): the question matches the old statement."""
    near = [1.0, 0.0, 0.0]
    await add(connection, "may", [("ana", "my phone number is 0471 22 90 13"), ("ana", "saved")])
    await connection.execute(
        "UPDATE conversation_turns SET embedding = %s::vector WHERE thread_id = 'may' AND seq = 1",
        (vector_param(near),),
    )
    await add(connection, "noise", [("ana", f"unrelated turn {n}") for n in range(6)])
    later = START.replace(month=9)
    await add(
        connection,
        "sept",
        [("ana", "I changed it again, it is 0472 31 18 44 from today"), ("ana", "got it")],
        at=later,
        visibility=correction_visibility,
    )


async def test_a_correction_consolidation_recorded_outranks_the_statement_it_replaces(
    connection: Connection,
) -> None:
    """Consolidation's versions of one memory cite the May turn, then the September one: the
    September turn takes the May turn's place on each side, and the May turn ranks no higher
    than the September turn would have by itself (here: by its neighbours alone) and says which
    turn replaced it."""
    await phone_history(connection)
    question = "What is my phone number?"
    modes: tuple[SearchMode, ...] = ("hybrid", "lexical", "dense")
    for mode in modes:
        assert (await recalled(connection, "ana", question, mode=mode))[0].startswith("my phone")
    may, september = START + timedelta(minutes=1), START.replace(month=9) + timedelta(minutes=1)
    await put_fact(connection, "phone", "Ana's phone number is 0471 22 90 13", "may", [1], may)
    await put_fact(
        connection, "phone", "Ana's phone number is 0472 31 18 44", "sept", [1], september
    )

    for mode in modes:
        turns = await recall_turns(
            connection,
            "ana",
            question,
            [1.0, 0.0, 0.0],
            exclude=(),
            limit=10,
            threshold=-1.0,
            mode=mode,
        )
        order = [(turn.thread_id, turn.seq) for turn in turns]
        assert order[:2] == [("sept", 1), ("sept", 2)], mode  # the correction, and its reply
        assert [turn.replaces for turn in turns[:2]] == [(("may", 1),), (("may", 2),)], mode
        if mode != "lexical":  # where it scores no word of its own or of a neighbour's: gone
            old = next(turn for turn in turns if (turn.thread_id, turn.seq) == ("may", 1))
            assert old.replaced_by == (("sept", 1),)
            assert turns[0].similarity < old.similarity  # its own scores, as they are


async def test_the_reply_to_a_corrected_statement_gives_way_to_the_reply_to_the_correction(
    connection: Connection,
) -> None:
    """The May pair's reply repeats the old number (close to the question, its words too);
    the September reply says only "got it". Once consolidation recorded the correction, the
    September reply takes the May reply's place, as the statements do, on each side."""
    near = [1.0, 0.0, 0.0]
    may_reply = "noted, your phone number is 0471 22 90 13"
    await add(connection, "may", [("ana", "my phone number is 0471 22 90 13"), ("ana", may_reply)])
    await connection.execute(
        "UPDATE conversation_turns SET embedding = %s::vector WHERE thread_id = 'may'",
        (vector_param(near),),
    )
    await add(connection, "noise", [("ana", f"unrelated turn {n}") for n in range(6)])
    later = START.replace(month=9)
    correction = [("ana", "I changed it again, it is 0472 31 18 44 from today"), ("ana", "got it")]
    await add(connection, "sept", correction, at=later)
    question = "What is my phone number?"
    assert (await recalled(connection, "ana", question, mode="hybrid"))[1] == may_reply
    may, september = START + timedelta(minutes=1), later + timedelta(minutes=1)
    await put_fact(connection, "phone", "Ana's phone number is 0471 22 90 13", "may", [1], may)
    await put_fact(
        connection, "phone", "Ana's phone number is 0472 31 18 44", "sept", [1], september
    )

    for mode in ("hybrid", "lexical", "dense"):
        turns = await recall_turns(
            connection, "ana", question, near, exclude=(), limit=10, threshold=-1.0, mode=mode
        )
        order = [(turn.thread_id, turn.seq) for turn in turns]
        assert order[:2] == [("sept", 1), ("sept", 2)], mode
        if mode != "lexical":  # there, capped at the September turns' own scores: none
            reply = next(turn for turn in turns if (turn.thread_id, turn.seq) == ("may", 2))
            assert reply.replaced_by == (("sept", 2),), mode


async def test_an_outdated_turn_keeps_its_place_unless_a_later_visible_turn_replaces_it(
    connection: Connection,
) -> None:
    """No correction demotes a turn from where the caller cannot see it, a turn a current fact
    still cites is not outdated, and a version written after a newer one (an older window
    consolidated late) replaces nothing."""
    await phone_history(connection, correction_visibility="dm")
    question = "What is my phone number?"
    may, september = START + timedelta(minutes=1), START.replace(month=9) + timedelta(minutes=1)
    await put_fact(connection, "phone", "Ana's phone number is 0471 22 90 13", "may", [1], may)
    new = "Ana's phone number is 0472 31 18 44"
    await put_fact(connection, "phone", new, "sept", [1], september, "dm")

    public = await recalled(connection, "ana", question, mode="hybrid", include_private=False)
    assert public[0] == "my phone number is 0471 22 90 13"  # the correction is a DM's
    assert (await recalled(connection, "ana", question, mode="hybrid"))[0].startswith("I changed")

    await put_fact(connection, "phone-kept", "Ana's phone number is 0471 22 90 13", "may", [1], may)
    assert (await recalled(connection, "ana", question, mode="hybrid"))[0].startswith("my phone")

    await connection.execute("DELETE FROM memories")
    await connection.execute("DELETE FROM memory_versions")
    await put_fact(
        connection, "phone", "Ana's phone number is 0472 31 18 44", "sept", [1], september
    )
    await put_fact(connection, "phone", "Ana's phone number is 0471 22 90 13", "may", [1], may)
    assert (await recalled(connection, "ana", question, mode="hybrid"))[0].startswith("my phone")
