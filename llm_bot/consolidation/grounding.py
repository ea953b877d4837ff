"""Whether the turns a fact cites say it, as their speaker's own words.

A model's citation is not trusted: a steered or careless model cites one speaker's "hi" for what
a neighbour said about them, turns the assistant's guess into the user's fact, takes a quoted
friend's words for the speaker's own, or joins two speakers' words in one fact. A fact is kept
for the author of its cited turns only when all of these hold:

- **Its specifics are theirs**: every name (a capitalised word after the first) and every number
  of the fact is in the cited turns. Exempt: the speaker's own id, which the model is shown
  them by, and the parts of a date, since a fact writes out the date a turn said as "yesterday".
- **Its content is theirs**: at least :data:`MIN_COVERAGE` of the fact's content words (those
  left once function words are out, compared by their Snowball stems, as Postgres' English
  full-text search compares them) are stated in the cited turns (a question's words are not);
  none of the rest is a word only the assistant used, and a word a neighbour also used is in
  the sentence that says the fact: what only someone else said is their words.
- **It is said, by them, of them**: the sentence of the cited turns that holds most of the
  fact's words is not governed, before the fact's words, by "if", "wish", "maybe", "thinking
  about" or "used to" (unless the fact keeps that), by a report whose reporter is not the
  speaker ("ben said", "according to", "my mom thinks"), or by a negation the fact drops; it
  holds a negation wherever the fact adds one ("is not allergic" from "I'm allergic"); it
  does not say in the past what the fact says of the present ("played", "plays"), is not
  mostly inside quotation marks, and its subject, read back from the first word it shares
  with the fact, is the speaker ("I", "my", "we", the speaker's id) or none ("moved to
  Bergen!"); a name, a pronoun, another speaker's id, someone of the speaker's life ("my
  friend") or a word an auxiliary follows ("tom is") makes it someone else's, unless the fact
  names them too ("has a brother, Tom, who lives in Oslo").

The rule is lexical: the model is told to write a fact in the speaker's own words, and a fact
that paraphrases them far (or reads them in another language than the fact's) is dropped, not
stored: a lost fact costs a user one memory; a planted one puts words in their mouth. Measured
on a labelled set of true and false attributions (``llm-bot eval attribution``,
docs/eval-attribution.md).

Everything here is linear in the texts' length (one pass of a regex without nested
quantifiers per text, stems from the C Snowball stemmer, set lookups; each turn read once per
window, :class:`Evidence`), since the texts are hostile.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import Stemmer

from llm_bot.memory.dates import COUNTS, MONTHS, WEEKDAYS

MIN_COVERAGE = 0.5

# Why a fact is not its cited turns' author's own (:meth:`Evidence.unsaid`).
UNSAID_SPECIFICS = "a name or number the cited turns do not say"
UNSAID_CONTENT = "too few of its words in the cited turns"
UNSAID_OTHERS_WORDS = "words only another speaker or the assistant said"
UNSAID_UNSURE = "a question, a wish or a guess stated as a fact"
UNSAID_PAST = "said of the past, stated of the present"
UNSAID_REPORTED = "someone else's words, quoted or reported"
UNSAID_NEGATED = "negated in the cited turns"
UNSAID_NEGATION = "a negation the cited turns do not say"
UNSAID_SUBJECT = "about someone else"

# A word (letters and digits of any script), a quotation mark, or a sentence's end.
_TOKEN = re.compile(r"\d+|[^\W\d_]+|[\"\u201c\u201d\u00ab\u00bb,.!?;\n]")
_QUOTES = frozenset('"\u201c\u201d\u00ab\u00bb')
_OPENING = frozenset("\u201c\u00ab")
_ENDS = frozenset(".!?;\n")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Function words: Postgres' English stop words and the forms contractions split into, and
# the words a model writes of whoever a fact is about.
_FUNCTION = _words(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing don down during each few for
    from further had has have having he her here hers herself him himself his how i if in into
    is it its itself just me more most my myself no nor not now of off on once only or other
    our ours ourselves out over own same she should so some such than that the their theirs
    them themselves then there these they this those through to too under until up very was we
    were what when where which while who whom why will with would you your yours yourself
    yourselves s t m re ve ll d o y user speaker person someone"""
)
_FIRST_PERSON = _words("i im ive me my mine myself we us our ours ourselves")
_THIRD_PERSON = _words("he him his she her hers they them their theirs")
# Who else a sentence may be about: the people of someone's life, as chat names them.
_RELATIONS = _words(
    """friend friends buddy bff mate sister sis brother bro mom mum mother ma dad father pa
    parents wife husband hubby partner gf bf girlfriend boyfriend fiance fiancee son daughter
    kid kids child children baby boss coworker colleague roommate flatmate neighbour neighbor
    cousin aunt uncle grandma grandpa grandmother grandfather nan teacher doctor everyone
    somebody people guy girl man woman family child children"""
)
# Words that make what follows them a subject ("tom is", "the kids are", "she's").
_COPULAS = _words("is are was were has have had s will can does did do isn wasn doesn didn")
_NEGATIONS = _words(
    """not no never nothing nobody t cant dont doesnt didnt isnt wasnt wont aint cannot
    neither nor arent werent hasnt havent hadnt wouldnt couldnt shouldnt"""
)
# What a sentence only wishes, supposes or guesses ("if", "maybe", "might"), and the words by
# which a fact keeps that it is no more ("plans to", "may", "hopes").
# Plans and thoughts of doing it ("thinking about switching") say it is not so yet, and
# "used (to)" that it is no longer.
_UNSURE = _words(
    """if unless wish whether suppose imagine might maybe perhaps possibly probably used
    thinking considering planning want wanna hoping"""
)
_KEPT_UNSURE = _UNSURE | _words(
    "may plan plans consider considers hope hopes wants former formerly think thinks"
)
# Verbs that report someone's words or beliefs.
_REPORTING = _words(
    """said says say saying told tells tell telling thinks think thought claims claimed
    claim reckons reckon believes believe insists insisted swears swore mentioned mentions
    heard hears wrote writes posted"""
)
# Adverbs read past, back from a reporting verb to who reports.
_ADVERBS = _words(
    """really honestly actually just also always still never kinda literally totally seriously
    basically definitely already even once usually often sometimes finally recently now then
    today yesterday tonight tomorrow lately sadly luckily"""
)
# How chat names people of one's life, as the word a fact writes ("my mom" is "mother").
_SAME_PERSON = {
    **dict.fromkeys(("mom", "mum", "mommy", "mummy", "ma"), "mother"),
    **dict.fromkeys(("dad", "daddy", "pa"), "father"),
    **dict.fromkeys(("gf",), "girlfriend"),
    **dict.fromkeys(("bf",), "boyfriend"),
    **dict.fromkeys(("hubby",), "husband"),
    **dict.fromkeys(("sis",), "sister"),
    **dict.fromkeys(("bro",), "brother"),
    **dict.fromkeys(("kid", "kiddo"), "child"),
    **dict.fromkeys(("grandpa", "granddad", "grandad"), "grandfather"),
    **dict.fromkeys(("grandma", "granny", "nana", "nan"), "grandmother"),
    **dict.fromkeys(("kids",), "children"),
}
_UNITS = _words(
    """year years yr yrs old month months week weeks day days hour hours h minute minutes min
    kg km mile miles percent"""
)
_DATE_WORDS = frozenset(MONTHS) | frozenset(WEEKDAYS)
# Words an auxiliary follows that are no subject ("i already have", "i dont have").
_NOT_SUBJECTS = _FUNCTION | _ADVERBS | _NEGATIONS | _UNSURE
_COUNT_VALUES = {word: str(value) for value, word in enumerate(COUNTS, start=1)}


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def _stem(word: str) -> str:
    return str(_stemmer().stemWord(word))


