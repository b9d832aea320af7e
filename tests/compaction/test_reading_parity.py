"""The native reading of ASCII text (``_core.read_identifiers``, ``read_prose``,
``read_first_line``: rust/src/reading.rs) gives exactly what the Python reading gives.

The Python reading is the reference (Python's ``re`` on ``str``); the native one reads a text
only when it is ASCII, where Python's ``\\w``, ``\\d``, ``\\s``, ``\\b`` and case folding are
ASCII classes. Compared on every text of every shared transcript (message texts, tool-call
arguments, tool results) and on generated ASCII text built from the patterns' own pieces.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any
from unittest import mock

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ctxengine import _core
from ctxengine.compaction import extractive
from ctxengine.compaction import facts as F
from ctxengine.transcript import Message, load_all

from .helpers import all_files

LIMITS = (F.MAX_LINE, 60, 1, sys.maxsize)


def _texts() -> Iterator[str]:
    for path in all_files():
        for transcript in load_all(path):
            for m in transcript:
                yield m.text
                for call in m.tool_calls:
                    yield call.arguments_json
                for result in m.tool_results:
                    yield result.text


TEXTS = sorted(set(_texts()))
ASCII = [t for t in TEXTS if t.isascii()]


def _python_prose(text: str) -> tuple[tuple[str, ...], str]:
    """The Python reading of the prose, its first lines read in Python too."""
    with mock.patch.object(F, "read_first_line", lambda text, limit: None):
        return extractive._scanned_prose(text)


def _same(text: str) -> None:
    assert _core.read_identifiers(text) == F._scanned_identifiers(text), text
    assert _core.read_prose(text, F.MAX_LINE) == _python_prose(text), text
    for limit in LIMITS:
        assert _core.read_first_line(text, limit) == F._first_line(text, limit), (text, limit)


def test_the_shared_transcripts_hold_ascii_and_other_text() -> None:
    # the comparison below covers the native reading on real text, the fallback on the rest
    assert len(ASCII) > 1_000
    assert len(TEXTS) - len(ASCII) > 10


def _differing(texts: list[str]) -> list[str]:
    """The texts (their first 80 characters) the two readings read differently."""
    differ = []
    for text in texts:
        try:
            _same(text)
        except AssertionError:
            differ.append(text[:80])
    return differ


def test_every_ascii_text_of_the_transcripts_is_read_alike() -> None:
    assert _differing(ASCII) == []


def test_every_line_of_the_transcripts_is_read_alike() -> None:
    # a line alone starts and ends where a text's words and phrases are cut
    lines = sorted({ln for t in ASCII for ln in t.splitlines() if ln.strip()})
    assert len(lines) > 5_000
    assert _differing(lines) == []


def test_other_text_is_left_to_python() -> None:
    other = [t for t in TEXTS if not t.isascii()][:500]
    for text in [*other, "é", "\ud800", "٣٣"]:
        assert _core.read_identifiers(text) is None
        assert _core.read_prose(text, F.MAX_LINE) is None
        assert _core.read_first_line(text, F.MAX_LINE) is None
        # and the callers read it in Python
        assert F._read_identifiers(text) == F._scanned_identifiers(text)
        assert F.first_line(text) == F._first_line(text, F.MAX_LINE)


def test_a_limit_of_zero_is_left_to_python() -> None:
    assert _core.read_first_line("abc", 0) is None
    assert F.first_line("abc", 0) == F._first_line("abc", 0)


#: Pieces of what the patterns look for, and of what stops them (Python's whitespace beyond
#: ``\s`` in other engines: ``\x1c``-``\x1f``; its line breaks: ``\x0b``, ``\x0c``, ``\r``).
_PIECES = st.sampled_from(
    [
        *"aAfFgxZ09_-#/.:~@+*|>`'\"()[]<>,;!?\\ \n\t\r\x0b\x0c\x1c\x1d\x1e\x1f",
        *("http://", "https://h.io/p", "://", "```", "    ", "- ", "2. ", "12) ", "* "),
        *("PROJ-12", "#45", "X1-9", "deadbeef", "3f2a9c1", "12345678", "-e89b", "123e4567"),
        *("src/", "./", "../", "~/", ".py", ".tar.gz", "a/b", "x.rs", "/etc/", "@scope/"),
        *("I'll", "I will", "i\twill", "we'll", "We  will", "let's", "let\nme", "decided"),
        *("decision", "going to", "instead of", "chose", "switched to", "switch to"),
        *("the fix is", "root cause", "plan is", "approach", "deci", "fix", "plan", "root"),
        "x" * 70,
        " y" * 70,
        "0123456789abcdef" * 3,
    ]
)


@settings(max_examples=600)
@given(st.lists(_PIECES, max_size=50).map("".join))
@example("see https://x.io/a. and PROJ-12 at src/app/main.py, 3f2a9c1d #45")
@example("x " * 150 + "\nThat decision holds for the parser module.\n")
@example("```\nI will\n```\n- I decided to go.\x1cnext")
def test_generated_ascii_is_read_alike(text: str) -> None:
    _same(text)


def _any_ascii(max_size: int) -> st.SearchStrategy[str]:
    """Any ASCII text (control characters included) of at most ``max_size`` characters."""
    return st.text(st.characters(max_codepoint=127), max_size=max_size)


@settings(max_examples=300)
@given(_any_ascii(300))
def test_any_ascii_is_read_alike(text: str) -> None:
    _same(text)


@pytest.mark.parametrize("text", ["", " ", "\n\n", "\x1c\x1f", "```", "http://"])
def test_empty_and_blank_texts_are_read_alike(text: str) -> None:
    _same(text)


def test_other_text_is_read_as_python_reads_it() -> None:
    # its ASCII words natively, the others in Python (F._mixed_identifiers): every text of the
    # transcripts that is not ASCII, each of its lines, and each with its ASCII words alone
    other = [t for t in TEXTS if not t.isascii()]
    lines = sorted({ln for t in other for ln in t.splitlines() if ln.strip()})
    assert len(other) > 10 and len(lines) > 100
    for text in [*other, *lines]:
        assert F._read_identifiers(text) == F._scanned_identifiers(text), text[:80]


#: Pieces of texts that are not ASCII: Unicode word characters next to what the patterns look
#: for (Python's ``\w`` and ``\b`` hold them), Unicode whitespace (``\s`` and ``str.split``),
#: arrows and marks between words.
_OTHER_PIECES = st.sampled_from(
    [
        *("é", "→", "✓", "ß", "٣", "\u00a0", "\u2003", "\u3000", "\u2028", "\x85", "😀"),
        *("é/a.py", "src/é.py", "3f2a9c1é", "é3f2a9c1d", "PROJ-12é", "éPROJ-12", "#45é"),
        *("https://é.io/a", "http://x.io/é.", "a→b/c.py", "deadbeef→"),
    ]
)


#: Decision phrases beside what is not ASCII: folded case (``ſ`` is ``s`` to ``re.I``), a
#: phrase spaced by Unicode whitespace, line breaks only Python's ``splitlines`` knows.
_OTHER_PROSE = st.sampled_from(
    [
        "ſwitch to",
        "the fix\u00a0is",
        "let\u2003me",
        "\u2028",
        "\u2029",
        "\x85",
        "I'll é",
        "→ I will",
    ]
)


@settings(max_examples=600)
@given(st.lists(st.one_of(_PIECES, _OTHER_PIECES), max_size=50).map("".join))
@example("see https://x.io/é and PROJ-12 at src/app/main.py → 3f2a9c1d #45")
@example("é\u00a0src/a.py\u2003deadbeef1\u3000X-12")
def test_generated_other_text_is_read_as_python_reads_it(text: str) -> None:
    assert F._read_identifiers(text) == F._scanned_identifiers(text)


def test_other_text_has_the_prose_python_reads_in_it() -> None:
    # its ASCII lines natively, the others in Python (extractive._mixed_prose): every text of
    # the transcripts that is not ASCII, and each of its lines
    other = [t for t in TEXTS if not t.isascii()]
    lines = sorted({ln for t in other for ln in t.splitlines() if ln.strip()})
    for text in [*other, *lines]:
        assert extractive._prose(Message.assistant(text), text) == _python_prose(text), text[:80]


def test_other_text_has_its_ascii_lines_read_natively(monkeypatch: pytest.MonkeyPatch) -> None:
    # each run of ASCII lines in one native call, the line with an arrow in Python
    runs: list[str] = []
    read_prose = _core.read_prose
    monkeypatch.setattr(extractive, "read_prose", lambda t, n: runs.append(t) or read_prose(t, n))
    text = "I decided to keep the parser.\nIt reads it all.\nThe fix is → a retry.\nWe will ship."
    assert extractive._prose(Message.assistant(text), text) == (
        ("I decided to keep the parser.", "The fix is → a retry.", "We will ship."),
        "I decided to keep the parser.",
    )
    assert runs == ["I decided to keep the parser.\nIt reads it all.", "We will ship."]


@settings(max_examples=600)
@given(st.lists(st.one_of(_PIECES, _OTHER_PIECES, _OTHER_PROSE), max_size=50).map("".join))
@example("I will keep the parser → it works\n```\nI decided é\n```\n- we'll ship ✓ today")
@example("é\u2028I decided to use a queue here\x85the fix is a retry loop")
@example("x " * 150 + "\nThat decision holds → for the parser module.\n")
def test_generated_other_text_has_the_prose_python_reads_in_it(text: str) -> None:
    assert extractive._prose(Message.assistant(text), text) == _python_prose(text)


def test_identifier_kinds_are_the_identifiers_by_kind() -> None:
    for text in ASCII[:2_000]:
        kinds = _core.read_identifier_kinds(text)
        assert kinds is not None
        assert kinds == tuple(map(tuple, F._scanned_kinds(text))), text[:80]
        assert sum(kinds, ()) == _core.read_identifiers(text)
    assert _core.read_identifier_kinds("é") is None


def test_other_text_is_not_encoded_by_the_native_reading() -> None:
    # asking a str for its UTF-8 keeps a copy inside it for as long as it lives: a message's
    # text read by a compaction must not grow (only ASCII text, whose UTF-8 is itself, goes in)
    text = "".join(["café src/a.py I will fix it\n"] * 500)
    size = sys.getsizeof(text)
    F._read_identifiers(text)
    F.first_line(text)
    extractive._prose(None, text)  # type: ignore[arg-type]
    assert sys.getsizeof(text) == size


def _outcome(read: Any, text: str, limit: Any) -> Any:
    try:
        return read(text, limit)
    except Exception as exc:  # the same error as the Python reading's, if any
        return type(exc)


@pytest.mark.parametrize("limit", [2**64, 5.0, 500.0, -3, 0, True])
@pytest.mark.parametrize("text", ["abc", "  a first line that is long enough\nsecond"])
def test_any_limit_is_taken_as_the_python_reading_takes_it(text: str, limit: Any) -> None:
    assert _outcome(F.first_line, text, limit) == _outcome(F._first_line, text, limit)


def _commands() -> Iterator[str]:
    """The command line of every call of the shared transcripts (a shell tool's or not)."""
    for path in all_files():
        for transcript in load_all(path):
            for m in transcript:
                for call in m.tool_calls:
                    yield F._shell_command(call)


COMMANDS = sorted({c for c in _commands() if isinstance(c, str)})


def _same_shell_files(command: str) -> None:
    assert _core.read_shell_files(command) == F._scanned_shell_files(command), command


def test_the_shared_transcripts_hold_shell_commands() -> None:
    assert sum(1 for c in COMMANDS if c.isascii() and ("|" in c or "&&" in c)) > 100


def test_every_command_of_the_transcripts_reads_the_same_files() -> None:
    differ = []
    # each command, and each text taken as one (code, quotes and redirections of every kind)
    for command in [*COMMANDS, *ASCII]:
        if command.isascii():
            try:
                _same_shell_files(command)
            except AssertionError:
                differ.append(command[:80])
    assert differ == []


def test_other_commands_are_left_to_python() -> None:
    for command in ["cat café.py", "rm \ud800.txt", "sed -i s/a/b/ ٣.txt"]:
        assert _core.read_shell_files(command) is None
        assert F._read_shell_files(command) == F._scanned_shell_files(command)


#: Pieces of shell command lines: commands, options, operands, quoting, breaks, redirections.
_SHELL_PIECES = st.sampled_from(
    [
        *" \t\r\n\x0b\x0c\x1c\x1f'\"\\#;|&<>=-./*?$`,:()[]{}",
        *("cat ", "grep ", "rg ", "sed ", "awk ", "perl ", "cp ", "rm ", "tee ", "head "),
        *("sudo ", "env ", "time ", "command ", "X=1 ", "/usr/bin/cat ", "./", "echo "),
        *("-e ", "-f ", "-F ", "-v ", "-i ", "-i.bak ", "-pi ", "-pe ", "-ne ", "-n ", "--"),
        *("--in-place ", "--regexp=", "--file ", "-A 3 ", "-- ", "''", '""', "'a b'"),
        *('"x\\"y"', '"\\\\"', "\\ ", "&&", "||", " 2>", ">>", "&>", "2>&1", "> ", ">>>"),
        *("src/a.py", "a.py", "b.rs", "/dev/null", "x.toolongext", "http://h/a.py", "dir/"),
        *("file.tar.gz", "@scope/p.js", "~/n.md", "../up.txt", ".", "..", "Makefile"),
        "p" * 301 + ".py",
    ]
)


@settings(max_examples=800)
@given(st.lists(_SHELL_PIECES, max_size=40).map("".join))
@example("cat src/a.py | grep -n foo lib/b.rs > out.txt && rm old.log")
@example("sed -i '' -e 's/a/b/' x.txt; perl -pi -e 's/x/y/' a.pl; cp a.py b.py c.py")
@example("awk -F: -f prog.awk data.csv 2>>err.log >> all.log")
def test_generated_commands_read_the_same_files(command: str) -> None:
    _same_shell_files(command)


@settings(max_examples=300)
@given(_any_ascii(200))
def test_any_ascii_command_reads_the_same_files(command: str) -> None:
    _same_shell_files(command)
