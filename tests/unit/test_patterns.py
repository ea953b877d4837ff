"""Every regular expression of the package against adversarial text of 10k characters.

A pattern with nested or adjacent unbounded quantifiers (``\\s*#*\\s*$``, ``(a+)+``) backtracks
polynomially or exponentially on text built to make it try every split, and ``re`` runs in C
on the event loop, where no timeout reaches it: one line of notes froze a worker for a minute.
So every pattern the package holds is collected (module-level ``re.Pattern`` objects, found by
importing every module, and every ``re.<function>("literal", ...)`` call, found in the source)
and run against inputs made from its own parts: runs of every character it accepts
repeatedly, after every prefix that leads up to such a repeat, alone and in pairs, ended by a
character that makes the match fail late; runs and interleavings of the characters it names;
its words over and over (``"may " * 2500``). Each pattern runs in a child process (a match in
C cannot be interrupted), which the kernel ends when any one input outlasts the bound. The bound
is per input, not for all of a pattern's inputs together: a pattern naming many words (a list
of number words) gets over a thousand inputs, each linear, whose sum on a slow, busy machine
says nothing about how any one of them grows.

The inputs come from the pattern's parse tree (``re._parser``, the standard library's own
parser; private, but the only parser of the dialect there is).
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from re import _constants as sre  # type: ignore[attr-defined]
from re import _parser  # type: ignore[attr-defined]
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llm_bot"
SIZE = 10_000
# CPU seconds for one input of SIZE characters, through search, match and fullmatch: a linear
# pattern's slowest input takes under 3 ms where this was measured, the classic backtracking
# one's 0.4 s, so a machine three times slower or faster stays on its side with room.
BOUND_S = 0.04
# Only for a child that hangs some other way: the bound is kept by the kernel (ITIMER_PROF).
WALL_TIMEOUT_S = 120
RE_FUNCTIONS = frozenset(
    {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "subn", "split"}
)
FLAGS_ARGUMENT = {"compile": 1, "sub": 4, "subn": 4, "split": 3}  # else 2: (pattern, text, flags)
# Characters tried against every character class, besides those the pattern names.
POOL = " \t\n\r\x0baA1_-.:!#@[]{}()<>'\"/\\,;=~*+?|$^&%"
ENDINGS = ("!", "\n", "x")  # each makes a match fail late, or succeed at a line end
REPEATS = (sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT))


@dataclass(frozen=True)
class Found:
    """A pattern and where it was found (module attribute or source line)."""

    pattern: str
    flags: int
    where: str


# -- collecting ---------------------------------------------------------------------------


def module_patterns() -> Iterator[Found]:
    """``re.Pattern`` objects at module level and in classes, after importing every module."""
    package = importlib.import_module("llm_bot")
    for info in pkgutil.walk_packages(package.__path__, "llm_bot."):
        if info.name.endswith("__main__"):
            continue  # runs the command line when imported
        module = importlib.import_module(info.name)
        holders = [module, *(v for v in vars(module).values() if isinstance(v, type))]
        for holder in holders:
            for name, value in vars(holder).items():
                if isinstance(value, re.Pattern) and isinstance(value.pattern, str):
                    yield Found(value.pattern, _own_flags(value.flags), f"{info.name}.{name}")


def _own_flags(flags: int) -> int:
    """The flags given to ``compile`` (``re.UNICODE`` is implied for str patterns)."""
    return flags & ~re.UNICODE


def source_patterns() -> Iterator[Found]:
    """Patterns written as string literals in ``re.<function>(...)`` calls anywhere."""
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            called = _re_function(node)
            if called is None or not isinstance(node, ast.Call) or not node.args:
                continue
            literal = node.args[0]
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                yield Found(literal.value, _flags_of(node, called), where)


def _re_function(node: ast.AST) -> str | None:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
        return None
    target = node.func
    if isinstance(target.value, ast.Name) and target.value.id == "re":
        return target.attr if target.attr in RE_FUNCTIONS else None
    return None


def _flags_of(call: ast.Call, function: str) -> int:
    position = FLAGS_ARGUMENT.get(function, 2)
    given = [k.value for k in call.keywords if k.arg == "flags"]
    if len(call.args) > position:
        given.append(call.args[position])
    return _flag_value(given[0]) if given else 0


def _flag_value(node: ast.expr) -> int:
    """``re.I``, ``re.I | re.S``, or an integer constant."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "re":
        return int(getattr(re, node.attr))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        return _flag_value(node.left) | _flag_value(node.right)
    raise AssertionError(f"flags {ast.unparse(node)!r}: teach _flag_value to read them")