class Turn(Protocol):
    """A turn of the window as grounding reads it: who wrote it and its words."""

    @property
    def user_id(self) -> str: ...
    @property
    def role(self) -> str: ...
    @property
    def content(self) -> str: ...


@dataclass
class _Word:
    text: str  # as written
    lower: str  # a count in words as its digits: "six" is "6"
    stem: str
    initial: bool  # the first of its sentence
    quoted: bool = False  # inside quotation marks
    asked: bool = False  # in the part of a sentence a question mark ends


def _sentences(text: str) -> list[list[_Word]]:
    """``text``'s sentences as words, each marked whether it is quoted or asked."""
    sentences: list[list[_Word]] = [[]]
    inside = False
    part = 0  # where the sentence's part after its last comma starts
    for match in _TOKEN.finditer(text.replace("\u2019", "'")):
        piece = match.group()
        if piece in _QUOTES:
            inside = piece in _OPENING or (piece == '"' and not inside)
        elif piece == ",":
            part = len(sentences[-1])
        elif piece in _ENDS:
            if piece == "?":
                for word in sentences[-1][part:]:
                    word.asked = True
            if sentences[-1]:
                sentences.append([])
            inside, part = False, 0
        else:
            lower = piece.lower()
            lower = _COUNT_VALUES.get(lower) or _SAME_PERSON.get(lower) or lower
            initial = not sentences[-1]
            sentences[-1].append(_Word(piece, lower, _stem(lower), initial, quoted=inside))
    return [sentence for sentence in sentences if sentence]


