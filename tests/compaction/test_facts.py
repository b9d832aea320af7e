"""The fast fact readers give exactly what the straightforward ones give: ``shlex`` for shell
words, each identifier pattern run over the whole text, the first error line of every line."""

from __future__ import annotations

import re
import shlex

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxengine.compaction import facts
from ctxengine.transcript import load
from offline_tiktoken import TRANSCRIPTS

# Characters that matter to shell quoting, and a few that only look like whitespace to Python.
SHELLISH = st.text(alphabet=list("ab #'\"\\\t\r\x0b\u00a0$x.-/"), max_size=24)
# Characters identifiers are made of, and their neighbours.
IDENTISH = st.lists(
    st.sampled_from([*"abcdef0189ABZ-#/._:@~ \n\t()\"'`,", "https://", "a1b2c3d"]),
    max_size=40,
).map("".join)


def _shlex(part: str) -> list[str] | str:
    try:
        return shlex.split(part, comments=True)
    except ValueError:
        return "unbalanced"


def _fast(part: str) -> list[str] | str:
    try:
        return facts._shell_words(part)
    except ValueError:
        return "unbalanced"


def _identifiers_reference(text: str) -> list[str]:
    found = [u.rstrip(".,;:!?") for u in facts._URL.findall(text)]
    stripped = facts._URL.sub(" ", text)
    found += facts._UUID.findall(stripped)
    found += [h for h in facts._HASH.findall(stripped) if not h.isdigit()]
    found += facts._PATHLIKE.findall(stripped)
    found += facts._TICKET.findall(stripped)
    return found


def _failure_reference(text: str) -> tuple[int | None, str]:
    match = facts._EXIT.search(text)
    code = int(match.group(1)) if match else None
    lines = [" ".join(ln.split()) for ln in text.splitlines() if ln.strip()]
    errorish = [ln for ln in lines if facts._ERRORISH.search(ln) and not facts._EXIT.fullmatch(ln)]
    chosen = errorish[0] if errorish else (lines[0] if lines else "(no output)")
    return code, chosen if len(chosen) <= facts.MAX_LINE else chosen[: facts.MAX_LINE - 1] + "…"


@settings(max_examples=800, deadline=None)
@given(SHELLISH)
def test_shell_words_split_like_shlex(part: str) -> None:
    assert _fast(part) == _shlex(part)


@settings(max_examples=500, deadline=None)
@given(IDENTISH)
def test_identifiers_match_the_patterns_over_the_whole_text(text: str) -> None:
    facts._cached_identifiers.cache_clear()
    assert list(facts._identifiers(text)) == _identifiers_reference(text)
    # a long text (read through the cache, twice) gives the same as its reading
    long = (text + " ") * (facts._CACHED_FROM // (len(text) + 1) + 1)
    assert len(long) >= facts._CACHED_FROM
    expected = _identifiers_reference(long)
    assert list(facts._identifiers(long)) == expected == list(facts._identifiers(long))


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=list("ab error exit code 12:\n\t\r"), max_size=60))
def test_failure_line_is_the_first_error_line(text: str) -> None:
    facts._failure_line.cache_clear()
    assert facts._failure_line(text) == _failure_reference(text)


def test_real_sessions_read_the_same_commands_identifiers_and_failures() -> None:
    commands = texts = results = 0
    for path in sorted(TRANSCRIPTS.glob("*/*.jsonl")):
        for m in load(path).messages:
            for call in m.tool_calls:
                args = call.arguments if isinstance(call.arguments, dict) else {}
                command = args.get("command") or args.get("cmd")
                if isinstance(command, str):
                    for part in re.split(r"&&|\|\||[;|\n]", command):
                        assert _fast(part) == _shlex(part), part
                        commands += 1
                assert list(facts._identifiers(call.arguments_json)) == _identifiers_reference(
                    call.arguments_json
                )
            assert list(facts._identifiers(m.text)) == _identifiers_reference(m.text)
            texts += 1
            for r in m.tool_results:
                assert facts._failure_line(r.text) == _failure_reference(r.text)
                results += 1
    assert commands > 100 and texts > 1000 and results > 500  # the sessions were really read


_PIECES = st.sampled_from(["/", "//", ".", "..", "a", "b_c", " ", "é", "\\", "-"]) | st.characters()


@settings(max_examples=2_000, deadline=None)
@given(st.lists(_PIECES, max_size=12).map("".join))
def test_a_command_name_is_the_name_of_its_path(word: str) -> None:
    """The program a command runs was read as ``Path(words[0]).name``: building a path for every
    simple command was a tenth of the reading of a session's shell commands."""
    from pathlib import PurePosixPath

    from ctxengine.compaction.facts import command_name

    assert command_name(word) == PurePosixPath(word).name
