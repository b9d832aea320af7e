"""Render a transcript as a provider request payload, after hygiene."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from .._core import fresh_tree
from ..errors import AdapterError
from ..transcript.changes import Change, Report
from ..transcript.model import (
    Compaction,
    Message,
    Text,
    Transcript,
    compaction_of,
    set_renderer,
)
from ..transcript.providers import check_provider, family_of
from .adapters.anthropic import export_anthropic
from .adapters.gemini import export_gemini
from .adapters.openai import export_openai, message_dicts
from .adapters.responses import export_responses
from .cache import Breakpoint, check_breakpoints, plan_cache_breakpoints
from .hygiene import clean, validate
from .images import check_max_images, limit_images
from .memo import RenderMemo
from .warm import pieces as _pieces

__all__ = ("OPTIONS", "Rendered", "render")

#: Keyword options accepted by :func:`render` and :meth:`Transcript.to`.
OPTIONS: Final = ("hygiene", "cache_breakpoints", "cache_ttl", "id_mode", "max_images")

_EXPORTERS: Final[dict[str, Callable[[Transcript], dict[str, Any]]]] = {
    "openai": export_openai,
    "openai-responses": export_responses,
    "gemini": export_gemini,
}


@dataclass(frozen=True, slots=True)
class Rendered:
    """A rendered request and how it was made.

    Attributes:
        provider: The target provider.
        payload: The request body (``messages``/``input``/``contents`` and system part).
        transcript: The transcript actually rendered (after hygiene).
        report: What hygiene changed.
        breakpoints: Where Anthropic cache markers were placed, and why.
    """

    provider: str
    payload: dict[str, Any]
    transcript: Transcript
    report: Report = field(default_factory=Report)
    breakpoints: tuple[Breakpoint, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The manifest (everything but the payload), JSON-serializable."""
        return {
            "provider": self.provider,
            "messages": len(self.transcript),
            "hygiene": self.report.to_dict(),
            "cache_breakpoints": [b.to_dict() for b in self.breakpoints],
        }