def every_pattern() -> list[Found]:
    """Each (pattern, flags) once, named by the first place it was found."""
    unique: dict[tuple[str, int], Found] = {}
    for found in [*module_patterns(), *source_patterns()]:
        unique.setdefault((found.pattern, found.flags), found)
    return list(unique.values())


# -- adversarial inputs -------------------------------------------------------------------


def _in_class(char: str, items: list[tuple[Any, Any]]) -> bool:
    """Whether ``char`` is in a parsed character class (``[...]``, ``\\s`` and the like)."""
    negate = bool(items) and items[0][0] is sre.NEGATE
    member = any(_class_item(char, op, av) for op, av in items if op is not sre.NEGATE)
    return member != negate


def _class_item(char: str, op: Any, av: Any) -> bool:
    if op is sre.LITERAL:
        return ord(char) == av
    if op is sre.RANGE:
        return av[0] <= ord(char) <= av[1]
    if op is sre.CATEGORY:
        name = str(av).removeprefix("CATEGORY_").removeprefix("UNI_")
        tests = {
            "SPACE": char.isspace(),
            "DIGIT": char.isdecimal(),
            "WORD": char.isalnum() or char == "_",
            "LINEBREAK": char == "\n",
        }
        if name.startswith("NOT_"):
            return not tests[name.removeprefix("NOT_")]
        return tests[name]
    return False


def _chars(op: Any, av: Any, pool: str) -> list[str]:
    """Characters that one element of a pattern accepts (a few, for a class)."""
    if op is sre.LITERAL:
        return [chr(av)]
    if op is sre.NOT_LITERAL:
        return [c for c in pool if ord(c) != av][:3]
    if op is sre.ANY:
        return ["x", " "]
    if op is sre.IN:
        return [c for c in pool if _in_class(c, av)][:4]
    if op in REPEATS:
        return _first_chars(av[2], pool)
    if op is sre.SUBPATTERN:
        return _first_chars(av[3], pool)
    if op is sre.BRANCH:
        return [c for alternative in av[1] for c in _first_chars(alternative, pool)]
    return []


def _first_chars(sequence: Any, pool: str) -> list[str]:
    for op, av in sequence:
        chars = _chars(op, av, pool)
        if chars:
            return chars
    return []


def _sample(sequence: Any, pool: str) -> str:
    """A short text that walks through ``sequence`` (first alternatives, fewest repeats)."""
    text = ""
    for op, av in sequence:
        if op in REPEATS:
            text += _sample(av[2], pool) * av[0]
        elif op is sre.SUBPATTERN:
            text += _sample(av[3], pool)
        elif op is sre.BRANCH:
            text += _sample(av[1][0], pool)
        elif op in (sre.LITERAL, sre.NOT_LITERAL, sre.ANY, sre.IN):
            text += (_chars(op, av, pool) or ["x"])[0]
    return text


def _pumps(sequence: Any, pool: str, before: str = "") -> Iterator[tuple[str, list[str]]]:
    """(the text that leads up to a repeat, characters the repeat takes) for every repeat."""
    text = before
    for op, av in sequence:
        if op in REPEATS:
            yield text, _first_chars(av[2], pool)
            yield from _pumps(av[2], pool, text)
            text += _sample(av[2], pool) * av[0]
        elif op is sre.SUBPATTERN:
            yield from _pumps(av[3], pool, text)
            text += _sample(av[3], pool)
        elif op is sre.BRANCH:
            for alternative in av[1]:
                yield from _pumps(alternative, pool, text)
            text += _sample(av[1][0], pool)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            yield from _pumps(av[1], pool, text)
        else:
            text += _sample([(op, av)], pool)


def _literals(sequence: Any) -> Iterator[str]:
    """Every literal character of the pattern, and every run of them (its words)."""
    for op, av in sequence:
        if op is sre.LITERAL:
            yield chr(av)
            continue
        if op in REPEATS:
            yield from _literals(av[2])
        elif op is sre.SUBPATTERN:
            yield from _literals(av[3])
        elif op is sre.BRANCH:
            for alternative in av[1]:
                yield "\0"  # a word ends at an alternative
                yield from _literals(alternative)
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            yield from _literals(av[1])
        yield "\0"  # and at anything that is not a literal


