"""`ContextEngine` and `Session`: collect → assemble (Rust) → inject (DESIGN.md §1).

A session keeps its grains, counts and scores inside a Rust :class:`~ctxengine._core.Assembly`
between renders, so a warm render moves only what changed across the boundary: new messages,
and the grains plugins produced for this turn.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from . import _core
from .budget import RESERVE, Budget
from .errors import CtxEngineError, TranscriptError
from .events import SessionClose, SessionStart, UserMessage
from .events import ToolResult as ToolResultEvent
from .grain import ContextGrain
from .guard import max_tool_result_chars
from .history import HistoryBuilder, HistoryItem
from .plugins.dispatch import PluginFault, SessionDispatcher
from .registry import PluginEntry, Registry
from .render import MessageTokenCache
from .report import GrainDecision, RenderReport
from .summarize import ExtractiveSummarizer, Summarizer
from .transcript import Message, ToolCall, Transcript
from .transcript.render import check_options

__all__ = ("ContextEngine", "RenderedContext", "Session")


@dataclass(slots=True)
class RenderedContext:
    """The result of :meth:`Session.render`.

    Attributes:
        payload: The provider request body (``messages``/``input``/``contents``...).
        tokens: Tokens of the payload (exact for OpenAI models, estimated otherwise).
        tree: The grains of this render after fusion and plugin edits, in render order.
        report: The manifest: every grain's decision, stage, reason and tokens.
        transcript: The neutral transcript the payload was rendered from.
    """

    payload: dict[str, Any]
    tokens: int
    tree: list[ContextGrain]
    report: RenderReport
    transcript: Transcript


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

    Raises:
        EncodingError: unknown model. BudgetError: invalid budget.
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
    ) -> None:
        self.model = model
        self.budget = budget if isinstance(budget, Budget) else Budget(total=budget)
        self.tokens_total = self.budget.resolve(model)
        self.tokenizer = _core.Tokenizer(model)
        self.registry = Registry(allow_dangerous=allow_dangerous)
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self.allow_dangerous = allow_dangerous
        self.plugin_timeout = plugin_timeout
        self.max_failures = max_failures
        self.weights = weights
        self.windows = [w for w in self.budget.windows]
        self._setup_lock: anyio.Lock | None = None
        self.setup_faults: list[dict[str, Any]] = []
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
        return _core.Assembly(
            self.model,
            [(name, float(share)) for name, share in self.budget.windows.items()],
            reserve=RESERVE if RESERVE in self.budget.windows else None,
            pretrim_ratio=self.budget.pretrim_ratio,
            weights=self.weights,
        )

    @contextlib.asynccontextmanager
    async def session(self, session_id: str) -> AsyncIterator[Session]:
        """Open a session; it is closed (``on_session_close``) when the block exits."""
        # Every session waits for plugin setup; plugins registered since the last session are
        # set up now (the registry skips those already done).
        if self._setup_lock is None:
            self._setup_lock = anyio.Lock()
        async with self._setup_lock:
            pending = any(
                callable(getattr(e.provider, "setup", None)) and not e.setup_done
                for e in self.registry.entries()
            )
            if pending:
                faults = await self.registry.setup(self)
                self.setup_faults.extend(f.to_dict() for f in faults)
        session = Session(self, session_id)
        await session.start()
        try:
            yield session
        finally:
            await session.close()


@dataclass(slots=True)
class _Stored:
    grain: ContextGrain
    rank: int
    seq: int


@dataclass(slots=True)
class _TurnState:
    """What one render gathers before assembly."""

    faults: list[PluginFault] = field(default_factory=list)
    shadowed: list[dict[str, Any]] = field(default_factory=list)
    extra: list[GrainDecision] = field(default_factory=list)
    compactions: list[dict[str, Any]] = field(default_factory=list)


class Session:
    """One conversation: its transcript, its grains, and its renders.

    Use ``async with engine.session(id) as s``; see :class:`ContextEngine`.
    """

    def __init__(self, engine: ContextEngine, session_id: str) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise CtxEngineError(f"session_id must be a non-empty str; got {session_id!r}")
        self.engine = engine
        self.id = session_id
        self.messages: list[Message] = []
        self.task_id: str | None = None
        self.turn = 0
        self.closed = False
        self.dispatcher = SessionDispatcher(
            engine.registry,
            session_id,
            timeout=engine.plugin_timeout,
            max_failures=engine.max_failures,
            allow_dangerous=engine.allow_dangerous,
        )
        self._asm = engine.new_assembly()
        self._builder = HistoryBuilder()
        self._builder.max_result_chars = max_tool_result_chars(engine.tokens_total)
        self._items: dict[str, HistoryItem] = {}
        self._pending: list[HistoryItem] = []
        self._stored: dict[str, _Stored] = {}  # session/task grains carried across renders
        self._queued: list[ContextGrain] = []  # turn grains waiting for the next render
        self._in_asm: dict[str, tuple[Any, ...]] = {}  # context node_id -> what the core holds
        self._overrides: dict[str, ContextGrain] = {}
        self._compacted: set[str] = set()  # history node ids summarized into mem.summary
        self._seq = 0
        self._summary: ContextGrain | None = None
        self._faults: list[PluginFault] = []
        self._dirty: set[str] = set()
        self._guarded: dict[str, int] = {}  # node_id -> chars before the window guard cut it
        self._splits: dict[str, tuple[Any, list[ContextGrain]]] = {}
        self._order: dict[str, int] = {}
        self._window_index = {name: i for i, name in enumerate(engine.windows)}
        self._token_cache = MessageTokenCache()

    def has_hook(self, hook: str) -> bool:
        """Whether any enabled plugin handles ``hook``."""
        return any(
            e.state == "enabled" and callable(getattr(e.provider, hook, None))
            for e in self.engine.registry.entries()
        )

    # -- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Fire ``on_session_start``."""
        await self._fire(SessionStart(self.id))

    async def close(self) -> None:
        """Fire ``on_session_close`` once; session grains are dropped."""
        if self.closed:
            return
        self.closed = True
        await self._fire(SessionClose(self.id))
        self.dispatcher.bus.close()
        self._stored.clear()

    def end_task(self) -> None:
        """End the current task: ``task`` grains expire."""
        for node_id in [k for k, s in self._stored.items() if s.grain.lifespan == "task"]:
            del self._stored[node_id]
        self.task_id = None

    async def _fire(self, event: object) -> None:
        outcome = await self.dispatcher.fire(event)
        self._faults.extend(outcome.faults)
        for grain in outcome.grains:
            try:
                self.add(grain)
            except CtxEngineError as exc:  # a plugin's bad grain is reported, never fatal
                fault = PluginFault(
                    grain.origin, "event", "invalid", str(exc), node_id=grain.node_id
                )
                self._faults.append(fault)

    # -- input --------------------------------------------------------------------------------

    def add(self, grain: ContextGrain) -> None:
        """Add a grain directly (no plugin needed); its lifespan says how long it lives.

        Raises:
            GrainError: ``grain`` is not a :class:`ContextGrain`, or one of its fields was
                changed to an invalid value.
            BudgetError: its explicit ``window`` is not a fillable window of the budget.
        """
        if not isinstance(grain, ContextGrain):
            from .errors import GrainError

            raise GrainError(f"Session.add expects a ContextGrain; got {type(grain).__name__}")
        grain.check()
        if not grain.origin:
            grain.origin = "session"
        self.engine.budget.window_of(grain.node_id, grain.window)  # BudgetError: bad window
        if grain.lifespan == "turn":
            self._queued.append(grain)
        else:
            self._stored[grain.node_id] = _Stored(grain, self._rank(grain.origin), self._next())

    def remove(self, node_id: str) -> bool:
        """Remove a grain added with :meth:`add` (any lifespan); False when there was none."""
        queued = [g for g in self._queued if g.node_id != node_id]
        found = len(queued) != len(self._queued) or node_id in self._stored
        self._queued = queued
        self._stored.pop(node_id, None)
        return found

    def extend(self, messages: Iterable[Message] | Transcript) -> None:
        """Append messages without firing events (e.g. to resume a stored transcript)."""
        for message in messages:
            self._append(message)

    def _append(self, message: Message) -> None:
        index = len(self.messages)
        self.messages.append(message)
        for item in self._builder.items(index, message):
            self._items[item.node_id] = item
            self._pending.append(item)
            if item.guarded_from:
                self._guarded[item.node_id] = item.guarded_from

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
        await self._fire(UserMessage(self.id, self.turn, self.redact(text)))

    def redact(self, text: str) -> str:
        """``text`` through every enabled plugin that offers ``redact_text``."""
        for entry in self.engine.registry.entries():
            fn = getattr(entry.provider, "redact_text", None)
            if entry.state == "enabled" and callable(fn):
                text = fn(text)
        return text

    async def assistant_message(self, text: str = "", tool_calls: Sequence[ToolCall] = ()) -> None:
        """Record the assistant's reply (text and tool calls)."""
        self._append(Message.assistant(text, tool_calls))

    async def tool_result(
        self, call_id: str, output: str, *, name: str | None = None, is_error: bool = False
    ) -> None:
        """Record a tool result and fire ``on_tool_result``."""
        name = name or self._builder.tool_names.get(call_id)
        self._append(Message.tool(call_id, output, name=name, is_error=is_error))
        await self._fire(ToolResultEvent(self.id, call_id, name or "", output, is_error))

    # -- helpers ------------------------------------------------------------------------------

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _rank(self, origin: str) -> int:
        try:
            return self.engine.registry.entry(origin).index + 1
        except CtxEngineError:
            return 0

    def transcript(self) -> Transcript:
        """The session's full transcript (not pruned: pruning happens only in renders)."""
        return Transcript(tuple(self.messages), source_format="session")

    # -- render -------------------------------------------------------------------------------

    async def render(self, provider: str = "openai", **options: Any) -> RenderedContext:
        """Build the request payload for ``provider`` within the budget.

        Raises:
            BudgetError: protected grains alone exceed the budget (named in the message).
            AdapterError: unknown provider, or an option :func:`ctxengine.transcript.render`
                does not take (the message lists the valid ones).
        """
        from .assemble import run_render

        check_options(options)

        queued = self._queued
        try:
            return await run_render(self, provider, **options)
        except BaseException:
            if self._queued is not queued:  # the failed render took them: they wait for the next
                self._queued[:0] = queued
            raise
