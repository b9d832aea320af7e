"""``fit``: one sync call from a message list to a payload within budget (DESIGN.md §11).

Warm calls are cheap: engines are cached per ``(model, budget)``, each thread keeps one event
loop, and when a call's messages extend the previous call's (an agent loop appending a turn),
the previous session is reused so only the new messages are converted, counted and scored.
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, Final

from .assemble.budget import Budget
from .engine import ContextEngine, RenderedContext, Session, check_model
from .sync import LoopRunner
from .transcript import Message
from .transcript.coerce import to_messages
from .transcript.model import copy_data

__all__ = ("fit",)

_ENGINES: OrderedDict[tuple[str, Any], ContextEngine] = OrderedDict()
_MAX_ENGINES = 16
_ENGINES_LOCK = threading.Lock()
_local = threading.local()
_ids = itertools.count()


class _Warm:
    """The last session of this thread, and the messages it holds."""

    __slots__ = ("key", "raw", "session")

    def __init__(self, key: tuple[Any, ...], session: Session, raw: list[Any]) -> None:
        self.key = key
        self.session = session
        self.raw = raw


def _engine(model: str, budget: Budget | int | None) -> ContextEngine:
    key = (model, budget if not isinstance(budget, Budget) else id(budget))
    with _ENGINES_LOCK:  # threads share the cache: another may evict ``key`` meanwhile
        engine = _ENGINES.get(key)
        if engine is None or (isinstance(budget, Budget) and engine.budget is not budget):
            engine = ContextEngine(model, budget)
            _ENGINES[key] = engine
            while len(_ENGINES) > _MAX_ENGINES:
                _ENGINES.popitem(last=False)
        _ENGINES.move_to_end(key)
        return engine


def _runner() -> LoopRunner:
    runner: LoopRunner | None = getattr(_local, "runner", None)
    if runner is None or runner.loop.is_closed():
        runner = _local.runner = LoopRunner()
    return runner


def kept_copy(item: Any) -> Any:
    """What a warm session remembers of a message it was given, to find it unchanged in the
    next call: a neutral :class:`Message` itself (frozen), a copy of anything else (a dict or
    an SDK object the caller may edit in place between two calls: a redaction must show)."""
    if type(item) is Message:
        return item
    if isinstance(item, (dict, list)):
        return copy_data(item)
    try:
        return copy.deepcopy(item)
    except Exception:  # an object that cannot be copied: never taken as unchanged
        return _UNCOPIED


#: Equal to nothing: what :func:`kept_copy` remembers of an object it could not copy.
_UNCOPIED: Final = object()


def same_prefix(old: Sequence[Any], new: Sequence[Any]) -> bool:
    """Whether ``new`` starts with messages equal to what ``old`` kept of the previous call's
    (:func:`kept_copy`; a neutral message by identity first, an SDK object by its fields)."""
    if len(new) < len(old):
        return False
    try:
        for a, b in zip(old, new, strict=False):
            if a is b:
                continue
            if a is _UNCOPIED:
                return False
            fields = getattr(a, "__dict__", None) if type(a) is type(b) else None
            if fields is not None:  # an SDK object (a pydantic model): its fields, at C speed
                if fields != b.__dict__:
                    return False
            elif a != b:
                return False
    except Exception:  # an object whose comparison raises: convert everything again
        return False
    return True


async def _fit(
    engine: ContextEngine, key: tuple[Any, ...], raw: list[Any], provider: str, options: Any
) -> RenderedContext:
    warm: _Warm | None = getattr(_local, "warm", None)
    if warm is not None and warm.key == key and same_prefix(warm.raw, raw):
        new: list[Message] = to_messages(raw[len(warm.raw) :])
        session = warm.session
    else:
        new = to_messages(raw)
        session = Session(engine, f"fit-{next(_ids)}")
        await session.start()
    _local.warm = None  # a failure below must not leave a half-updated session for reuse
    session.extend(new)
    out = await session.render(provider, **options)
    kept = warm.raw if warm is not None and warm.session is session else []
    _local.warm = _Warm(key, session, kept + [kept_copy(m) for m in raw[len(kept) :]])
    return out


def fit(
    messages: Any,
    *,
    model: str,
    budget: Budget | int | None,
    provider: str = "openai",
    **options: Any,
) -> RenderedContext:
    """Fit ``messages`` (any supported shape) into ``budget`` tokens for ``model``, in one call.

    Runs the engine's render without plugins: pairing repair and hygiene, the trim ladder
    (tool results trimmed first, whole tool-call groups removed, compaction into a summary),
    the provider's payload and the report.

    A call whose messages extend the previous call's on the same thread (same model, budget,
    provider and options: an agent loop appending a turn) goes on with that call's session,
    as a session fed the messages turn by turn would: its compaction summary carries on, so
    consecutive payloads share their prefix (and the provider's prompt cache hits). Such a
    payload may therefore differ from a first call on the same messages (where the summary's
    cut falls); both fit the budget.

    Args:
        messages: Neutral messages, OpenAI Chat / Responses, Anthropic, Gemini (dicts or SDK
            objects), LangChain messages, or a request payload dict.
        model: Model the payload is for (sets token counting).
        budget: Input tokens the payload may use (a :class:`Budget`, an int, or ``None`` for
            the model's window minus the output reserve).
        provider: ``"openai"``, ``"openai-responses"``, ``"anthropic"`` or ``"gemini"``.
        **options: Render options (``hygiene``, ``cache_breakpoints``, ``id_mode``,
            ``max_images``: at most that many images, the newest, see docs/engine.md).

    Returns:
        The :class:`RenderedContext`: ``payload``, ``tokens`` (≤ the budget), ``report``.

    Raises:
        TranscriptError: a message has an unknown shape (named by index).
        BudgetError: invalid budget, or what cannot be cut exceeds it.
        EncodingError: unknown model. AdapterError: unknown provider or option.
        ConfigTypeError: ``model`` is not a string.
    """
    check_model(model)  # before it is a cache key: a list would fail there as unhashable
    engine = _engine(model, budget)
    raw = messages if isinstance(messages, list) else list(to_messages(messages))
    key = (id(engine), provider, tuple(sorted(options.items())))
    return _runner().run(_fit, engine, key, list(raw), provider, options)