def _names_of(user_id: str) -> frozenset[str]:
    """The words of a speaker's id ("twitch:ann" names "twitch" and "ann")."""
    return frozenset(_stem(part.lower()) for part in _TOKEN.findall(user_id) if part.isalnum())


class Evidence:
    """A window's turns read once (each turn's sentences and words), so that checking every
    fact of a reply costs the facts' length, not the window's length again per fact."""

    def __init__(self, window: Sequence[Turn]) -> None:
        self._window = window
        self._said = [_sentences(turn.content) for turn in window]
        words = [[word for sentence in said for word in sentence] for said in self._said]
        # Per turn: the stems and words a fact's names and numbers may be (asked or not), and
        # the stems it states (what a question asks is not said).
        self._known = [_said_stems(ws) | {word.lower for word in ws} for ws in words]
        self._stated = [_said_stems([word for word in ws if not word.asked]) for ws in words]
        self._elsewhere: dict[str, tuple[set[str], set[str]]] = {}
        self._names = {turn.user_id: _names_of(turn.user_id) for turn in window}

    def unsaid(self, text: str, cited: Sequence[int]) -> str | None:
        """Why ``text``, a fact citing the turns at indices ``cited`` of the window (user turns
        of one speaker), is not said by them as the speaker's own (the module's docstring);
        None when it is."""
        speaker = self._window[cited[0]].user_id
        own = self._names[speaker]
        others = [names for user_id, names in self._names.items() if user_id != speaker]
        neighbours = frozenset().union(*others) - own
        fact = [w for sentence in _sentences(_ISO_DATE.sub(" ", text)) for w in sentence]
        dated = bool(_ISO_DATE.search(text)) or any(word.lower in _DATE_WORDS for word in fact)
        said = [sentence for index in cited for sentence in self._said[index]]
        if not _specifics_said(fact, own, dated, set().union(*(self._known[i] for i in cited))):
            return UNSAID_SPECIFICS
        content = {
            word.stem
            for index, word in enumerate(fact)
            if word.lower not in _FUNCTION
            and word.stem not in own
            and not _date_part(word, dated)
            and not _unit(fact, index)
        }
        shared = content & set().union(*(self._stated[index] for index in cited))
        if not shared or len(shared) < MIN_COVERAGE * len(content):
            return UNSAID_CONTENT
        best = max(_count(sentence, shared) for sentence in said)
        support = [sentence for sentence in said if _count(sentence, shared) == best]
        if len(support) > 1:  # a question beside a statement of as many of its words
            support = [s for s in support if not all(w.asked for w in s)] or support
        supported = {word.stem for sentence in support for word in sentence}
        assistant, neighbour = self._words_elsewhere(speaker)
        if (content - shared) & assistant or (content - supported) & neighbour:
            return UNSAID_OTHERS_WORDS
        fact_words = {word.lower for word in fact} | {word.stem for word in fact}
        # A verb of the present ("plays"), whose source said it of the past ("played").
        present = {w.stem for w in fact if w.lower.endswith("s") and not w.lower.endswith("ss")}
        reasons = (_unstated(s, shared, own, neighbours, fact_words, present) for s in support)
        return next((reason for reason in reasons if reason), None)

    def _words_elsewhere(self, speaker: str) -> tuple[set[str], set[str]]:
        """The stems of the assistant's turns, and of the turns of speakers other than
        ``speaker``."""
        if speaker not in self._elsewhere:
            assistant: set[str] = set()
            neighbour: set[str] = set()
            for turn, sentences in zip(self._window, self._said, strict=True):
                if turn.role != "user" or turn.user_id != speaker:
                    into = assistant if turn.role != "user" else neighbour
                    into.update(word.stem for sentence in sentences for word in sentence)
            self._elsewhere[speaker] = assistant, neighbour
        return self._elsewhere[speaker]


def _count(sentence: Sequence[_Word], stems: set[str]) -> int:
    return sum(word.stem in stems for word in sentence)


def _specifics_said(
    fact: Sequence[_Word], own: frozenset[str], dated: bool, known: set[str]
) -> bool:
    """Every name and number of the fact is ``known`` (the cited turns' words and stems), but
    the speaker's own and a date's parts."""
    for word in fact:
        is_name = not word.initial and word.text[:1].isupper() and word.lower != "i"
        is_number = word.lower.isdigit() or any(c.isdigit() for c in word.text)
        if not (is_name or is_number) or word.stem in own or _date_part(word, dated):
            continue
        if word.stem not in known and word.lower not in known:
            return False
    return True


