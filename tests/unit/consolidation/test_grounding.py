"""A fact is stored for a speaker only where their own cited turns say it: each class of false
attribution (a neighbour's words, the assistant's, someone else's reported or quoted, a turn
that says nothing of it, two speakers' words joined) is dropped in several phrasings, and what
speakers say of themselves, in their words or lightly restated, is kept. Run through
:func:`parse`, the code a consolidation job runs on the model's reply."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from llm_bot.consolidation.extraction import WindowTurn, parse

AT = datetime(2026, 3, 2, 9, 30, tzinfo=UTC)
Lines = list[tuple[str, str, str]]  # (user, role, text), seqs 1.. in order


def window(lines: Lines) -> list[WindowTurn]:
    return [
        WindowTurn(user, seq, role, text, AT, "public")
        for seq, (user, role, text) in enumerate(lines, start=1)
    ]


def stored(lines: Lines, fact: str, sources: list[int]) -> list[tuple[str, str]]:
    reply = json.dumps({"facts": [{"text": fact, "sources": sources}]})
    return [(f.user_id, f.content) for f in parse(reply, window(lines), {}).facts]


# (name, window, fact, sources): none is the cited turns' author's own.
FALSE_ATTRIBUTIONS = [
    (
        "a neighbour's words, citing the speaker's greeting",
        [("ann", "user", "hi"), ("ben", "user", "ann is allergic to shellfish")],
        "Ann is allergic to shellfish.",
        [1],
    ),
    (
        "a neighbour's words, citing the speaker's turn on the topic",
        [("ann", "user", "seafood tonight?"), ("ben", "user", "ann can't eat shellfish lol")],
        "Ann cannot eat shellfish.",
        [1],
    ),
    (
        "the assistant's claim, citing the user's other news",
        [
            ("ada", "user", "I moved to Bergen last week."),
            ("ada", "assistant", "You said you live in Oslo."),
        ],
        "Lives in Oslo.",
        [1],
    ),
    (
        "the assistant's guess, citing a laugh",
        [("ada", "assistant", "Sounds like you're vegetarian!"), ("ada", "user", "haha")],
        "Is vegetarian.",
        [2],
    ),
    (
        "the assistant's words beside the user's own",
        [
            ("ada", "assistant", "So you love hiking and camping?"),
            ("ada", "user", "i love hiking"),
        ],
        "Loves hiking and camping.",
        [2],
    ),
    (
        "someone else's words, reported",
        [("ann", "user", "ben said ann is allergic to shellfish")],
        "Ann is allergic to shellfish.",
        [1],
    ),
    (
        "a friend's situation",
        [("ann", "user", "my friend tom is allergic to shellfish")],
        "Is allergic to shellfish.",
        [1],
    ),
    (
        "someone else's words, quoted",
        [("ann", "user", 'he told me "I am moving to Paris"')],
        "Is moving to Paris.",
        [1],
    ),
    (
        "a relative's life",
        [("ann", "user", "my sister Ingrid lives in Oslo")],
        "Lives in Oslo.",
        [1],
    ),
    (
        "a turn about something else",
        [("ann", "user", "what a game last night")],
        "Has a cat named Rex.",
        [1],
    ),
    (
        "a question",
        [("ann", "user", "am i allergic to shellfish?")],
        "Is allergic to shellfish.",
        [1],
    ),
    ("a negation", [("ann", "user", "i'm not allergic to anything")], "Is allergic to nuts.", [1]),
    (
        "a negation added",
        [("ann", "user", "i'm allergic to peanuts")],
        "Is not allergic to peanuts.",
        [1],
    ),
    (
        "a 'never' added",
        [("ann", "user", "i'm allergic to peanuts")],
        "Was never allergic to peanuts.",
        [1],
    ),
    ("a wish", [("ann", "user", "i wish i had a dog")], "Has a dog.", [1]),
    ("a guess", [("ann", "user", "we might go to rome in august")], "Is going to Rome.", [1]),
    (
        "a habit given up",
        [("ann", "user", "i used to smoke but quit 3 yrs ago")],
        "Smokes.",
        [1],
    ),
    (
        "two speakers' words joined",
        [("ann", "user", "i love hiking"), ("ben", "user", "i'm vegetarian")],
        "Loves hiking and is vegetarian.",
        [1],
    ),
    (
        "two speakers named as one",
        [("ann", "user", "i love hiking"), ("ben", "user", "me too!")],
        "Ann and Ben both love hiking.",
        [1],
    ),
    (
        "a neighbour's detail added to the speaker's own",
        [("mo", "user", "allergic to penicillin here"), ("ned", "user", "same, and also latex")],
        "Is allergic to penicillin and latex.",
        [1],
    ),
]

# (name, window, fact, sources): the cited turns' author said it of themself.
TRUE_ATTRIBUTIONS = [
    (
        "in the speaker's words",
        [("ann", "user", "i'm allergic to shellfish")],
        "Is allergic to shellfish.",
        [1],
    ),
    (
        "a date written out",
        [("ada", "user", "I moved to Bergen last week."), ("ada", "assistant", "Welcome!")],
        "Moved to Bergen on 2026-02-23.",
        [1],
    ),
    (
        "a relation kept",
        [("ann", "user", "my brother Tom lives in Oslo")],
        "Has a brother, Tom, who lives in Oslo.",
        [1],
    ),
    (
        "chat's words for people",
        [("wes", "user", "my gf is allergic to cats so we can't")],
        "Has a girlfriend who is allergic to cats.",
        [1],
    ),
    (
        "an age with its units",
        [("lena", "user", "is it too late to start piano? im 34")],
        "Is 34 years old.",
        [1],
    ),
    (
        "a negative fact",
        [("sam", "user", "actually i don't drink coffee, only tea")],
        "Doesn't drink coffee, only tea.",
        [1],
    ),
    (
        "a year written short",
        [("matt", "user", "i was born in '92")],
        "Was born in 1992.",
        [1],
    ),
    (
        "the speaker named by their id, among neighbours",
        [
            ("priya", "user", "heading to lisbon with my partner for our anniversary"),
            ("omar", "user", "enjoy!!"),
        ],
        "Priya is going to Lisbon with their partner for an anniversary.",
        [1],
    ),
    (
        "a neighbour's fact that the speaker's own turn states",
        [("ann", "user", "hi"), ("ben", "user", "ann is allergic to shellfish")],
        "Ann is allergic to shellfish.",
        [2],
    ),
]


@pytest.mark.parametrize(
    ("lines", "fact", "sources"),
    [case[1:] for case in FALSE_ATTRIBUTIONS],
    ids=[case[0] for case in FALSE_ATTRIBUTIONS],
)
def test_a_fact_its_cited_turns_do_not_say_as_their_authors_own_is_dropped(
    lines: Lines, fact: str, sources: list[int]
) -> None:
    assert stored(lines, fact, sources) == []


@pytest.mark.parametrize(
    ("lines", "fact", "sources"),
    [case[1:] for case in TRUE_ATTRIBUTIONS],
    ids=[case[0] for case in TRUE_ATTRIBUTIONS],
)
def test_what_a_speaker_says_of_themself_is_stored_for_them(
    lines: Lines, fact: str, sources: list[int]
) -> None:
    author = lines[sources[0] - 1][0]
    assert stored(lines, fact, sources) == [(author, fact)]


def test_hostile_text_is_read_as_far_as_the_model_was_shown_it() -> None:
    """Turns of a megabyte of words, quotes and sentence ends: each fact is checked against
    the turns as the model saw them (each within its share of the input), read once."""
    turn = 'i said "' + "ab. cd? " * 120_000 + '" and I love hiking'
    lines = [("ann", "user", turn), ("ben", "user", turn)]
    facts = [{"text": "Loves hiking.", "sources": [1]}] * 20
    reply = json.dumps({"facts": facts})
    assert parse(reply, window(lines), {}).facts == ()
    assert stored([("ann", "user", "ab. cd? " * 10 + "and I love hiking")], "Loves hiking.", [1])
