"""`ContextEngine` and `Session`: collect → assemble (Rust) → inject (DESIGN.md §1).

A session keeps its grains, counts and scores inside a Rust :class:`~ctxengine._core.Assembly`
between renders, so a warm render moves only what changed across the boundary: new messages,
and the grains plugins produced for this turn.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import operator
import threading
import time
import warnings
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterable,
    Mapping,
    Sequence,
)
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio

from . import _core
from .assemble.budget import Budget
from .assemble.compact import compact_now
from .assemble.guard import PruneSettings, max_tool_result_chars, truncate_tool_result
from .assemble.history import HistoryBuilder
from .assemble.pipeline import assemble
from .collect.dispatch import SessionDispatcher
from .collect.events import SessionClose, SessionStart, UserMessage
from .collect.events import ToolResult as ToolResultEvent
from .collect.faults import PluginFault
from .collect.registry import PluginEntry, Registry
from .collect.turn import SESSION_ORIGIN, collect, redacted_user_text
from .collect.wake import CrossLoopLock
from .compaction import CompactionConfig, CompactionResult
from .config import RenderConfig
from .errors import (
    BudgetError,
    ConfigError,
    ConfigTypeError,
    ContextOverflowError,
    CtxEngineError,
    EncodingError,
    GrainError,
    SessionIdError,
    StoreConflictError,
    StoreError,
    TranscriptError,
)
from .grain import ContextGrain
from .inject.images import count_images
from .inject.render import check_options
from .inject.turn import RenderedContext, Request, inject
from .overflow import ProviderErrorInfo, classify_provider_error
from .state import SessionState, TurnLog, entering
from .store.base import Entry, SnapshotInfo, Store, compact_json, conflict_error
from .store.codec import message_to_json
from .store.session_io import (
    MESSAGE,
    REWRITE,
    Resumed,
    record_messages,
    record_rewrite,
    resume,
    snapshot_render,
)
from .store.snapshot import core_memory, memory_texts
from .store.writer import SnapshotWriter
from .summarize import ExtractiveSummarizer, Summarizer
from .tokens import get_tokenizer
from .transcript.coerce import to_messages
from .transcript.model import Image, Message, Text, ToolCall, ToolResult, Transcript
from .transcript.providers import check_provider

if TYPE_CHECKING:
    from .sync import SyncSession

__all__ = ("ContextEngine", "RenderedContext", "Session")

_log = logging.getLogger("ctxengine.store")


#: What the engine calls on its store: the methods of the :class:`~ctxengine.Store` protocol
#: (a store of one's own needs these; ``problems``, a list of what was skipped while reading,
#: is optional).
_STORE_METHODS: Final = tuple(
    name for name, value in vars(Store).items() if not name.startswith("_") and callable(value)
)


def _kind(value: object) -> str:
    return f"{value!r} ({type(value).__name__})"


def check_model(model: object) -> None:
    """Refuse a model that is not a name (``ContextEngine(123)``, ``fit(model=123)``), which
    would otherwise fail deep in the budget or tokenizer with an AttributeError.

    Raises:
        ConfigTypeError: ``model`` is not a string.
    """
    if not isinstance(model, str):
        raise ConfigTypeError(f"model is {_kind(model)}; expected a model name such as 'gpt-4o'")


#: The tokenizer's hint for an unknown model names its own keyword (``encoding=``); the engine
#: and ``fit`` take the encoding as the model, and then need a budget (no window is known).
_TOKENIZER_HINT: Final = " Pass encoding="
_ENGINE_HINT: Final = (
    ' Pass model="o200k_base" or model="cl100k_base" for any other model, with its budget in'
    " tokens (its window is not known)"
)


def check_tokenizer(model: str) -> None:
    """Refuse a model the tokenizer does not know before its budget is looked up, with advice
    the engine takes (``ContextEngine("llama-3", 8000)`` said to pass ``encoding=``, which it
    has no argument for; without a budget it said to pass one, which then met that hint).

    Raises:
        EncodingError: ``model`` is neither a known model family nor an encoding.
    """
    try:
        get_tokenizer(model)
    except EncodingError as exc:
        text = str(exc)
        cut = text.find(_TOKENIZER_HINT)
        if cut < 0:
            raise
        raise EncodingError(text[:cut] + _ENGINE_HINT) from None


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_timeout(name: str, value: object) -> None:
    """Refuse a timeout that is not None or a number of seconds >= 0 (``timeout="x"`` was
    taken, and failed later or never: a snapshot already written returned at once).

    Raises:
        ConfigTypeError: not a number. ConfigError: negative or NaN.
    """
    if value is None:
        return
    expected = "expected a number of seconds >= 0 or None"
    if not _is_number(value):
        raise ConfigTypeError(f"{name} is {_kind(value)}; {expected}")
    if not value >= 0:  # type: ignore[operator]
        raise ConfigError(f"{name} is {value!r}; {expected}")


def _check_settings(
    *,
    plugins: object,
    summarizer: object,
    allow_dangerous: object,
    plugin_timeout: object,
    max_failures: object,
    weights: object,
    prune: object,
    store: object,
    compaction: object,
    max_images: object = None,
) -> tuple[float, float, float, float]:
    """Check :class:`ContextEngine`'s settings where they are given: most are only read at
    the first render (or never, for ``summarizer`` until a compaction), where a wrong one
    failed with a raw TypeError or AttributeError far from its cause. Returns the weights as
    the tuple of four floats the core takes (any sequence of four numbers is accepted).

    Raises:
        ConfigTypeError: a setting of the wrong kind. ConfigError: one out of its range.
    """
    if isinstance(plugins, (str, bytes)) or not isinstance(plugins, Iterable):
        raise ConfigTypeError(f"plugins is {_kind(plugins)}; expected an iterable of plugins")
    if summarizer is not None and not callable(getattr(summarizer, "summarize", None)):
        raise ConfigTypeError(
            f"summarizer is {_kind(summarizer)}; expected an object with an async "
            "summarize(messages, *, instructions, max_tokens) method, or None"
        )
    if not isinstance(allow_dangerous, bool) and not (
        isinstance(allow_dangerous, Collection) and all(isinstance(n, str) for n in allow_dangerous)
    ):
        raise ConfigTypeError(
            f"allow_dangerous is {_kind(allow_dangerous)}; expected a bool or plugin names"
        )
    if plugin_timeout is not None:
        if not _is_number(plugin_timeout):
            raise ConfigTypeError(
                f"plugin_timeout is {_kind(plugin_timeout)}; "
                "expected a positive number of seconds or None"
            )
        if not plugin_timeout > 0:  # type: ignore[operator]
            raise ConfigError(
                f"plugin_timeout is {plugin_timeout!r}; expected a positive number of seconds "
                "or None"
            )
    if not isinstance(max_failures, int) or isinstance(max_failures, bool):
        raise ConfigTypeError(f"max_failures is {_kind(max_failures)}; expected an int >= 1")
    if max_failures < 1:
        raise ConfigError(f"max_failures is {max_failures!r}; expected an int >= 1")
    four = "expected four numbers (tool call, user input, recency, structural change)"
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence):
        raise ConfigTypeError(f"weights is {_kind(weights)}; {four}")
    if len(weights) != 4 or not all(_is_number(w) and math.isfinite(w) for w in weights):
        raise ConfigError(f"weights is {weights!r}; {four}")
    for name, value, kind in (
        ("prune", prune, PruneSettings),
        ("compaction", compaction, CompactionConfig),
    ):
        if value is not None and not isinstance(value, kind):
            raise ConfigTypeError(f"{name} is {_kind(value)}; expected a {kind.__name__} or None")
    if max_images is not None:
        expected = "expected None (the provider's limit) or an int >= 0"
        if not isinstance(max_images, int) or isinstance(max_images, bool):
            raise ConfigTypeError(f"max_images is {_kind(max_images)}; {expected}")
        if max_images < 0:
            raise ConfigError(f"max_images is {max_images!r}; {expected}")
    if store is not None and not all(callable(getattr(store, m, None)) for m in _STORE_METHODS):
        raise ConfigTypeError(
            f"store is {_kind(store)}; expected a Store (FileStore(path), RedisStore(url), "
            "InMemoryStore()) or None"
        )
    w0, w1, w2, w3 = (float(w) for w in weights)
    return (w0, w1, w2, w3)


class ContextEngine:
    """Holds the model, budget, plugin registry and summarizer; opens sessions.

    Args:
        model: Model the context is built for (sets token counting and the default budget).
        budget: A :class:`Budget`, a total token count, or ``None`` for the model's window.
        plugins: Providers to register now.
        summarizer: Used by compaction; default :class:`ExtractiveSummarizer` (offline).
        allow_dangerous: Consent for privileged plugin abilities: bool or plugin names.
        plugin_timeout: Seconds each plugin call may take.
        max_failures: Consecutive failures after which a plugin is quarantined for a session.
        weights: Step-score weights (has tool call, explicit user input, recency, structural
            change). The default puts explicit user input (a request or feedback) above the
            hard-trim threshold (0.6): user turns are summarized by compaction, never dropped
            silently, while old tool steps go first.
        prune: Soft-trim sizes and protected tail of the engine's ladder
            (``soft_trim_max_chars``, ``soft_trim_head_chars``, ``keep_last_assistants`` of
            :class:`~ctxengine.guard.PruneSettings`, passed to the Rust assembly), and the
            ladder's prune options run in every render when set: ``allow``/``deny`` tool-name
            globs, ``ttl_seconds`` (prune only once the prompt cache expired), ``ttl_turns``
            (clear results older than the last *n* user turns) and ``max_turns`` (keep the
            last *n* user turns); see :mod:`ctxengine.assemble.prune`.
        store: A :class:`~ctxengine.Store` (e.g. :class:`~ctxengine.FileStore`): every message
            added is appended to it, every render snapshots into it in the background, and
            :meth:`session` resumes a session it already holds (see docs/store.md).
        compaction: How compaction runs (:class:`~ctxengine.compaction.CompactionConfig`:
            memory folder, rules file, timeout, protected tail); the ladder's step 3 and
            :meth:`Session.compact` use it.
        max_images: The most image parts a render sends; the newest are kept, older ones
            become a text placeholder (reported in the render's hygiene report). None: the
            provider's documented limit (:data:`ctxengine.transcript.providers.IMAGE_LIMITS`:
            500 for OpenAI, 100 for Anthropic, 3,000 for Gemini). A render's ``max_images``
            option wins over it. See docs/engine.md, "Images per request".

    Raises:
        EncodingError: unknown model. BudgetError: invalid budget. ConfigError: another
            setting out of its range (a ``plugin_timeout`` or ``max_failures`` below 1...);
            :class:`~ctxengine.errors.ConfigTypeError` (also a ``TypeError``) when one is of
            the wrong kind. Checked here, so a bad setting fails where it is written, not at
            a render.
    """

    def __init__(
        self,
        model: str = "gpt-4o",
        budget: Budget | int | None = None,
        *,
        plugins: Iterable[Any] = (),
        summarizer: Summarizer | None = None,
        allow_dangerous: bool | Collection[str] = False,
        plugin_timeout: float | None = 2.0,
        max_failures: int = 3,
        weights: tuple[float, float, float, float] = (0.25, 0.65, 0.35, 0.1),
        prune: PruneSettings | None = None,
        store: Store | None = None,
        compaction: CompactionConfig | None = None,
        max_images: int | None = None,
    ) -> None:
        check_model(model)
        check_tokenizer(model)
        weights = _check_settings(
            plugins=plugins,
            summarizer=summarizer,
            allow_dangerous=allow_dangerous,
            plugin_timeout=plugin_timeout,
            max_failures=max_failures,
            weights=weights,
            prune=prune,
            store=store,
            compaction=compaction,
            max_images=max_images,
        )
        self.model = model
        self.budget = budget if isinstance(budget, Budget) else Budget(total=budget)
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self.config = RenderConfig.build(
            model,
            self.budget,
            self.summarizer,
            weights=weights,
            max_result_chars=max_tool_result_chars(self.budget.resolve(model)),
            prune=prune or PruneSettings(),
            compaction=compaction or CompactionConfig(),
            max_images=max_images,
        )
        self.compaction = self.config.compaction
        self.tokens_total = self.config.tokens_total
        self.tokenizer = self.config.tokenizer
        self.registry = Registry(allow_dangerous=allow_dangerous)
        self.allow_dangerous = allow_dangerous
        self.plugin_timeout = plugin_timeout
        self.max_failures = max_failures
        self.weights = weights
        self.windows = list(self.config.windows)
        # Held while plugins are set up; sessions of every event loop and thread wait on it
        # (an anyio.Lock would hang a session woken from another thread).
        self._setup_lock = CrossLoopLock()
        self.setup_faults: list[dict[str, Any]] = []
        self.store = store
        self.writer: SnapshotWriter | None = SnapshotWriter(store) if store is not None else None
        for plugin in plugins:
            self.register(plugin)

    def register(self, provider: Any) -> Any:
        """Register a plugin; see :meth:`ctxengine.registry.Registry.register`.

        Raises:
            PluginError: the plugin is invalid or refused (the message names it).
        """
        return self.registry.register(provider)

    def load_plugins(self, directory: str | Path, *, strict: bool = True) -> list[PluginEntry]:
        """Load every plugin folder (holding ``manifest.json``) under ``directory``.

        With ``strict=False`` a refused folder is recorded in ``registry.refused()`` instead.

        Raises:
            PluginError: a manifest is invalid (nothing from it is imported).
        """
        return self.registry.load_plugins(directory, strict=strict)

    def new_assembly(self) -> _core.Assembly:
        """A fresh Rust assembly configured from the budget."""
        return self.config.new_assembly()

    def new_state(self, session_id: str) -> SessionState:
        """An empty :class:`SessionState` for a new session."""
        return SessionState(session_id, self.new_assembly(), self._builder())

    def state_from_json(
        self, data: dict[str, Any], *, texts: Mapping[str, str] | None = None
    ) -> SessionState:
        """The :class:`SessionState` that :meth:`SessionState.to_json` wrote, with a fresh
        assembly (see :meth:`SessionState.from_json`; ``texts``: the ``core_memory`` of the
        snapshot the state comes from)."""
        return SessionState.from_json(data, self.new_assembly(), self._builder(), texts=texts)

    def _builder(self) -> HistoryBuilder:
        builder = HistoryBuilder()
        builder.max_result_chars = self.config.max_result_chars
        return builder

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every snapshot submitted so far is written; False on timeout.

        Raises:
            ConfigTypeError / ConfigError: ``timeout`` is not None or a number >= 0.
        """
        _check_timeout("timeout", timeout)
        return self.writer.flush(timeout) if self.writer is not None else True

    def close(self, timeout: float | None = None) -> None:
        """Write the queued snapshots and stop the snapshot thread (the store stays open).

        Raises:
            ConfigTypeError / ConfigError: ``timeout`` is not None or a number >= 0.
        """
        _check_timeout("timeout", timeout)
        if self.writer is not None:
            self.writer.close(timeout)

    async def load(self, session_id: str, *, snapshot: str | None = None) -> Session | None:
        """The session ``store`` holds under ``session_id`` (not started: no events fire), or
        None when it holds nothing of it.

        The messages come from the transcript's current branch; the state from the latest
        complete snapshot when it covers part of that branch (the messages after it are
        replayed), else it is rebuilt from the messages. Torn or damaged lines and damaged
        snapshots are skipped by the store (``store.problems``, and a warning on the
        ``ctxengine.store`` logger naming the file and line); those met while loading are also
        ``store``/``resume`` warning faults in the first render's report. The messages around a
        damaged line are kept; when one before the latest snapshot is lost, the state is
        rebuilt from the intact messages (the snapshot's state counts them by position).

        With ``snapshot`` (a :attr:`SnapshotInfo.id <ctxengine.store.SnapshotInfo.id>`), the
        session as it was at that snapshot instead: its state and the messages up to its
        ``leaf_id`` (later messages, on any branch, are left out).

        Raises:
            StoreError: no store, it failed, or ``snapshot`` is not an intact snapshot of the
                session.
        """
        store = self.store
        if store is None:
            raise StoreError(f"cannot load session {session_id!r}: the engine has no store")
        problems: list[Any] = getattr(store, "problems", [])  # optional for a store of one's own
        seen = len(problems)
        back: Resumed = await anyio.to_thread.run_sync(
            lambda: resume(store, session_id, snapshot_id=snapshot)
        )
        if not back.exists:
            return None
        state: SessionState | None = None
        met = [p for p in problems[seen:] if p.session_id == session_id]
        met += [p for p in back.problems if not any(p is q for q in met)]
        faults = [PluginFault("store", "resume", "invalid", str(p), "warning") for p in met]
        data = back.state
        if isinstance(data, dict) and back.covered:
            try:
                state = SessionState.from_json(
                    data,
                    self.new_assembly(),
                    self._builder(),
                    messages=back.messages[: back.covered],
                    texts=core_memory(back.snapshot) if back.snapshot is not None else None,
                )
            except (ValueError, KeyError, TypeError, CtxEngineError) as exc:
                msg = f"snapshot state of {session_id!r} unusable, rebuilt from messages: {exc}"
                faults.append(PluginFault("store", "restore", "invalid", msg, "warning"))
                state = None
        if state is None:
            state = self.new_state(session_id)
            for message in back.messages:
                state.append(message)
        else:
            for message in back.messages[back.covered :]:
                state.append(message)
        state.closed = False
        state.faults.extend(faults)
        session = Session.from_state(self, state)
        session.leaf_id = back.leaf_id
        return session

    async def restore(
        self,
        session_id: str,
        *,
        provider: str = "openai",
        snapshot: str | None = None,
        **options: Any,
    ) -> RenderedContext:
        """Rebuild ``session_id`` from the store (see :meth:`load`) and re-run assembly at
        this engine's budget: after a crash, the same payload as the last render before it
        (plus whatever messages were stored after that render). ``snapshot`` restores the
        session as it was at that snapshot: the same payload as the render that wrote it.

        Nothing is written to the store (no snapshot of this render).

        Raises:
            StoreError: no store, the store failed, it holds nothing of ``session_id``, or
                ``snapshot`` is not an intact snapshot of it.
        """
        session = await self.load(session_id, snapshot=snapshot)
        if session is None:
            raise StoreError(f"the store holds no session {session_id!r}")
        session.persist = False
        return await session.render(provider, **options)

    @contextlib.asynccontextmanager
    async def session(self, session_id: str) -> AsyncIterator[Session]:
        """Open a session; it is closed (``on_session_close``) when the block exits.

        With a store, a session the store already holds is resumed (see :meth:`load`; no
        ``on_session_start`` fires for it); a store that fails to read is reported in the
        first render's faults and the session starts empty.

        Raises:
            SessionIdError: with a store, ``session_id`` is not a valid session id (see
                docs/store.md): the session could never be saved.
        """
        # Every session waits for plugin setup; plugins registered since the last session are
        # set up now (the registry skips those already done).
        async with self._setup_lock:
            pending = any(
                callable(getattr(e.provider, "setup", None)) and not e.setup_done
                for e in self.registry.entries()
            )
            if pending:
                faults = await self.registry.setup(self)
                self.setup_faults.extend(f.to_dict() for f in faults)
        session: Session | None = None
        problem: PluginFault | None = None
        if self.store is not None:
            try:
                session = await self.load(session_id)
            except SessionIdError:
                raise  # not the store failing: no save of this session could ever work
            except StoreError as exc:
                problem = PluginFault("store", "resume", "raised", str(exc))
                warnings.warn(f"ctxengine store: {exc}", RuntimeWarning, stacklevel=3)
        if session is None:
            session = Session(self, session_id)
            if problem is not None:
                session.state.faults.append(problem)
            await session.start()
        try:
            yield session
        finally:
            await session.close()

    def session_sync(self, session_id: str) -> SyncSession:
        """A blocking session for scripts: ``with engine.session_sync(id) as s: s.render()``.

        The same calls as :meth:`session` without ``await``; see
        :class:`ctxengine.sync.SyncSession`.
        """
        from .sync import SyncSession

        return SyncSession(self, session_id)