def _said_stems(said: Sequence[_Word]) -> set[str]:
    """The stems of ``said``, and the years two digits may be short for ("born in '92")."""
    stems = {word.stem for word in said}
    short = [word.lower for word in said if len(word.lower) == 2 and word.lower.isdigit()]
    return stems | {century + digits for digits in short for century in ("19", "20")}


def _unit(fact: Sequence[_Word], index: int) -> bool:
    """Whether the fact's word at ``index`` is a unit of the number before it ("34 years old",
    "a 12-year-old cat"): the number is what its source must say."""
    while index > 0 and fact[index].lower in _UNITS:
        index -= 1
        if fact[index].lower.isdigit():
            return True
    return False


def _date_part(word: _Word, dated: bool) -> bool:
    if word.lower in _DATE_WORDS:
        return True
    if not dated or not word.lower.isdigit():
        return False
    value = int(word.lower)
    return 1 <= value <= 31 or 1900 <= value <= 2100


def _unstated(
    sentence: Sequence[_Word],
    shared: set[str],
    own: frozenset[str],
    neighbours: frozenset[str],
    fact_words: set[str],
    present: set[str],
) -> str | None:
    """Why ``sentence`` does not state the fact's ``shared`` words as the speaker's own (the
    module's docstring: a statement, not reported, not quoted, of the speaker); None: it does."""
    matched = [word for word in sentence if word.stem in shared]
    first = next(i for i, word in enumerate(sentence) if word.stem in shared)
    unsure = any(word.lower in _UNSURE for word in sentence[:first])
    if (unsure and not fact_words & _KEPT_UNSURE) or all(word.asked for word in matched):
        return UNSAID_UNSURE
    past = {word.stem for word in matched if word.lower.endswith("ed")}
    if past & present and not fact_words & _KEPT_UNSURE:
        return UNSAID_PAST
    if 2 * sum(word.quoted for word in matched) > len(matched):
        return UNSAID_REPORTED
    for index, word in enumerate(sentence[:first]):
        reported = word.lower in _REPORTING and not _reported_by_speaker(sentence, index, own)
        if reported or word.lower == "according":
            return UNSAID_REPORTED
    subject = _subject(sentence, first, own, neighbours)
    start = subject[0] + 1 if subject is not None else 0
    negated = any(word.lower in _NEGATIONS for word in sentence[start:first])
    if negated and not fact_words & _NEGATIONS:
        return UNSAID_NEGATED
    # The converse: "Is not allergic to peanuts" from "I'm allergic to peanuts".
    if fact_words & _NEGATIONS and not any(word.lower in _NEGATIONS for word in sentence):
        return UNSAID_NEGATION
    if subject is None or subject[1]:
        return None
    named = sentence[subject[0]]
    if named.lower in fact_words or named.stem in fact_words:
        return None
    # "he", "she": whoever the fact names beside the speaker ("grandfather ... still beats them").
    others = fact_words & (_RELATIONS | {word.lower for word in sentence if word.text.istitle()})
    return None if named.lower in _THIRD_PERSON and others else UNSAID_SUBJECT


def _reported_by_speaker(sentence: Sequence[_Word], verb: int, own: frozenset[str]) -> bool:
    """Whether the reporting verb at ``verb`` reports the speaker's own words: its subject is
    "I" or the speaker, or it has none ("told my boss I'm quitting")."""
    for word in reversed(sentence[:verb]):
        if word.lower in _FIRST_PERSON or word.stem in own:
            return True
        if word.lower not in _ADVERBS:
            return False
    return True


def _subject(
    sentence: Sequence[_Word], before: int, own: frozenset[str], neighbours: frozenset[str]
) -> tuple[int, bool] | None:
    """The nearest word before ``before`` that is a subject, and whether it is the speaker:
    "I", "my", the speaker's id (the speaker); a pronoun of a third person, another speaker's
    id, a name, one of someone's people ("my friend"), or any word an auxiliary follows
    ("tom is") (someone else). None: no such word."""
    for index in range(before - 1, -1, -1):
        word = sentence[index]
        if word.lower in _FIRST_PERSON or word.stem in own:
            return index, True
        follows = sentence[index + 1].lower if index + 1 < len(sentence) else ""
        if (
            word.lower in _THIRD_PERSON
            or word.stem in neighbours
            or word.lower in _RELATIONS
            or (word.text[:1].isupper() and not word.initial)
            or (follows in _COPULAS and word.lower not in _NOT_SUBJECTS)
        ):
            return index, False
    return None
