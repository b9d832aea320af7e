"""`redaction`: secrets and e-mail addresses become ``[REDACTED:<kind>]`` before rendering.

Redacting other plugins' grains is a privileged ability, so this plugin is ``dangerous``: the
engine must consent, e.g. ``ContextEngine(allow_dangerous={"redaction"})``. :class:`Redactor`
is also usable on its own (e.g. on the user message before it reaches the scene).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from typing import Any, Final

from ..collect.events import BeforeRender
from ..collect.scene import ContextScene
from ..errors import PluginError
from ..grain import ContextGrain

__all__ = ("DEFAULT_PATTERNS", "RedactionProvider", "Redactor")

DEFAULT_PATTERNS: Final[dict[str, str]] = {
    # Multi-line blocks first, so their inner lines are not matched piecemeal.
    "private_key": (
        r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----[\s\S]*?"
        r"-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"
    ),
    "bearer_token": r"(?i)(?<=\bbearer )[A-Za-z0-9\-._~+/]{8,}=*",
    "api_key": r"\bsk-(?:proj-|ant-(?:api\d\d-)?|live-|test-)?[A-Za-z0-9_\-]{20,}",
    "aws_access_key": r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b",
    "github_token": r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})\b",
    "slack_token": r"\bxox[abposr]-[A-Za-z0-9\-]{10,}",
    "email": r"\b[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)*\.[A-Za-z]{2,}\b",
}
"""Kind -> regular expression, applied in this order."""

_KIND = re.compile(r"[a-z][a-z0-9_]*")


class Redactor:
    """Replaces matches of each pattern by ``[REDACTED:<kind>]``.

    Args:
        extra_patterns: More ``kind -> pattern`` (str or compiled), applied after the defaults.
        include_defaults: Use :data:`DEFAULT_PATTERNS` (set ``False`` to use only yours).

    Raises:
        PluginError: a kind is not a lowercase identifier or a pattern does not compile.
    """

    def __init__(
        self,
        extra_patterns: Mapping[str, str | re.Pattern[str]] | None = None,
        *,
        include_defaults: bool = True,
    ) -> None:
        patterns: dict[str, str | re.Pattern[str]] = (
            dict(DEFAULT_PATTERNS) if include_defaults else {}
        )
        patterns.update(extra_patterns or {})
        self.patterns: list[tuple[str, re.Pattern[str]]] = []
        for kind, pattern in patterns.items():
            if not _KIND.fullmatch(kind):
                raise PluginError(
                    f"redaction kind must be a lowercase identifier; got {kind!r}",
                    plugin="redaction",
                )
            try:
                compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
            except re.error as exc:
                raise PluginError(
                    f"redaction pattern for {kind!r} does not compile: {exc}", plugin="redaction"
                ) from exc
            self.patterns.append((kind, compiled))

    def redact_text(self, text: str) -> tuple[str, Counter[str]]:
        """Return the redacted text and how many matches of each kind were replaced."""
        counts: Counter[str] = Counter()
        for kind, pattern in self.patterns:
            text, n = pattern.subn(f"[REDACTED:{kind}]", text)
            if n:
                counts[kind] += n
        return text, counts

    def redact(self, value: Any, counts: Counter[str] | None = None) -> Any:
        """Redact every string inside ``value`` (str, or nested lists/dicts); dict keys kept."""
        counts = counts if counts is not None else Counter()
        if isinstance(value, str):
            text, found = self.redact_text(value)
            counts.update(found)
            return text
        if isinstance(value, list):
            return [self.redact(v, counts) for v in value]
        if isinstance(value, dict):
            return {k: self.redact(v, counts) for k, v in value.items()}
        return value


class RedactionProvider:
    """Redact API keys, bearer tokens, private keys and e-mail addresses in every grain.

    Runs ``on_before_render`` late (priority 900) so it sees grains added by other handlers.
    Needs the engine's consent (it changes other plugins' grains): ``dangerous = True``.
    Each changed grain gets ``meta["redactions"] = {kind: count}``.

    Args:
        extra_patterns: More ``kind -> pattern`` to redact.
        include_defaults: Use the built-in patterns.
        priority: Plugin priority (order among ``on_before_render`` handlers).

    Raises:
        PluginError: as :class:`Redactor`.
    """

    name = "redaction"
    version = "1.0.0"
    dangerous = True

    def __init__(
        self,
        extra_patterns: Mapping[str, str | re.Pattern[str]] | None = None,
        *,
        include_defaults: bool = True,
        priority: int = 900,
    ) -> None:
        self.redactor = Redactor(extra_patterns, include_defaults=include_defaults)
        self.priority = priority
        self.enabled = True

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Nothing per turn: work happens in :meth:`on_before_render`."""
        return []

    def redact_text(self, text: str) -> str:
        """Redact one text; the engine applies it to the user message plugins see."""
        result = self.redactor.redact(text, Counter())
        return result if isinstance(result, str) else text

    def on_before_render(self, event: BeforeRender) -> None:
        """Redact the content of every grain in ``event.tree`` in place."""
        for grain in event.tree:
            if not isinstance(grain, ContextGrain):
                continue
            counts: Counter[str] = Counter()
            redacted = self.redactor.redact(grain.content, counts)
            if counts:
                grain.content = redacted
                previous = grain.meta.get("redactions", {})
                merged = Counter(previous) if isinstance(previous, dict) else Counter()
                merged.update(counts)
                grain.meta["redactions"] = dict(sorted(merged.items()))
