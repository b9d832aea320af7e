"""Python `tiktoken`, fully offline, from the official rank files in ``../shared/data/bpe``.

tiktoken fetches ``<name>.tiktoken`` at run time. We answer that read from the shared copies
(byte-identical to the official files: tiktoken's own ``expected_hash`` check still runs), so the
encodings use tiktoken's own pre-tokenizer patterns and special tokens.
"""

from __future__ import annotations

import hashlib
import os
from functools import cache
from pathlib import Path

import tiktoken
import tiktoken.load

SHARED = Path(os.environ.get("CTXENGINE_SHARED", Path(__file__).resolve().parents[2] / "shared"))
BPE_DIR = SHARED / "data" / "bpe"
TRANSCRIPTS = SHARED / "data" / "transcripts"


def _read_local(blobpath: str, expected_hash: str | None = None) -> bytes:
    path = BPE_DIR / blobpath.rsplit("/", 1)[-1]
    if not path.is_file():
        raise FileNotFoundError(f"offline tiktoken: {blobpath!r} has no local copy in {BPE_DIR}")
    data = path.read_bytes()
    if expected_hash and hashlib.sha256(data).hexdigest() != expected_hash:
        raise ValueError(f"offline tiktoken: {path} does not match tiktoken's expected hash")
    return data


@cache
def encoding(name: str) -> tiktoken.Encoding:
    """The official tiktoken encoding ``name``, built without network access."""
    tiktoken.load.read_file_cached = _read_local
    return tiktoken.get_encoding(name)
