"""The compaction's caches of what it read from texts: bounded by the characters they hold,
emptied by ``clear_cache``."""

from __future__ import annotations

import anyio

import ctxengine
from ctxengine.compaction import compact
from ctxengine.compaction import facts as F
from ctxengine.transcript import Message, ToolCall


def test_a_memo_keeps_texts_up_to_its_characters_the_oldest_going_first() -> None:
    reads: list[str] = []

    def read(text: str) -> int:
        reads.append(text)
        return len(text)

    memo = F.TextMemo(read, 1_000)
    texts = [c * 300 for c in "abcde"]
    assert [memo(t) for t in texts] == [300] * 5
    assert list(memo.memo) == texts[2:] and memo.held == 900  # a and b went, oldest first
    assert memo(texts[4]) == 300 and memo(texts[0]) == 300
    assert reads == [*texts, texts[0]]  # e was kept, a was read again
    huge = "z" * 1_001
    assert memo(huge) == 1_001 and memo(huge) == 1_001
    assert reads[-2:] == [huge, huge] and huge not in memo.memo  # over the whole: never kept
    assert memo.held == sum(map(len, memo.memo)) <= 1_000


def test_the_readings_of_long_texts_are_bounded_by_their_characters() -> None:
    # lru_cache(maxsize=8192) bounded how many texts the identifiers' cache kept, not their
    # size: a server compacting sessions with long tool outputs held them all
    for memo in (F._cached_identifiers, F._shell_files, F._failure_line):
        assert isinstance(memo, F.TextMemo)
        assert 0 < memo.chars <= 16_000_000


def test_clear_cache_empties_the_compaction_readings_too() -> None:
    # clear_cache() emptied the count cache only: a "cold" render after it still found the
    # identifiers of every long tool output read before (about a tenth of a cold render)
    output = "commit 3f2a9c1d in https://example.org/repo/pulls/12\n" + "line of output\n" * 60
    call = ToolCall("c1", "bash", {"command": "git log -1 > out/log.txt"})
    messages = [
        Message.user("What changed in the last commit of the repository?"),
        Message.assistant("Looking.", [call]),
        Message.tool("c1", output, is_error=True),
        Message.assistant("The commit is 3f2a9c1d, see src/app/main.py. " + "It did so. " * 60),
    ]

    async def main() -> None:
        await compact(messages, max_tokens=400, tokenizer="gpt-4o")

    ctxengine.clear_cache()
    anyio.run(main)
    memos = (F._cached_identifiers, F._shell_files, F._failure_line)
    assert all(m.memo for m in memos)
    ctxengine.clear_cache()
    assert not any(m.memo for m in memos) and all(m.held == 0 for m in memos)