def render(
    t: Transcript,
    provider: str,
    *,
    hygiene: bool = True,
    cache_breakpoints: int = 0,
    cache_ttl: str | None = None,
    id_mode: str | None = None,
    max_images: int | None = None,
    memo: RenderMemo | None = None,
) -> Rendered:
    """Render ``t`` for ``provider``.

    Args:
        t: The transcript.
        provider: ``"openai"``, ``"openai-responses"``, ``"anthropic"`` or ``"gemini"``.
        hygiene: Run :func:`ctxengine.hygiene.clean` first (default). With False the
            transcript is rendered as is and may be rejected by the provider.
        cache_breakpoints: Anthropic only: place up to this many (≤ 4) ``cache_control``
            markers, see :func:`~ctxengine.transcript.plan_cache_breakpoints`. Ignored for the
            other providers, whose prompt caching is automatic.
        cache_ttl: Anthropic only: ``"5m"`` or ``"1h"`` for the markers (default: the API's).
        id_mode: Force tool-call id sanitizing (``"strict"`` or ``"strict9"``).
        max_images: With hygiene, the most image parts the payload carries, and for
            Anthropic its inline PDFs' pages with them (None: the provider's limit,
            :data:`~ctxengine.transcript.providers.IMAGE_LIMITS`); the newest are kept, older
            ones become a text placeholder (a PDF as a whole), each reported
            (:func:`~ctxengine.inject.images.limit_images`). It replaces the provider's limit:
            lower it for a gateway that takes fewer, raise it for a model that takes more.
        memo: A session's per-message memo: checks and exported dicts of messages rendered
            before are reused (the payload is the same as without it).

    Raises:
        AdapterError: unknown provider or invalid option, or (a bug) a transcript that hygiene
            left invalid; the message lists the problems.
    """
    check_provider(provider)
    check_hygiene(hygiene)
    if cache_ttl not in (None, "5m", "1h"):
        raise AdapterError(f"cache_ttl is {cache_ttl!r}; expected None, '5m' or '1h'")
    if id_mode not in (None, "strict", "strict9"):
        raise AdapterError(f"id_mode is {id_mode!r}; expected None, 'strict' or 'strict9'")
    check_max_images(max_images)
    # a session's render (``memo`` given) carried its compactions already, when it had any
    # (:func:`~ctxengine.inject.turn.inject`): no look through every message on every turn
    t, carried = carry_compactions(t, provider) if memo is None else (t, ())
    if hygiene:  # before the rest: what it changes is a message of the same shape
        t, cut = limit_images(t, provider, max_images, memo)
        carried += cut
    report = Report()
    marks = cache_breakpoints if provider == "anthropic" else 0
    if hygiene and memo is not None:
        check_breakpoints(cache_breakpoints)
        key = (provider, id_mode, t.source_format)
        record = memo.warm.reuse(t, key, marks, cache_ttl)
        if record is None:
            cleaned, report = _clean(t, provider, id_mode, memo)
            table = memo.table("pieces", provider, t.source_format)
            source = t

            def make(m: Message) -> list[dict[str, Any]]:
                return _pieces(provider, m, family_of(m, source), {})

            record = memo.warm.build(
                t,
                cleaned,
                report,
                key,
                marks,
                cache_ttl,
                lambda ms: table.many(ms, message_dicts if provider == "openai" else make),
            )
            t = cleaned
        if record is not None:
            return Rendered(
                provider,
                record.payload,
                record.cleaned,
                _with(carried, record.report),
                record.breakpoints,
            )
    elif hygiene:
        t, report = _clean(t, provider, id_mode, memo)
    # The exporters share what they can with the transcript (a tool call's arguments dict) and
    # the memo (an OpenAI message's dict): the caller may edit the payload at any depth, so
    # every dict and list in it is made its own (as the warm path's payloads are).
    if provider != "anthropic":
        plan_cache_breakpoints(t, cache_breakpoints)  # validates the option
        payload = export_openai(t, memo) if provider == "openai" else _EXPORTERS[provider](t)
        return Rendered(provider, fresh_tree(payload), t, _with(carried, report))
    plan = tuple(plan_cache_breakpoints(t, cache_breakpoints)) if cache_breakpoints else ()
    payload = export_anthropic(t, breakpoints={b.index for b in plan}, cache_ttl=cache_ttl)
    return Rendered(provider, fresh_tree(payload), t, _with(carried, report), plan)


def _with(changes: tuple[Change, ...], report: Report) -> Report:
    return Report(changes + report.changes, report.id_map) if changes else report


#: ``Message.meta`` key of a summary (:data:`ctxengine.compaction.facts.SUMMARY_META`, named
#: here: the compaction layer imports the transcript layer, which imports this module).
SUMMARY_META: Final = "ctxengine_summary"

#: Provider compaction messages made for other providers, by the message they stand for (a
#: session renders the same message objects turn after turn: the same stand-in each time).
_carried: dict[int, tuple[Message, Message | None]] = {}