def adversarial_inputs(pattern: str, flags: int) -> Iterator[tuple[str, str]]:
    """(how it was built, the text) pairs of about ``SIZE`` characters each."""
    tree = list(_parser.parse(pattern, flags))
    literal_run = "".join(_literals(tree))
    named = dict.fromkeys(c for c in literal_run if c != "\0")
    pool = "".join(dict.fromkeys([*named, *POOL]))
    pumps = sorted({(lead, c) for lead, chars in _pumps(tree, pool) for c in chars})
    repeated = sorted({c for _, c in pumps})
    half = SIZE // 2
    for lead in sorted({lead for lead, _ in pumps}):
        for first in repeated:
            for second in ["", *repeated]:
                for end in ENDINGS:
                    built = f"{lead!r} + {first!r}*{half} + {second!r}*{half} + {end!r}"
                    yield built, lead + first * half + second * half + end
    for char in dict.fromkeys([*named, *repeated, " ", "\t", "\n"]):
        for end in ENDINGS:
            yield f"{char!r}*{SIZE} + {end!r}", char * SIZE + end
        for other in repeated:
            yield f"({char + other!r})*{half}", (char + other) * half
    for word in dict.fromkeys(w for w in literal_run.split("\0") if len(w) > 1):
        for form in dict.fromkeys([word, word.capitalize(), word.upper()]):
            yield f"({form + ' '!r})*", (form + " ") * (SIZE // (len(form) + 1))
            yield f"{form!r}*", form * (SIZE // len(form))
    yield f"'a'*{SIZE} + '!'", "a" * SIZE + "!"


def probe(pattern: str, flags: int) -> None:
    """The child's work: every input through search, match and fullmatch, each announced on
    stdout before it runs (so the parent can name the one the child died in). Each input gets
    its own bound of CPU time (other processes on the machine do not count): at the bound the
    kernel ends the child with SIGPROF (a profiling timer, whose default action ends the
    process), even inside C."""
    compiled = re.compile(pattern, flags)
    for built, text in list(adversarial_inputs(pattern, flags)):
        print(json.dumps({"trying": built}), flush=True)
        signal.setitimer(signal.ITIMER_PROF, BOUND_S)
        compiled.search(text)
        compiled.match(text)
        compiled.fullmatch(text)
        signal.setitimer(signal.ITIMER_PROF, 0)


def run_probe(found: Found) -> str | None:
    """None when every input of the pattern ran within the bound, else the one that blew it."""
    child = subprocess.run(
        [sys.executable, __file__, json.dumps([found.pattern, found.flags])],
        capture_output=True,
        text=True,
        timeout=WALL_TIMEOUT_S,
        check=False,
    )
    if child.returncode == -signal.SIGPROF:
        lines = [json.loads(line) for line in child.stdout.splitlines()]
        running = lines[-1]["trying"] if lines else "its start"
        return f"ended by the kernel past {BOUND_S:g} CPU seconds, in {running}"
    assert child.returncode == 0, f"{found.where}: the probe failed: {child.stderr}"
    return None


def test_collection_finds_patterns_in_modules_and_in_calls() -> None:
    """The collector itself: a module-level pattern, and a literal inside a function."""
    from llm_bot.text import UNSTORABLE  # not at the top: the child process needs no llm_bot

    found = {(found.pattern, found.where.split(":")[0]) for found in every_pattern()}
    assert any(pattern == UNSTORABLE.pattern for pattern, _ in found)
    assert ("[^A-Za-z0-9_-]", "llm_bot/memory/rendering.py") in found  # a re.sub in a function


def test_a_backtracking_pattern_is_caught() -> None:
    """The probe finds the classic: adjacent quantifiers over the same characters."""
    blown = run_probe(Found(r"^(#{1,6})\s+(.*?)\s*#*\s*$", 0, "the notes header of old"))
    assert blown is not None


def test_every_pattern_stays_linear_on_adversarial_text() -> None:
    blown = []
    for found in every_pattern():
        failure = run_probe(found)
        if failure is not None:
            blown.append(f"{found.where} {found.pattern!r}: {failure}")
    assert not blown, "\n".join(blown)


if __name__ == "__main__":
    probe(*json.loads(sys.argv[1]))
