"""The typed boundary to the Rust :class:`~ctxengine._core.Assembly`: the one place that calls
``upsert`` (columns by keyword, so two int columns cannot be swapped unnoticed) and ``fuse``."""

from __future__ import annotations

from collections.abc import Sequence

from .. import _core

__all__ = ("fuse", "upsert")


def upsert(
    asm: _core.Assembly,
    *,
    node_ids: Sequence[str],
    texts: Sequence[str],
    windows: Sequence[int],
    priorities: Sequence[int],
    ranks: Sequence[int],
    seqs: Sequence[int],
    kinds: Sequence[int],
    roles: Sequence[int],
    turns: Sequence[int],
    flags: Sequence[int],
    overheads: Sequence[int],
    labels: Sequence[str],
    summaries: Sequence[str | None],
) -> list[int]:
    """Insert or replace items in ``asm`` given as columns; returns each one's tokens.

    Raises:
        ValueError: the columns differ in length or hold an invalid value (named).
    """
    return asm.upsert(
        node_ids=node_ids,
        texts=texts,
        windows=windows,
        priorities=priorities,
        ranks=ranks,
        seqs=seqs,
        kinds=kinds,
        roles=roles,
        turns=turns,
        flags=flags,
        overheads=overheads,
        labels=labels,
        summaries=summaries,
    )


def fuse(
    node_ids: Sequence[str], priorities: Sequence[int], ranks: Sequence[int], seqs: Sequence[int]
) -> tuple[list[int], list[int]]:
    """For each grain the index of its fusion winner, and the render order of the winners."""
    return _core.fuse(node_ids, priorities, ranks, seqs)