def carry_compactions(
    t: Transcript, provider: str, *, drop: bool = True
) -> tuple[Transcript, tuple[Change, ...]]:
    """``t`` as ``provider`` can take its provider compactions
    (:class:`~ctxengine.transcript.model.Compaction`), and what was changed.

    The provider that made one is sent it verbatim, in its place. Another is sent Anthropic's
    readable summary as the summary of the earlier conversation (a user message, as the
    summaries compaction writes: never system authority), and nothing of an OpenAI item,
    whose ``encrypted_content`` only OpenAI can read (nor of a failed Anthropic compaction,
    which holds no summary): that is reported (``dropped_compaction``). With ``drop=False``
    those stay (the engine's inject drops them with the other messages that send nothing)."""
    if not any(compaction_of(m) is not None for m in t.messages):
        return t, ()
    out: list[Message] = []
    changes: list[Change] = []
    for i, m in enumerate(t.messages):
        c = compaction_of(m)
        if c is None or c.provider == provider or (not drop and not c.text):
            out.append(m)
            continue
        entry = _carried.get(id(m))
        if entry is None or entry[0] is not m:
            made = None
            if c.text:
                made = Message("user", (Text(c.text),), meta={SUMMARY_META: True})
            entry = (m, made)
            if len(_carried) > 1024:
                _carried.clear()
            _carried[id(m)] = entry
        if entry[1] is not None:
            out.append(entry[1])
            what = f"{c.provider} compaction sent as the summary of the earlier conversation"
            changes.append(Change("carry_compactions", "compaction_as_summary", i, what))
        else:
            detail = dropped_compaction(c, provider)
            changes.append(Change("carry_compactions", "dropped_compaction", i, detail))
    return t.replace(out), tuple(changes)


def dropped_compaction(c: Compaction, provider: str) -> str:
    """Why provider compaction ``c`` is not sent to ``provider`` (a report's detail)."""
    why = (
        "its encrypted_content is readable by OpenAI Responses only"
        if c.provider == "openai-responses"
        else "a failed compaction: it holds no summary"
    )
    return f"{c.provider} compaction {c.item.get('id')!r} not sent to {provider}: {why}"


def _clean(
    t: Transcript, provider: str, id_mode: str | None, memo: RenderMemo | None
) -> tuple[Transcript, Report]:
    """:func:`clean`, then :func:`validate` unless every rule is known to hold."""
    cleaned, report = clean(t, provider, id_mode=id_mode, memo=memo)  # type: ignore[arg-type]
    problems = validate(cleaned, provider) if _recheck(cleaned, t, report) else []
    if problems:
        listed = "; ".join(f"[{p.index}] {p.code}: {p.message}" for p in problems[:5])
        raise AdapterError(f"hygiene left {len(problems)} problem(s) for {provider}: {listed}")
    return cleaned, report


#: Changes that only remove what a provider rejects (an empty message, the calls of a failed
#: turn, an orphan or duplicate result): the rest of the transcript is left as it was checked.
_REMOVALS: Final = frozenset(
    {"dropped_empty", "dropped_call", "dropped_message", "dropped_orphan", "dropped_duplicate"}
)


def _recheck(cleaned: Transcript, original: Transcript, report: Report) -> bool:
    """Whether ``cleaned`` is worth a second, whole-transcript :func:`validate`.

    Not when ``clean`` returned its input itself (every rule already held) or made only
    removals; renames, synthetic or moved results, merges and new turns are checked again.
    """
    if cleaned is original:
        return False
    return any(c.action not in _REMOVALS for c in report.changes)


def check_hygiene(hygiene: object) -> None:
    """Raise :class:`AdapterError` unless ``hygiene`` is True or False (a string such as
    ``"no"`` is truthy, and ran hygiene)."""
    if type(hygiene) is not bool:
        raise AdapterError(
            f"hygiene is {hygiene!r} ({type(hygiene).__name__}); expected True or False"
        )


def check_options(options: dict[str, Any]) -> None:
    """Raise :class:`AdapterError` for an option :func:`render` does not know (or a
    ``max_images`` that is not None or an int >= 0, a ``hygiene`` that is not a bool, a
    ``cache_breakpoints`` that is not an int from 0 to 4)."""
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise AdapterError(f"unknown option(s) {unknown}; expected any of {list(OPTIONS)}")
    check_max_images(options.get("max_images"))
    if "hygiene" in options:
        check_hygiene(options["hygiene"])
    if "cache_breakpoints" in options:
        check_breakpoints(options["cache_breakpoints"])


def _payload(t: Transcript, provider: str, options: dict[str, Any]) -> dict[str, Any]:
    check_options(options)
    return render(t, provider, **options).payload


set_renderer(_payload)