#: Seconds ``Session.close`` waits for the snapshot of the session's last render (a stalled
#: store: the close goes on, a fault warns, the writer still writes it later).
CLOSE_SNAPSHOT_WAIT: Final = 30.0


class Session:
    """One conversation: its transcript, its grains, and its renders.

    Use ``async with engine.session(id) as s``; see :class:`ContextEngine`. Everything a render
    reads or writes is in :attr:`state` (a :class:`SessionState`); :meth:`from_state` resumes a
    session from one (e.g. rebuilt with :meth:`ContextEngine.state_from_json`).
    """

    def __init__(
        self, engine: ContextEngine, session_id: str, *, state: SessionState | None = None
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise CtxEngineError(f"session_id must be a non-empty str; got {session_id!r}")
        if state is not None and state.session_id != session_id:
            raise CtxEngineError(
                f"state belongs to session {state.session_id!r}; expected {session_id!r}"
            )
        self.engine = engine
        self.id = session_id
        self.dispatcher = SessionDispatcher(
            engine.registry,
            session_id,
            timeout=engine.plugin_timeout,
            max_failures=engine.max_failures,
            allow_dangerous=engine.allow_dangerous,
        )
        self._state = state if state is not None else engine.new_state(session_id)
        #: Last transcript entry acknowledged by the store (None before the first).
        self.leaf_id: str | None = None
        #: Whether messages and snapshots go to the engine's store (False for a restore).
        self.persist = True
        self._unsaved: list[Message] = []
        #: The appends (saves, a truncation's rewrite) that failed otherwise than refused (a
        #: timeout, a dropped connection, a server that died) since :attr:`leaf_id` last
        #: moved, oldest first: the store may have applied one of them before its reply was
        #: lost (one at most: each was a compare-and-append on that leaf), so the next refused
        #: save looks for them.
        self._doubtful: list[_Doubtful] = []
        self._save_lock = CrossLoopLock()
        self._closing = False
        self._config: RenderConfig | None = None  # a smaller budget while run() recovers
        #: Provider -> the image limit a "too many images" error taught run() (kept for the
        #: session's later run() calls: the images are history, sent again every turn).
        self._image_limits: dict[str, int] = {}
        #: The snapshot of the last render, queued on the engine's writer (None: not taken).
        self._last_snapshot: Future[SnapshotInfo] | None = None
        # Snapshot writes that failed in the writer thread, waiting for the next render's report.
        self._snapshot_failures: list[BaseException] = []
        self._failures_lock = threading.Lock()

    @classmethod
    def from_state(cls, engine: ContextEngine, state: SessionState) -> Session:
        """A session continuing from ``state`` (no ``on_session_start`` is fired)."""
        return cls(engine, state.session_id, state=state)

    @property
    def state(self) -> SessionState:
        """Everything a render reads or writes (what a snapshot stores)."""
        return self._state

    @property
    def messages(self) -> list[Message]:
        """The transcript, every message appended so far: a new list on every call (appending
        to it changes nothing: :meth:`extend`, :meth:`ingest` and the ``*_message`` calls add
        messages)."""
        return list(self._state.messages)

    @property
    def task_id(self) -> str | None:
        """The current task id."""
        return self._state.task_id

    @task_id.setter
    def task_id(self, value: str | None) -> None:
        self._state.task_id = value

    @property
    def turn(self) -> int:
        """Index of the next render."""
        return self._state.turn

    @property
    def closed(self) -> bool:
        """Whether the session was closed."""
        return self._state.closed

    def has_hook(self, hook: str) -> bool:
        """Whether any enabled plugin handles ``hook``."""
        return self.engine.registry.has_hook(hook)

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Fire ``on_session_start``."""
        await self._fire(SessionStart(self.id))

    async def close(self) -> None:
        """Save what is unsaved (the messages :meth:`extend` left to the next call: closing is
        the last one, so a reopened session has them), wait for the snapshot of its last
        render to be written (a ``store.delete`` after ``close`` is then never undone by it),
        then fire ``on_session_close`` once; session grains are dropped. A failed save or
        snapshot warns, as any call's save does."""
        if self._state.closed or self._closing:
            return
        self._closing = True  # a second close() while this one awaits does nothing
        await self._autosave()
        pending = self._last_snapshot
        if pending is not None and not pending.done():
            try:
                await anyio.to_thread.run_sync(pending.result, CLOSE_SNAPSHOT_WAIT)
            except TimeoutError:
                why = f"the last render's snapshot is not written after {CLOSE_SNAPSHOT_WAIT:g} s"
                self._store_fault("snapshot", StoreError(f"{why}; closing without it"))
            except Exception as exc:  # the writer logged it; the session's report is gone
                self._store_fault("snapshot", exc)
        self._state.closed = True
        await self._fire(SessionClose(self.id))
        self.dispatcher.bus.close()
        self._state.stored.clear()

    def end_task(self) -> None:
        """End the current task: ``task`` grains expire."""
        stored = self._state.stored
        for node_id in [k for k, s in stored.items() if s.grain.lifespan == "task"]:
            del stored[node_id]
        self._state.task_id = None

    async def _fire(self, event: object) -> None:
        outcome = await self.dispatcher.fire(event)
        self._state.faults.extend(outcome.faults)
        for grain in outcome.grains:
            try:
                self.add(grain)
            except CtxEngineError as exc:  # a plugin's bad grain is reported, never fatal
                node_id = grain.node_id if isinstance(grain.node_id, str) else None
                fault = PluginFault(grain.origin, "event", "invalid", str(exc), node_id=node_id)
                self._state.faults.append(fault)

    # -- input --------------------------------------------------------------------------------

    def add(self, grain: ContextGrain) -> None:
        """Add a grain directly (no plugin needed); its lifespan says how long it lives.

        Grains with one node id are fused as in a render: the more important one (lower
        ``priority``; tie: the one added first) is rendered, the others are reported
        ``shadowed`` in every render's report (``decision.grain`` is the shadowed grain), none
        is lost. Adding a grain with the node id, origin and priority of a carried one
        replaces it (its new version). The engine keeps ``grain`` itself (a later change of it
        is seen by the next render, and checked there) but never writes to it: each render
        works on its own copy (an empty ``origin`` is rendered as ``"session"``).

        Raises:
            GrainError: ``grain`` is not a :class:`ContextGrain`, or one of its fields was
                changed to an invalid value.
            BudgetError: its explicit ``window`` is not a fillable window of the budget.
        """
        if not isinstance(grain, ContextGrain):
            raise GrainError(f"Session.add expects a ContextGrain; got {type(grain).__name__}")
        grain.check()
        self.engine.budget.window_of(grain.node_id, grain.window)  # BudgetError: bad window
        if grain.lifespan == "turn":
            self._state.queued.append(grain)
        else:
            rank = self.engine.registry.rank(grain.origin or SESSION_ORIGIN)
            self._state.carry(grain, rank)

    def remove(self, node_id: str) -> bool:
        """Remove a grain added with :meth:`add` (any lifespan); False when there was none."""
        state = self._state
        queued = [g for g in state.queued if g.node_id != node_id]
        found = len(queued) != len(state.queued) or node_id in state.stored
        state.queued = queued
        state.stored.pop(node_id, None)
        return found

    def extend(self, messages: Iterable[Any] | Transcript) -> None:
        """Append messages without firing events (e.g. to resume a stored transcript).

        ``messages`` may be in any supported shape (see :mod:`ctxengine.transcript.coerce`):
        all are converted first, so a bad item adds nothing.

        Raises:
            TranscriptError: an item has an unknown shape (the message names its index).
        """
        batch = to_messages(messages)
        held = self._state.messages
        start = len(held)
        self._state.extend(batch)
        if self.engine.store is not None:
            self._unsaved.extend(held[start:])  # as the session holds them (text repaired)

    async def ingest(self, messages: Iterable[Any] | Transcript) -> None:
        """Append messages in any supported shape, firing the events the one-message calls
        fire (``on_user_msg`` per user message, ``on_tool_result`` per tool result).

        Raises:
            TranscriptError: an item has an unknown shape, or a tool call's arguments are not
                JSON; nothing is added.
        """
        state = self._state
        for message in entering(to_messages(messages)):  # all checked before any is added
            self._append(message)
            if message.role == "user":
                redacted = redacted_user_text(state, self.dispatcher, message.text)
                await self._fire(UserMessage(self.id, state.turn, redacted))
            for r in message.tool_results:
                name = r.name or state.builder.tool_names.get(r.call_id) or ""
                await self._fire(ToolResultEvent(self.id, r.call_id, name, r.text, r.is_error))
        await self._autosave()

    async def user_message(self, text: str) -> None:
        """Record the user's message and fire ``on_user_msg`` (with the redacted text).

        Raises:
            TranscriptError: ``text`` is not a ``str``.
        """
        if not isinstance(text, str):
            raise TranscriptError(
                f"user_message(text) must be a str; got {type(text).__name__} {text!r:.60}"
            )
        self._append(Message.user(text))
        redacted = redacted_user_text(self._state, self.dispatcher, text)
        await self._fire(UserMessage(self.id, self._state.turn, redacted))
        await self._autosave()

    def redact(self, text: str) -> str:
        """``text`` through every enabled plugin that offers ``redact_text`` (one that raises
        withholds the text, and its fault goes to the next render's report)."""
        return self.engine.registry.redact(text, self._state.faults)

    async def assistant_message(self, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> None:
        """Record the assistant's reply (text and tool calls).

        Raises:
            TranscriptError: ``text`` is not a ``str``, or ``tool_calls`` is not a sequence of
                :class:`~ctxengine.transcript.ToolCall` with ``str`` ids and names (nothing is
                recorded).
        """
        _check_str("assistant_message(text)", text)
        if isinstance(tool_calls, (str, bytes, Mapping)) or not isinstance(tool_calls, Iterable):
            raise TranscriptError(
                "assistant_message(tool_calls) must be a sequence of ToolCall; got "
                f"{type(tool_calls).__name__} {tool_calls!r:.60}"
            )
        tool_calls = tuple(tool_calls)
        for i, call in enumerate(tool_calls):
            if not isinstance(call, ToolCall):
                raise TranscriptError(
                    f"assistant_message(tool_calls)[{i}] must be a ToolCall; got "
                    f"{type(call).__name__} {call!r:.60}"
                )
            _check_str(f"assistant_message(tool_calls)[{i}].id", call.id)
            _check_str(f"assistant_message(tool_calls)[{i}].name", call.name)
        self._append(Message.assistant(text, tool_calls))
        await self._autosave()

    async def tool_result(
        self, call_id: str, output: str, *, name: str | None = None, is_error: bool = False
    ) -> None:
        """Record a tool result and fire ``on_tool_result``.

        A ``call_id`` no tool call of the session has (a typo, a result for another session)
        is recorded all the same, with a ``RuntimeWarning`` naming it and the nearest id the
        session knows: every render leaves it out (a result without its call is refused by
        every provider) and the call it was meant for gets a synthetic error result.

        Raises:
            TranscriptError: ``call_id`` is not a ``str``, ``output`` not a ``str``
                (or a sequence of ``Text``/``Image``), ``name`` not a ``str`` or None, or
                ``is_error`` not a ``bool`` or ``int`` (nothing is recorded).
        """
        _check_str("tool_result(call_id)", call_id)
        if not isinstance(output, str) and (
            not isinstance(output, (list, tuple))
            or not all(isinstance(b, (Text, Image)) for b in output)
        ):
            raise TranscriptError(
                "tool_result(output) must be a str (or a list of Text and Image); got "
                f"{type(output).__name__} {output!r:.60}"
            )
        if name is not None:
            _check_str("tool_result(name)", name)
        if not isinstance(is_error, int):  # a bool (an int exit status reads as one)
            raise TranscriptError(
                f"tool_result(is_error) must be a bool; got {type(is_error).__name__} "
                f"{is_error!r:.60}"
            )
        is_error = bool(is_error)
        calls = self._state.builder.tool_names
        if call_id not in calls:
            _warn_orphan(self.id, call_id, calls)
        name = name or calls.get(call_id)
        self._append(Message.tool(call_id, output, name=name, is_error=is_error))
        await self._fire(ToolResultEvent(self.id, call_id, name or "", output, is_error))
        await self._autosave()

    # -- persistence --------------------------------------------------------------------------

    def _append(self, message: Message) -> None:
        held = self._state.messages
        self._state.append(message)
        if self.engine.store is not None:
            self._unsaved.append(held[-1])  # as the session holds it (text repaired)

    @property
    def unsaved(self) -> int:
        """Messages added but not yet acknowledged by the store."""
        return len(self._unsaved)

    async def save(self) -> None:
        """Append the messages added since the last save to the store; durable on return.

        The async ``*_message``/``tool_result``/``ingest`` calls save on return, and
        :meth:`render` before it renders; those never raise for the store: a failure becomes
        a fault of the next render's report (and a ``RuntimeWarning`` and a log warning), the
        messages stay queued for the next save, and the session goes on in memory.
        :meth:`extend` (synchronous) leaves its messages to the next of those calls, or to
        :meth:`close`. Called
        directly, ``save()`` raises instead; the messages stay queued.

        The append is a compare-and-append (:func:`~ctxengine.store.compare_and_append`): it
        is written only if the store's leaf is still :attr:`leaf_id`, the last entry this
        session saved or loaded. When another writer appended to the session id since, nothing
        is written and :class:`~ctxengine.StoreConflictError` is raised (a fault of the next
        render for the calls that save on return); the messages stay queued (the error's
        ``unsaved`` holds them too), and every later save is refused the same way, so the
        store never holds a branch that interleaves two writers. :meth:`rebase` goes on from
        what the store holds with them appended after the other writer's.

        A save that failed otherwise (a timeout, a dropped connection, a server that died)
        may have been applied before its reply was lost: the next save then finds the store's
        leaf moved, and looks for that save's messages after :attr:`leaf_id`; found, in order,
        they are saved (once) and the save goes on after them. So with the rewrite of a
        truncation (:meth:`run`), found whole after the entry it branched from. A store that
        holds no entry of the session any more is refused with a message saying so.

        Raises:
            StoreConflictError: another writer appended to this session id since
                :attr:`leaf_id`; nothing was written (``.unsaved``: the messages refused).
            StoreError: the store failed to append (its message names the path or key and the
                OS error); nothing already stored is damaged.
        """
        store = self.engine.store
        if store is None or not self.persist or not self._unsaved:
            return
        # one save at a time: two calls of this session at once (asyncio.gather) each read the
        # leaf, and the second's append, refused on the first's new leaf, was taken for
        # another writer's (its messages not stored when its call returned)
        async with self._save_lock:
            await self._save(store)

    async def _save(self, store: Store) -> None:
        """:meth:`save`'s append, under the session's save lock."""
        if not self._unsaved:
            return  # a save that waited for the lock stored them
        batch = list(self._unsaved)
        expected = self.leaf_id
        try:
            entries = await anyio.to_thread.run_sync(
                lambda: record_messages(store, self.id, batch, expected_leaf=expected)
            )
        except StoreConflictError as exc:
            if self._doubtful and await self._found_applied(store):
                return await self._save(store)  # the rest, after them
            exc.unsaved = tuple(batch)  # still queued as well: nothing of them is lost
            if exc.actual is None and expected is not None:
                raise self._lost(exc, batch) from exc
            raise
        except StoreError:
            self._doubt(expected, batch)  # applied or not: the next refused save finds out
            raise
        self._doubtful = []
        del self._unsaved[: len(batch)]
        if entries:
            # A store without an atomic append_if is checked before the append, not with it:
            # another parent than the expected leaf means a writer slipped in between.
            if entries[0].parent_id != expected:
                self._conflict(entries[0].parent_id)
            self.leaf_id = entries[-1].id

    def _doubt(self, expected: str | None, batch: list[Message]) -> None:
        """Keep a save of ``batch`` on ``expected`` that failed otherwise than refused. A save
        retried with more queued after the last one that failed so (the same leaf, its batch
        first) is one candidate that may have been applied at either length."""
        last = self._doubtful[-1] if self._doubtful else None
        if (
            last is not None
            and last.marker is None
            and last.parent == expected
            and len(last.messages) <= len(batch)
            and all(map(operator.is_, last.messages, batch))
        ):
            last.messages, last.queued = batch, len(batch)
            if last.sizes[-1] != len(batch):
                last.sizes.append(len(batch))
            return
        self._doubtful.append(_Doubtful(expected, None, batch, len(batch), [len(batch)]))

    async def _found_applied(self, store: Store) -> bool:
        """Whether one of the appends that failed (:attr:`_doubtful`) was applied all the same
        (its reply lost): the store's branch goes on after its parent with all its entries, in
        order (a store writes an append whole or not at all, so a part of one is another
        writer's; another writer's entries may follow them). Its queued messages are then
        taken as saved, and the session's leaf moves to the last of its entries. A rewrite
        counts when found whole: its marker, then every message it wrote."""
        doubtful, self._doubtful = self._doubtful, []
        if not doubtful:
            return False
        try:
            branch = await anyio.to_thread.run_sync(lambda: store.branch(self.id))
        except StoreError:
            self._doubtful = doubtful  # still to be found out, at the next refusal
            raise
        for candidate in reversed(doubtful):  # the newest first: at most one was applied
            found = _applied(branch, candidate)
            if not found:
                continue
            # the queued ones are its last messages, still queued as they were (no rewrite
            # since; a truncation that failed after it put their cut forms in their place)
            written = len(found) - (candidate.marker is not None)
            taken = candidate.messages[written - min(candidate.queued, written) : written]
            held = self._unsaved[: len(taken)]
            if candidate.held is not None:
                taken = candidate.held[: len(taken)]
            if len(held) != len(taken) or not all(map(operator.is_, held, taken)):
                continue
            del self._unsaved[: len(taken)]
            self.leaf_id = found[-1].id
            _log.info(
                "ctxengine store: session %r: the %s that failed before was applied (its "
                "reply was lost): %d entries, up to entry %r",
                self.id,
                "save" if candidate.marker is None else "rewrite",
                len(found),
                self.leaf_id,
            )
            return True
        return False

    def _lost(self, refused: StoreConflictError, batch: list[Message]) -> StoreConflictError:
        """The refusal of a save to a store that holds nothing of the session any more,
        though it held the entry the session saved or loaded last (``refused.expected``)."""
        stored = len(self._state.messages) - len(self._unsaved)
        return StoreConflictError(
            f"the store no longer holds session {self.id!r}: it has no entry of it, though "
            f"this session saved or loaded entry {refused.expected!r} there (deleted, "
            "flushed, evicted, or a server restarted without its data); nothing of this "
            f"append was written, and the {stored} messages this session had stored are now "
            "only in its memory: Session.rebase() writes them all to the store again",
            session_id=self.id,
            expected=refused.expected,
            actual=None,
            path=refused.path,
            unsaved=tuple(batch),
        )

    async def rebase(self) -> int:
        """Go on from what the store holds after another writer appended to this session id:
        re-read the session's stored branch and append this session's unsaved messages after
        the other writer's (what a refused :meth:`save` left queued, in their order).

        When the store's leaf is still :attr:`leaf_id` this is :meth:`save`. Otherwise the
        session's messages and state become what :meth:`ContextEngine.load` gives for the
        session id (the stored branch, the state of its latest snapshot that covers it), then
        the unsaved messages follow, in memory and in the store (a compare-and-append on the
        new leaf). Of this session's own state it keeps what does not describe its old branch:
        the ``turn`` grains queued for the next render, the ``session``/``task`` grains added
        (fused with the stored state's as :meth:`add` fuses them), the task id and the faults
        waiting for the next render; its compaction summary, which summarized its old branch,
        is dropped (the stored state's own summary, if any, is kept). The next render takes a
        snapshot of the rebased session as usual. A closed session can be rebased too (e.g.
        after its ``close()`` was refused at the end of an ``async with`` block): it stays
        closed, its messages are stored.

        When the store holds no entry of the session any more though this session saved
        there (deleted, flushed, evicted, a server restarted without its data), there is no
        other writer's branch to go on from: every message of the session is appended again,
        from the first, and the session keeps its state.

        Returns:
            How many messages were appended (0: nothing was unsaved).

        Raises:
            StoreConflictError: yet another writer appended between the re-read and the
                append; nothing was written, the session holds the re-read branch and its
                messages are still queued: call ``rebase()`` again.
            StoreError: the engine has no store or it failed (the session is left as it was
                when the re-read failed).
            CtxEngineError: the session does not persist (a restore).
        """
        store = self.engine.store
        if store is None:
            raise StoreError(f"cannot rebase session {self.id!r}: the engine has no store")
        if not self.persist:
            raise CtxEngineError(
                f"cannot rebase session {self.id!r}: it does not persist (a restore writes nothing)"
            )
        async with self._save_lock:  # no save of this session between the re-read and the append
            return await self._rebase(store)

    async def _rebase(self, store: Store) -> int:
        """:meth:`rebase`, under the session's save lock."""
        stored_leaf = await anyio.to_thread.run_sync(lambda: store.leaf(self.id))
        if stored_leaf is None and self.leaf_id is not None:
            # The store lost the session (deleted, flushed, a server restarted empty): what it
            # held is only here now. Re-reading it would give nothing and drop all of it.
            self._unsaved = list(self._state.messages)
            self._doubtful = []
            self.leaf_id = None
            self._last_snapshot = None
        elif stored_leaf != self.leaf_id and self._doubtful:
            # the append that failed last may be what moved the leaf (its reply lost):
            # re-reading the branch with it and appending its messages again stores them twice
            await self._found_applied(store)
        count = len(self._unsaved)
        if stored_leaf != self.leaf_id:
            loaded = await self.engine.load(self.id)
            old = self._state
            new = loaded.state if loaded is not None else self.engine.new_state(self.id)
            summary = old.summary.node_id if old.summary is not None else None
            for node_id, head in old.stored.items():
                if node_id != summary:
                    for carried in head.group:
                        new.carry(carried.grain, carried.rank)
            new.queued = [*old.queued, *new.queued]
            new.task_id = old.task_id if old.task_id is not None else new.task_id
            new.faults = [*new.faults, *old.faults]
            new.closed = old.closed
            new.extend(self._unsaved)
            self._state = new
            self.leaf_id = loaded.leaf_id if loaded is not None else None
            self._last_snapshot = None  # it describes the old branch
        await self._save(store)
        return count

    def _conflict(self, parent: str | None) -> None:
        """Report that another writer appended to this session between the leaf check and the
        append (only possible on a store without an atomic ``append_if``)."""
        message = (
            f"session {self.id!r} was appended to by another writer: this save went on after "
            f"entry {parent!r}, not after {self.leaf_id!r}, the last one this session saved or "
            "loaded (the store has no atomic append_if, so the leaf check could not keep it "
            "out); nothing is lost, but the stored branch now interleaves both writers' "
            "messages, so a reopened session differs from this one"
        )
        self._state.faults.append(PluginFault("store", "append", "invalid", message, "warning"))
        _log.warning("ctxengine store: %s", message)
        warnings.warn(f"ctxengine store: {message}", RuntimeWarning, stacklevel=4)

    async def _autosave(self) -> bool:
        """:meth:`save`, with a failure reported as a fault instead of raised."""
        try:
            await self.save()
        except StoreError as exc:
            self._store_fault("append", exc)
            return False
        return not self._unsaved

    async def checkpoint(self, timeout: float | None = None) -> SnapshotInfo | None:
        """Make the session durable now: save the unsaved messages, then wait until the
        snapshot of the last render is written. When it returns, a crash loses nothing of
        the session up to the last render: :meth:`ContextEngine.restore` gives that render's
        payload again (with the messages saved since appended).

        Returns:
            The snapshot of the last render, or None when there is none to wait for (no
            store, no render yet, or its messages were not stored when it rendered).

        Raises:
            StoreError: saving the messages or writing the snapshot failed, or the snapshot
                was not written within ``timeout`` seconds.
            ConfigTypeError / ConfigError: ``timeout`` is not None or a number >= 0.
        """
        _check_timeout("timeout", timeout)
        await self.save()
        future = self._last_snapshot
        if future is None:
            return None

        def wait() -> SnapshotInfo:
            try:
                return future.result(timeout)
            except FutureTimeout as exc:
                raise StoreError(
                    f"the snapshot of session {self.id!r} was not written within {timeout} s"
                ) from exc

        info: SnapshotInfo = await anyio.to_thread.run_sync(wait)
        return info

    def _store_fault(self, hook: str, exc: BaseException) -> None:
        self._state.faults.append(PluginFault("store", hook, "raised", str(exc)))
        _log.warning("ctxengine store (%s) for session %r: %s", hook, self.id, exc)
        warnings.warn(f"ctxengine store ({hook}): {exc}", RuntimeWarning, stacklevel=3)

    def _snapshot(self, out: RenderedContext, turn: int) -> None:
        writer = self.engine.writer
        self._last_snapshot = None
        if writer is None or not self.persist:
            return
        if self._unsaved:  # the snapshot would describe messages the store does not hold
            return
        # The texts of the mem.* grains go into the snapshot's core_memory: written once.
        state = self._state.to_json(messages=False, texts=memory_texts(out.tree))
        try:
            future = snapshot_render(writer, self.id, state, out, turn=turn, leaf_id=self.leaf_id)
        except StoreError as exc:
            self._store_fault("snapshot", exc)
            return
        self._last_snapshot = future
        future.add_done_callback(self._snapshot_done)

    def _snapshot_done(self, future: Future[SnapshotInfo]) -> None:
        """In the writer thread: keep a failed write for the next render's report (the writer
        logged it already)."""
        exc = future.exception()
        if exc is None:
            return
        with self._failures_lock:
            if not any(e is exc for e in self._snapshot_failures):  # superseded: same error
                self._snapshot_failures.append(exc)

    def _report_snapshot_failures(self) -> None:
        with self._failures_lock:
            failed, self._snapshot_failures = self._snapshot_failures, []
        for exc in failed:
            self._state.faults.append(
                PluginFault("store", "snapshot", "raised", f"snapshot not written: {exc}")
            )

    # -- overflow recovery --------------------------------------------------------------------

    async def run(
        self,
        call_model: Callable[[dict[str, Any]], Awaitable[Any]],
        *,
        provider: str = "openai",
        max_compactions: int = 3,
        shrink: float = 0.75,
        **options: Any,
    ) -> tuple[Any, RenderedContext]:
        """Render, ``await call_model(payload)``, and recover from a context overflow.

        On an error :func:`~ctxengine.classify_provider_error` calls ``context_overflow``:
        compact and retry, up to ``max_compactions`` times (each render plans for ``shrink``
        times the previous budget, so the turns that no longer fit are summarized into
        ``mem.summary``); then truncate oversized tool results persistently (the session's
        messages are replaced; with a store, a ``rewrite`` branch records it) and retry once.
        A ``compaction_overflow`` skips the compactions. Every step is appended to the returned
        render's ``report.recovery`` (``[{"step", "error", "tokens", "limit", "budget",
        "compactions"}]``; ``compactions`` lists each compaction of that render as ``{"ok",
        "stage", "error"}``: a failed or timed-out one wrote nothing and names why).

        On ``too_many_images`` (a provider or gateway that takes fewer images than the render
        sent): render again with fewer images, up to :data:`MAX_IMAGE_STEPS` times (step
        ``fewer_images``, its error entry adding ``"images"``, what was sent (for Anthropic,
        which counts them together, the pages of inline PDFs too), and ``"max_images"``, the
        new limit). Nothing needs compacting: the newest images stay,
        older ones become their text placeholder. The new limit is what the error says
        (sent less the excess it names, else its maximum, else half of what was sent) and is
        kept for this session's later :meth:`run` calls to ``provider``. When no image is
        left to take out, the error is raised unchanged.

        Returns:
            ``(the model's answer, the render it accepted)``.

        Raises:
            ContextOverflowError: still too long after every step; ``.tried`` lists them,
                ``.tokens``/``.limit`` are the provider's last numbers (None when not said).
            Exception: any non-overflow error of ``call_model`` (a ``too_many_images`` one
                no fewer images can fix among them), unchanged.
            ConfigTypeError / ConfigError: ``max_compactions`` is not an int >= 0 or
                ``shrink`` not a number between 0 and 1 (both excluded).
        """
        if not isinstance(max_compactions, int) or isinstance(max_compactions, bool):
            raise ConfigTypeError(
                f"max_compactions is {_kind(max_compactions)}; expected an int >= 0"
            )
        if max_compactions < 0:
            raise ConfigError(f"max_compactions is {max_compactions!r}; expected an int >= 0")
        if not _is_number(shrink):
            raise ConfigTypeError(f"shrink is {_kind(shrink)}; expected a number in (0, 1)")
        if not 0 < shrink < 1:
            raise ConfigError(f"shrink is {shrink!r}; expected a number in (0, 1)")
        steps: list[dict[str, Any]] = []
        total = self.engine.config.tokens_total
        compactions, truncated, image_steps = 0, False, 0
        step = "render"
        last: Any = None
        options = self._learned_images(provider, options)
        try:
            while True:
                out = await self.render(provider, **options)
                out.report.recovery = steps
                # What this render's compactions did: a failed or timed-out one wrote nothing
                # (the session is as before it) and says why here.
                done = [
                    {"ok": c["ok"], "stage": c["stage"], "error": c["error"]}
                    for c in out.report.compactions
                ]
                try:
                    answer = await call_model(out.payload)
                except Exception as exc:
                    info = classify_provider_error(exc)
                    if info.kind == "too_many_images":
                        sent = count_images(out.transcript, provider)
                        fewer = fewer_images(sent, info)
                        if fewer is None or image_steps >= MAX_IMAGE_STEPS:
                            raise
                        image_steps += 1
                        steps.append(
                            _recovery_step(step, info, out, done, images=sent, max_images=fewer)
                        )
                        self._image_limits[provider] = fewer
                        options = {**options, "max_images": fewer}
                        step = "fewer_images"
                        continue
                    if info.kind not in ("context_overflow", "compaction_overflow"):
                        raise
                    last = info
                    steps.append(_recovery_step(step, info, out, done))
                    if info.kind == "context_overflow" and compactions < max_compactions:
                        compactions += 1
                        scale = shrink
                        # the provider's ratio: of the input it counted, else of everything it
                        # was asked for (OpenAI's "your messages resulted in N tokens"), which
                        # is no less than the input
                        used = info.tokens if info.tokens is not None else info.requested
                        if info.limit and used and used > info.limit:
                            scale = min(scale, info.limit / used)
                        elif info.excess and out.tokens and out.tokens > info.excess:
                            # only how many tokens too many (Ollama: "exceeded max context
                            # length by N tokens"): of what we counted, the part to take off
                            # (a provider counting more than we do needs less: still fits)
                            scale = min(scale, 1 - info.excess / out.tokens)
                        # of what was sent: a budget above the model's real window (a local
                        # model, a proxy) shrunk from itself re-sent the same payload
                        total = max(1, int(min(total, out.tokens or total) * scale))
                        try:
                            self._config = dataclasses.replace(
                                self.engine.config, tokens_total=total
                            )
                            plan_ok = True
                        except (BudgetError, ValueError):
                            plan_ok = False
                        if plan_ok:
                            step = "compact"
                            continue
                    if not truncated:
                        truncated = True
                        if await self._truncate_results(total, steps):
                            step = "truncate"
                            continue
                    tried = [s["step"] for s in steps]
                    raise ContextOverflowError(
                        f"the provider still rejects the context as too long "
                        f"({_numbers(last)}) after trying: {', '.join(tried)}",
                        tokens=last.tokens,
                        limit=last.limit,
                        tried=tried,
                        recovery=steps,
                    ) from exc
                steps.append(
                    {"step": step, "ok": True, "budget": out.report.budget, "compactions": done}
                )
                return answer, out
        finally:
            self._config = None

    def _learned_images(self, provider: str, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with the image limit an earlier :meth:`run` learned for ``provider``,
        when it is below the one they (or the engine) set."""
        learned = self._image_limits.get(provider)
        if learned is None:
            return options
        given = options.get("max_images", self.engine.config.max_images)
        if given is not None and given <= learned:
            return options
        return {**options, "max_images": learned}

    async def _truncate_results(self, total: int, steps: list[dict[str, Any]]) -> bool:
        """Persistently cut every tool result above the share of ``total``; False if none.

        Under the session's save lock from the reading of its messages to the rewrite's
        append: a message queued by a save in flight (or added while the lock was awaited)
        would otherwise be counted as unsaved, left out of the rewrite and dropped."""
        async with self._save_lock:
            return await self._truncate_locked(total, steps)

    async def _truncate_locked(self, total: int, steps: list[dict[str, Any]]) -> bool:
        """:meth:`_truncate_results`, under the session's save lock."""
        limit = max_tool_result_chars(total)
        messages = list(self._state.messages)
        first: int | None = None
        cut = 0
        for i, m in enumerate(messages):
            blocks = []
            changed = False
            for b in m.blocks:
                if isinstance(b, ToolResult) and all(isinstance(c, Text) for c in b.content):
                    text = "".join(c.text for c in b.content if isinstance(c, Text))
                    short = truncate_tool_result(text, limit)
                    if short != text:
                        b = dataclasses.replace(b, content=(Text(short),))
                        changed = True
                blocks.append(b)
            if changed:
                messages[i] = dataclasses.replace(m, blocks=tuple(blocks))
                first = i if first is None else first
                cut += 1
        if first is None:
            return False
        old = self._state
        data = old.to_json(messages=False)
        new = SessionState.from_json(
            data, self.engine.new_assembly(), self.engine._builder(), messages=messages
        )
        self._state = new
        steps.append({"step": "truncate_tool_results", "messages": cut, "max_chars": limit})
        store = self.engine.store
        if store is None or not self.persist:
            return True
        if self._doubtful:
            # an append whose reply was lost may have moved the leaf: found, the rewrite goes
            # on after it (its queued messages, replaced by their cut forms below, would else
            # no longer be known as its own, and stored twice)
            with contextlib.suppress(StoreError):  # not found out: kept, for the next save
                await self._found_applied(store)
        queue = list(self._unsaved)
        unsaved = len(queue)
        details = {"max_chars": limit, "messages": cut}
        expected = self.leaf_id
        planned: list[_Doubtful] = []

        def write() -> list[Entry]:
            parent, kept = _truncation_start(store, self.id, old.messages, first, unsaved, expected)
            marker = json.loads(compact_json({"reason": TRUNCATION, **details}))
            rewritten = messages[kept:]
            planned.append(_Doubtful(parent, marker, rewritten, unsaved, [len(rewritten)]))
            return record_rewrite(
                store,
                self.id,
                rewritten,
                parent_id=parent,
                reason=TRUNCATION,
                details=details,
                expected_leaf=expected,
            )

        try:
            entries = await anyio.to_thread.run_sync(write)
        except StoreError as exc:
            # The unsaved messages go later as the session now holds them (cut).
            if unsaved:
                self._unsaved[:unsaved] = messages[len(messages) - unsaved :]
                cut_forms = dict(zip(map(id, queue), self._unsaved[:unsaved], strict=True))
                for earlier in self._doubtful:  # their queued messages are now held cut
                    queued = (
                        earlier.held or earlier.messages[len(earlier.messages) - earlier.queued :]
                    )
                    earlier.held = [cut_forms.get(id(m), m) for m in queued]
            if planned and not isinstance(exc, StoreConflictError):
                # applied or not (its reply lost): the next refused save finds out
                self._doubtful.append(planned[0])
            self._store_fault("rewrite", exc)
        else:
            del self._unsaved[:unsaved]  # the rewrite holds them
            self.leaf_id = entries[-1].id
            self._doubtful = []  # written on the session's leaf: none of them was applied
        return True

    def transcript(self) -> Transcript:
        """The session's full transcript (not pruned: pruning happens only in renders)."""
        return Transcript(tuple(self._state.messages), source_format="session")

    # -- compaction ---------------------------------------------------------------------------

    async def compact(self) -> CompactionResult:
        """Compact the session now: the older live history becomes one summary message.

        Runs :func:`ctxengine.compaction.compact_history` on the live history (an earlier
        summary first, then every message not yet compacted) with the render budget, the
        engine's summarizer and :class:`~ctxengine.compaction.CompactionConfig`; the protected
        tail is never compacted. On success the next render sends the summary as the first
        history message; otherwise (``result.ok`` False, ``result.error`` says why) the
        session is unchanged.
        """
        engine = self.engine
        return await compact_now(self._state, engine.config, engine.registry)

    # -- render -------------------------------------------------------------------------------

    async def render(self, provider: str = "openai", **options: Any) -> RenderedContext:
        """Build the request payload for ``provider`` within the budget.

        Raises:
            BudgetError: protected grains alone exceed the budget (named in the message).
            AdapterError: unknown provider, or an option :func:`ctxengine.transcript.render`
                does not take (the message lists the valid ones).
            CtxEngineError: the session was closed (its session grains, the compaction
                summary among them, are gone: a render would silently lack them).
        """
        check_provider(provider)
        check_options(options)
        state = self._state
        if state.closed:
            raise CtxEngineError(
                f"session {self.id!r} is closed; open it again with engine.session({self.id!r}) "
                "to render it"
            )
        await self._autosave()
        self._report_snapshot_failures()
        queued = state.queued
        try:
            turn = state.turn
            out = await self._render(provider, options)
            self._snapshot(out, turn)
            return out
        except BaseException:
            if state.queued is not queued:  # the failed render took them: they wait for the next
                state.queued[:0] = queued
            raise

    async def _render(self, provider: str, options: dict[str, Any]) -> RenderedContext:
        """collect → assemble → inject, each phase given the state and the frozen config."""
        started = time.perf_counter()
        state, plugins = self._state, self.dispatcher
        config = self._config or self.engine.config
        log = TurnLog(faults=state.faults)
        state.faults = []
        grains = await collect(state, config, plugins, provider, log)
        timings = {"collect": time.perf_counter() - started}
        assembled = await assemble(state, config, plugins, grains, log, provider)
        request = Request(provider, options, started, timings, self.engine.setup_faults)
        return await inject(state, config, plugins, assembled, request, log)


#: Re-renders with fewer images :meth:`Session.run` makes on ``too_many_images`` errors.
MAX_IMAGE_STEPS: Final = 3


def fewer_images(sent: int, info: ProviderErrorInfo) -> int | None:
    """The image limit of the render after one that sent ``sent`` images was refused with
    ``info`` (a ``too_many_images`` error), below ``sent``; None when no image was sent.

    What the error says: ``sent`` less the excess it names (``requested - limit``: Anthropic
    counts documents or their pages too, "0 document pages + 102 images > 100"), else its
    maximum ("Max is 10"), else half of ``sent``."""
    if sent <= 0:
        return None
    limit, requested = info.limit, info.requested
    if limit is not None and requested is not None and requested > limit:
        n = sent - (requested - limit)
    elif limit is not None:
        n = limit
    else:
        n = sent // 2
    return max(0, min(n, sent - 1))


#: The ``reason`` of the rewrite marker of a truncation.
TRUNCATION: Final = "truncate_tool_results"


def _truncation_start(
    store: Store,
    session_id: str,
    before: Sequence[Message],
    first: int,
    unsaved: int,
    expected: str | None,
) -> tuple[str | None, int]:
    """Where a truncation's ``rewrite`` branch starts, so a reopened session holds the
    messages as they are now: the entry it goes on after (None: from the start) and how many
    messages that keeps as stored.

    The branch starts after the longest run of stored messages equal to ``before`` (the
    messages as they were) that ends before ``first``, the first message cut; everything after
    it, the ``unsaved`` last messages included, is written again as it is now. So a stored
    branch that holds a message the session does not (one left out on resume as malformed)
    or lacks ones it holds (unsaved) is rewritten from where they part. The rewrite is a
    compare-and-append on ``expected``, the session's leaf: another writer's entries are never
    dropped off the branch.

    Raises:
        StoreConflictError: the store's leaf is not ``expected``; nothing was written.
        StoreError: the store failed.
    """
    branch = store.branch(session_id)
    leaf = branch[-1].id if branch else None
    if leaf != expected:
        raise conflict_error(session_id, expected, leaf)
    stored = [e for e in branch if e.kind == MESSAGE]
    end = min(first, len(before) - unsaved, len(stored))
    kept = 0
    while kept < end and stored[kept].data.get("message") == _as_stored(before[kept]):
        kept += 1
    return (stored[kept - 1].id if kept else None), kept


@dataclasses.dataclass
class _Doubtful:
    """An append that failed otherwise than refused: the store may hold it all the same."""

    #: The entry it went on after (None: the start of the session).
    parent: str | None
    #: A rewrite's marker data as stored (None for a save of queued messages).
    marker: dict[str, Any] | None
    #: The messages it wrote, in order.
    messages: list[Message]
    #: How many of them, the last ones, were queued unsaved when it failed.
    queued: int
    #: The lengths it may have been written with: the saves that failed on one leaf, each
    #: retried with more queued after it, are one candidate (a rewrite: its messages' length).
    sizes: list[int]
    #: What the queue holds in place of its queued messages, when a truncation that failed
    #: after it put their cut forms there (None: the messages themselves).
    held: list[Message] | None = None


def _applied(branch: Sequence[Entry], doubtful: _Doubtful) -> list[Entry]:
    """The entries of ``doubtful`` in ``branch``, found whole after its parent at one of the
    lengths it may have been written with (``[]``: not there)."""
    start = 0
    if doubtful.parent is not None:
        ids = [e.id for e in branch]
        if doubtful.parent not in ids:
            return []
        start = ids.index(doubtful.parent) + 1
    after = branch[start:]
    marked = doubtful.marker is not None
    if marked and (not after or after[0].kind != REWRITE or after[0].data != doubtful.marker):
        return []
    matched = 0
    for entry, message in zip(after[marked:], doubtful.messages, strict=False):
        if entry.kind != MESSAGE or entry.data.get("message") != _as_stored(message):
            break
        matched += 1
    size = max((n for n in doubtful.sizes if 0 < n <= matched), default=0)
    return list(after[: marked + size]) if size else []


def _as_stored(message: Message) -> Any:
    """``message`` as a store holds it in an entry's ``data["message"]``."""
    return json.loads(compact_json(message_to_json(message)))


def _recovery_step(
    step: str, info: ProviderErrorInfo, out: RenderedContext, done: list[Any], **more: Any
) -> dict[str, Any]:
    """The entry of ``report.recovery`` for a model call that failed with ``info`` after the
    render ``out`` (``done``: its compactions; ``more``: what the step's answer adds)."""
    return {
        "step": step,
        "error": info.kind,
        "tokens": info.tokens,
        "limit": info.limit,
        "budget": out.report.budget,
        "compactions": done,
        **more,
    }


def _warn_orphan(session_id: str, call_id: str, calls: Mapping[str, str]) -> None:
    """Warn that ``call_id`` answers no tool call of session ``session_id`` (``calls``: its
    calls' ids), naming the nearest id it has."""
    import difflib  # rarely needed: not at import time

    near = difflib.get_close_matches(call_id, list(calls)[-256:], n=1, cutoff=0.6)
    hint = f" (did you mean {near[0]!r}?)" if near else ""
    warnings.warn(
        f"ctxengine session {session_id!r}: tool_result({call_id!r}) answers no tool call of "
        f"the session{hint}; renders leave it out as an orphan result",
        RuntimeWarning,
        stacklevel=3,
    )


def _check_str(what: str, value: object) -> None:
    """Raise :class:`TranscriptError` naming ``what`` unless ``value`` is a ``str``."""
    if not isinstance(value, str):
        raise TranscriptError(f"{what} must be a str; got {type(value).__name__} {value!r:.60}")


def _numbers(info: Any) -> str:
    if info.tokens is not None and info.limit is not None:
        return f"{info.tokens} tokens > {info.limit}"
    return str(info.message)[:120]
