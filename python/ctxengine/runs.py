"""Run-length encodings of columns, for the JSON of session states and snapshots.

A long session repeats itself in its columns: every history item dropped by ``max_turns`` has
the same origin, window, decision, stage and reason, and node ids ``hist.0, hist.1, ...``
follow each other. Written one value per row, a snapshot grew with every item the session ever
had; written as runs, it grows with the number of changes between rows.

Both encodings are plain JSON and canonical (one encoding per column, every run maximal):

- :func:`encode_values`: each element is a value (one row) or ``[value, count]`` (``count >= 2``
  equal rows in a row). Values are JSON scalars (str, int, float, bool, null); ``1``, ``1.0``
  and ``true`` are different values.
- :func:`encode_ids`: each element is a node id (one row) or ``[prefix, start, count]``
  (``count >= 2`` ids ``prefix + str(start + i)``, ``i < count``).

The decoders check every element and raise :class:`ValueError` naming the first bad one. They
refuse more than ``limit`` rows before expanding a run, so a damaged count cannot exhaust memory
or time; a caller that knows how many rows the data can hold passes that (a session state's
``limited``: its history items). The callers turn the error into their own (``ConfigError``
for a state, ``StoreError`` for a snapshot) naming the field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

__all__ = ("LIMIT", "decode_ids", "decode_values", "encode_ids", "encode_values")

_SCALARS: Final = (str, int, float, bool, type(None))
#: Most rows a decoder gives by default (a session of millions of history items has more).
LIMIT: Final = 10_000_000
#: A node id ending in a canonical decimal number (no leading zero): ``hist.12`` → ``hist.``, 12.
_NUMBERED: Final = re.compile(r"(.*?)(0|[1-9][0-9]*)")


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def encode_values(column: Sequence[Any]) -> list[Any]:
    """``column`` (JSON scalars) as runs: a value alone, or ``[value, count]`` for a run of
    two or more equal values."""
    out: list[Any] = []
    n = len(column)
    i = 0
    while i < n:
        value = column[i]
        j = i + 1
        while j < n and _same(column[j], value):
            j += 1
        out.append(value if j - i == 1 else [value, j - i])
        i = j
    return out


def decode_values(runs: Any, limit: int = LIMIT) -> list[Any]:
    """The column :func:`encode_values` wrote as ``runs``.

    Raises:
        ValueError: ``runs`` is not a list of scalars and ``[scalar, count >= 2]`` pairs (the
            message names the first bad element), or holds more than ``limit`` rows.
    """
    if not isinstance(runs, list):
        raise ValueError(f"{_short(runs)} is not a list of runs")  # internal: caught
    if len(runs) > limit:
        raise ValueError(f"{len(runs)} runs; expected at most {limit} rows")  # internal: caught
    out: list[Any] = []
    for run in runs:
        if isinstance(run, _SCALARS):
            out.append(run)
            continue
        if (
            not isinstance(run, list)
            or len(run) != 2
            or not isinstance(run[0], _SCALARS)
            or not _count(run[1])
        ):
            raise ValueError(  # internal: caught
                f"run {_short(run)} is not a value or [value, count >= 2]"
            )
        _room(out, run[1], limit)
        out.extend([run[0]] * run[1])
    return out


def encode_ids(ids: Sequence[str]) -> list[Any]:
    """Node ids as runs: an id alone, or ``[prefix, start, count]`` for two or more ids
    numbered one after the other (``hist.7, hist.8, hist.9`` → ``["hist.", 7, 3]``)."""
    out: list[Any] = []
    run: list[Any] | None = None  # [prefix, start, count] being extended
    for node_id in ids:
        m = _NUMBERED.fullmatch(node_id)
        if m is not None and run is not None:
            prefix, number = m.group(1), int(m.group(2))
            if prefix == run[0] and number == run[1] + run[2]:
                run[2] += 1
                continue
        if run is not None:
            out.append(run if run[2] > 1 else run[0] + str(run[1]))
        run = [m.group(1), int(m.group(2)), 1] if m is not None else None
        if run is None:
            out.append(node_id)
    if run is not None:
        out.append(run if run[2] > 1 else run[0] + str(run[1]))
    return out


def decode_ids(runs: Any, limit: int = LIMIT) -> list[str]:
    """The node ids :func:`encode_ids` wrote as ``runs``.

    Raises:
        ValueError: ``runs`` is not a list of ids and ``[prefix, start >= 0, count >= 2]``
            triples (the message names the first bad element), or holds more than ``limit``
            rows.
    """
    if not isinstance(runs, list):
        raise ValueError(f"{_short(runs)} is not a list of node id runs")  # internal: caught
    if len(runs) > limit:
        raise ValueError(f"{len(runs)} runs; expected at most {limit} rows")  # internal: caught
    out: list[str] = []
    for run in runs:
        if isinstance(run, str):
            out.append(run)
            continue
        if (
            not isinstance(run, list)
            or len(run) != 3
            or not isinstance(run[0], str)
            or not _count(run[1], 0)
            or not _count(run[2])
        ):
            raise ValueError(  # internal: caught
                f"run {_short(run)} is not a node id or [prefix, start, count >= 2]"
            )
        prefix, start, count = run
        _room(out, count, limit)
        out.extend(f"{prefix}{n}" for n in range(start, start + count))
    return out


def _room(out: list[Any], count: int, limit: int) -> None:
    if len(out) + count > limit:
        raise ValueError(  # internal: caught
            f"runs of more than {limit} rows (a run of {count} after {len(out)})"
        )


def _count(x: Any, least: int = 2) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= least


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
