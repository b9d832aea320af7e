"""`TextSplitter`: cut long text into pieces at the most natural boundary available."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import ConfigError

__all__ = ("TextSplitter",)

DEFAULT_SEPARATORS = ("\n\n", "\n", ". ", " ")


class TextSplitter:
    """Split text into pieces of at most ``max_chars`` characters.

    Each cut falls after the last paragraph break before the limit; failing that a line break,
    a sentence end, a space, and only as a last resort mid-word. Joining the pieces gives the
    text back exactly.

    Args:
        max_chars: Largest piece, in characters.
        separators: Boundaries to cut after, most natural first.

    Raises:
        ValueError: ``max_chars`` is not positive or ``separators`` holds an empty string.
    """

    def __init__(self, max_chars: int = 80_000, separators: Sequence[str] = DEFAULT_SEPARATORS):
        if max_chars <= 0:
            raise ConfigError(f"max_chars must be positive; got {max_chars!r}")
        if any(not s for s in separators):
            raise ConfigError(f"separators must be non-empty strings; got {list(separators)!r}")
        self.max_chars = max_chars
        self.separators = tuple(separators)

    def _cut(self, text: str, start: int) -> int:
        end = start + self.max_chars
        for sep in self.separators:
            at = text.rfind(sep, start + 1, end)
            if at > start:
                return at + len(sep)
        return end

    def split(self, text: str) -> list[str]:
        """The pieces of ``text``, in order (``[text]`` when it already fits)."""
        pieces: list[str] = []
        start = 0
        while len(text) - start > self.max_chars:
            end = self._cut(text, start)
            pieces.append(text[start:end])
            start = end
        pieces.append(text[start:])
        return pieces
