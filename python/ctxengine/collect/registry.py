"""The plugin registry: validation on register, plugin folders, entry points, enable/disable.

Usage::

    from ctxengine import registry

    registry.register(MyProvider())          # the module-level default registry
    registry.load_plugins("./plugins")       # folders holding manifest.json

A :class:`Registry` keeps plugins in registration order (the tie-breaker after priority),
refuses invalid ones with a :class:`~ctxengine.PluginError` naming the plugin, and records
refusals so ``ctxengine plugins list`` can show them.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from ..errors import PluginError
from .faults import FaultKind, PluginFault, describe_exc, withheld
from .lifecycle import setup_plugins, teardown_plugins
from .loader import instantiate_entry_point, instantiate_manifest
from .manifest import IMPORT_TIMEOUT, MANIFEST_FILE, Manifest, forget_entry, read_manifest
from .protocol import hooks_of, validate_provider
from .runner import PluginRunner

__all__ = (
    "ENTRY_POINT_GROUP",
    "PluginEntry",
    "Registry",
    "default_registry",
    "load_entry_points",
    "load_plugins",
    "register",
)

logger = logging.getLogger("ctxengine.plugins")

ENTRY_POINT_GROUP: Final = "ctxengine.plugins"
Source = Literal["builtin", "code", "dir", "entry-point"]
State = Literal["enabled", "disabled", "refused"]
Consent = bool | Collection[str]


@dataclass(slots=True)
class PluginEntry:
    """What the registry knows about one plugin (registered or refused).

    Attributes:
        name: Plugin name (for a refused folder whose manifest could not be read, the folder).
        provider: The plugin object; ``None`` when refused.
        version: Version string ("" when unknown).
        priority: Priority used for ordering.
        source: ``builtin``, ``code``, ``dir`` or ``entry-point``.
        location: Folder, distribution or module it came from.
        dangerous: Whether it asked for privileged abilities.
        description: From the manifest or the class docstring's first line.
        enabled: Registry-side switch (see :meth:`Registry.enable`).
        index: Registration order (-1 when refused).
        reason: Why it was refused ("" otherwise).
        hooks: Hooks it subscribes to.
        setup_done: Whether ``setup(engine)`` was awaited (see :meth:`Registry.setup`).
        runner: Where the plugin's calls run (:class:`~ctxengine.collect.runner.PluginRunner`;
            made on first use, see :meth:`call_runner`).
    """

    name: str
    provider: Any
    version: str
    priority: int
    source: str
    location: str = ""
    dangerous: bool = False
    description: str = ""
    enabled: bool = True
    index: int = -1
    reason: str = ""
    hooks: tuple[str, ...] = field(default_factory=tuple)
    setup_done: bool = False
    runner: PluginRunner | None = field(default=None, repr=False, compare=False)
    #: What reading the plugin's own ``enabled`` raised the last time (it is then disabled for
    #: that call); the dispatcher reports it as a fault (:meth:`take_flag_error`).
    flag_error: str | None = field(default=None, repr=False, compare=False)

    def call_runner(self) -> PluginRunner:
        """The runner of this plugin's calls (created on first use)."""
        if self.runner is None:
            self.runner = PluginRunner(self.name)
        return self.runner

    @property
    def state(self) -> State:
        """``enabled``, ``disabled`` or ``refused``."""
        if self.provider is None:
            return "refused"
        try:
            live = getattr(self.provider, "enabled", True)
        except Exception as exc:
            self.flag_error = describe_exc(exc)
            return "disabled"
        return "enabled" if self.enabled and live is True else "disabled"

    def take_flag_error(self) -> str | None:
        """What reading ``enabled`` raised since the last call, once."""
        error, self.flag_error = self.flag_error, None
        return error

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable view (no provider object)."""
        return {
            "name": self.name,
            "version": self.version,
            "priority": self.priority,
            "source": self.source,
            "location": self.location,
            "state": self.state,
            "reason": self.reason,
            "dangerous": self.dangerous,
            "description": self.description,
            "hooks": list(self.hooks),
        }


def _check_inside(folder: Path, root: Path) -> None:
    """Refuse a plugin folder that resolves outside the plugins directory (a symlink out).

    Raises:
        PluginError: it does.
    """
    resolved = folder.resolve()
    if not resolved.is_relative_to(root.resolve()):
        raise PluginError(
            f"plugin folder {folder.name!r} ({folder}) refused: it is a symlink to {resolved}, "
            f"outside the plugins directory {root}",
            plugin=None,
        )


def _describe(provider: object) -> str:
    doc = type(provider).__doc__ or ""
    return doc.strip().splitlines()[0] if doc.strip() else ""


class Registry:
    """Holds the plugins of one engine, in registration order.

    Args:
        allow_dangerous: The engine's consent for privileged plugins: ``True`` for all,
            ``False`` for none, or a collection of plugin names.

    Thread-safe: registration happens under a lock.
    """

    def __init__(self, *, allow_dangerous: Consent = False) -> None:
        self._lock = threading.RLock()
        self._entries: dict[str, PluginEntry] = {}
        self._refused: list[PluginEntry] = []
        self._blocked: set[str] = set()
        self._counter = 0
        self.allow_dangerous: Consent = allow_dangerous

    # -- consent ---------------------------------------------------------------------------

    def consents(self, name: str) -> bool:
        """Whether the engine consents to privileged abilities for plugin ``name``."""
        consent = self.allow_dangerous
        if isinstance(consent, bool):
            return consent
        return name in consent

    def is_privileged(self, name: str) -> bool:
        """Registered, declared ``dangerous`` and consented: may use privileged abilities."""
        entry = self._entries.get(name)
        return entry is not None and entry.dangerous and self.consents(name)

    def check_privilege(self, name: str, ability: str) -> None:
        """Gate for a privileged ability (e.g. ``"read another session's memory"``).

        Raises:
            PluginError: ``name`` is not dangerous or the engine did not consent.
        """
        if not self.is_privileged(name):
            raise PluginError(
                f"plugin {name!r} may not {ability}: it needs `dangerous: true` and the engine's "
                "consent (ContextEngine(allow_dangerous=...))",
                plugin=name,
            )

    # -- registration ----------------------------------------------------------------------

    def register(
        self,
        provider: Any,
        *,
        source: Source | None = None,
        location: str = "",
        dangerous: bool | None = None,
        description: str | None = None,
    ) -> Any:
        """Validate and register ``provider``; return it.

        Args:
            provider: An object implementing :class:`~ctxengine.AbstractContextProvider`.
            source: Where it came from; inferred (``builtin`` for ctxengine's own, else ``code``).
            location: Folder, distribution or module, for listings.
            dangerous: Overrides the provider's ``dangerous`` attribute (manifests set it).
            description: Overrides the class docstring's first line.

        Raises:
            PluginError: invalid provider (missing/mistyped attribute, bad version, sync
                ``collect``...), duplicate name or object, blocked name, or ``dangerous``
                without the engine's consent.
        """
        name = validate_provider(provider)
        is_dangerous = (
            bool(getattr(provider, "dangerous", False)) if dangerous is None else dangerous
        )
        with self._lock:
            self._check_admissible(name, is_dangerous)
            if any(e.provider is provider for e in self._entries.values()):
                raise PluginError(
                    f"plugin {name!r} refused: this object is already registered", plugin=name
                )
            if source is None:
                module = type(provider).__module__
                source = "builtin" if module.startswith("ctxengine.builtins") else "code"
            entry = PluginEntry(
                name=name,
                provider=provider,
                version=provider.version,
                priority=provider.priority,
                source=source,
                location=location or type(provider).__module__,
                dangerous=is_dangerous,
                description=_describe(provider) if description is None else description,
                enabled=True,
                index=self._counter,
                hooks=hooks_of(provider),
            )
            self._counter += 1
            self._entries[name] = entry
            self._refused = [r for r in self._refused if r.name != name]
        logger.info("plugin registered: %s@%s, priority=%d", name, entry.version, entry.priority)
        return provider

    def _check_admissible(self, name: str, dangerous: bool) -> None:
        if name in self._blocked:
            raise PluginError(f"plugin {name!r} refused: it is blocked", plugin=name)
        if name in self._entries:
            raise PluginError(
                f"plugin {name!r} refused: a plugin with this name is already registered "
                f"({self._entries[name].location})",
                plugin=name,
            )
        if dangerous and not self.consents(name):
            raise PluginError(
                f"plugin {name!r} refused: it is dangerous (asks for privileged abilities) and "
                "the engine did not consent; pass ContextEngine(allow_dangerous=True) or "
                f"allow_dangerous={{{name!r}}}",
                plugin=name,
            )

    def unregister(self, name: str) -> Any:
        """Remove plugin ``name``; return its provider.

        Raises:
            PluginError: no plugin of that name.
        """
        with self._lock:
            entry = self.entry(name)
            del self._entries[name]
        return entry.provider

    def _record_refusal(
        self, name: str, version: str, source: str, location: str, reason: str
    ) -> PluginEntry:
        # A PluginError already names the plugin ("plugin 'x' (folder) refused: why"): keep why.
        for prefix in (f"plugin {name!r} ({location}) refused: ", f"plugin {name!r} refused: "):
            reason = reason.removeprefix(prefix)
        entry = PluginEntry(
            name=name,
            provider=None,
            version=version,
            priority=0,
            source=source,
            location=location,
            enabled=False,
            reason=reason,
        )
        with self._lock:
            self._refused = [r for r in self._refused if (r.name, r.location) != (name, location)]
            self._refused.append(entry)
        logger.warning("plugin refused: %s (%s): %s", name, location, reason)
        return entry

    # -- blocking, enabling -----------------------------------------------------------------

    def block(self, name: str) -> None:
        """Refuse any future registration of ``name`` and unregister it if present."""
        with self._lock:
            self._blocked.add(name)
            self._entries.pop(name, None)

    def unblock(self, name: str) -> None:
        """Allow ``name`` again."""
        with self._lock:
            self._blocked.discard(name)

    def is_blocked(self, name: str) -> bool:
        """Whether ``name`` is blocked."""
        return name in self._blocked

    def enable(self, name: str) -> None:
        """Turn plugin ``name`` on (takes effect at the next dispatch).

        Raises:
            PluginError: no plugin of that name.
        """
        self._switch(name, True)

    def disable(self, name: str) -> None:
        """Turn plugin ``name`` off (takes effect at the next dispatch).

        Raises:
            PluginError: no plugin of that name.
        """
        self._switch(name, False)

    def _switch(self, name: str, on: bool) -> None:
        entry = self.entry(name)
        entry.enabled = on
        # A read-only attribute is fine: the registry-side switch still applies.
        with contextlib.suppress(AttributeError, TypeError):
            entry.provider.enabled = on

    def is_enabled(self, name: str) -> bool:
        """Whether ``name`` is registered and enabled (registry switch and its ``enabled``)."""
        entry = self._entries.get(name)
        return entry is not None and entry.state == "enabled"

    # -- lookup -----------------------------------------------------------------------------

    def entry(self, name: str) -> PluginEntry:
        """The entry of registered plugin ``name``.

        Raises:
            PluginError: no plugin of that name.
        """
        try:
            return self._entries[name]
        except KeyError:
            known = ", ".join(self._entries) or "none"
            raise PluginError(
                f"no plugin named {name!r} is registered (registered: {known})", plugin=name
            ) from None

    def get(self, name: str) -> Any:
        """The provider registered as ``name``.

        Raises:
            PluginError: no plugin of that name.
        """
        return self.entry(name).provider

    def lookup(self, name: str) -> PluginEntry | None:
        """The entry of plugin ``name``, or None."""
        return self._entries.get(name)

    def rank(self, name: str) -> int:
        """Fusion rank of grains from ``name``: registration index + 1 (0: not a plugin)."""
        entry = self._entries.get(name)
        return entry.index + 1 if entry is not None else 0

    def has_hook(self, hook: str) -> bool:
        """Whether any enabled plugin handles ``hook``."""
        return any(
            e.state == "enabled" and callable(getattr(e.provider, hook, None))
            for e in self.entries()
        )

    def redact(self, text: str, faults: list[PluginFault] | None = None) -> str:
        """``text`` through every enabled plugin that offers ``redact_text``. One that raises
        (or returns no string) fails closed: the whole text is withheld (``WITHHELD`` of
        :mod:`ctxengine.collect.faults` is returned: what it would have redacted is unknown)
        and its fault goes to ``faults`` (the next render's report); nothing is raised, so a
        buggy redactor never breaks a turn."""
        for entry in self.entries():
            fn = getattr(entry.provider, "redact_text", None)
            if entry.state != "enabled" or not callable(fn):
                continue
            try:
                got = fn(text)
            except Exception as exc:
                return _withheld(entry.name, "raised", describe_exc(exc), faults)
            if not isinstance(got, str):
                what = f"returned {type(got).__name__}, not str"
                return _withheld(entry.name, "invalid", what, faults)
            text = got
        return text

    def payload_redactors(self) -> list[Callable[[str], str]]:
        """The ``redact_text`` of every enabled plugin that may change what the engine sends
        (privileged: :meth:`is_privileged`), in plugin order: what redacts the text no grain
        holds (tool-call arguments, what compaction reads and writes)."""
        out = []
        for entry in self.entries():
            fn = getattr(entry.provider, "redact_text", None)
            if entry.state == "enabled" and callable(fn) and self.is_privileged(entry.name):
                out.append(fn)
        return out

    def entries(self) -> list[PluginEntry]:
        """Registered plugins, ordered by priority then registration order."""
        if not self._entries:  # no plugin (asked several times a render): nothing to sort
            return []
        return sorted(self._entries.values(), key=lambda e: (e.priority, e.index))

    def providers(self, *, enabled_only: bool = True) -> list[Any]:
        """Providers ordered by priority then registration; only enabled ones by default."""
        return [e.provider for e in self.entries() if not enabled_only or e.state == "enabled"]

    @property
    def refused(self) -> list[PluginEntry]:
        """Plugins refused by :meth:`load_plugins` / :meth:`load_entry_points` (not raised)."""
        return list(self._refused)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.providers(enabled_only=False))

    def include(self, other: Registry) -> None:
        """Register every plugin of ``other`` here (same source), in its registration order.

        Raises:
            PluginError: as :meth:`register` (e.g. a duplicate name).
        """
        for entry in sorted(other.entries(), key=lambda e: e.index):
            self.register(
                entry.provider,
                source=entry.source,  # type: ignore[arg-type]
                location=entry.location,
                dangerous=entry.dangerous,
                description=entry.description,
            )

    # -- lifecycle ---------------------------------------------------------------------------

    async def setup(self, engine: Any, *, timeout: float | None = 10.0) -> list[PluginFault]:
        """Await ``setup(engine)`` once per plugin; failures disable the plugin and are
        returned (see :func:`ctxengine.plugins.lifecycle.setup_plugins`)."""
        return await setup_plugins(self, engine, timeout=timeout)

    async def teardown(self, *, timeout: float | None = 5.0) -> list[PluginFault]:
        """Await ``teardown()`` on every plugin, reverse order; failures are returned and
        warned as :class:`~ctxengine.collect.faults.PluginWarning`."""
        return await teardown_plugins(self, timeout=timeout)

    # -- plugin folders ---------------------------------------------------------------------

    def load_plugins(
        self,
        directory: str | Path,
        *,
        strict: bool = True,
        import_timeout: float | None = IMPORT_TIMEOUT,
    ) -> list[PluginEntry]:
        """Load every sub-folder of ``directory`` that holds a ``manifest.json``.

        All manifests are validated before any entry file is imported; a refused manifest's
        code is never imported. Folders are processed in name order; hidden folders (``.name``)
        are skipped; a folder that is a symlink resolving outside ``directory`` is refused.

        Args:
            directory: Folder whose sub-folders are plugins.
            strict: Raise the first refusal (nothing registered when a manifest is refused;
                plugins registered by this call are rolled back when a later import fails).
                With ``strict=False`` refusals are recorded in :attr:`refused` and skipped.
            import_timeout: Seconds an entry file may take to import (``None``: no limit); see
                :mod:`ctxengine.collect.folders` for what a refused slow import leaves behind.

        Returns:
            Entries of the plugins registered by this call.

        Raises:
            PluginError: ``directory`` is not a folder, or (strict) a plugin was refused.
        """
        root = Path(directory)
        if not root.is_dir():
            raise PluginError(f"plugins directory {str(root)!r} does not exist or is not a folder")
        folders = sorted(
            p
            for p in root.iterdir()
            if not p.name.startswith(".") and p.is_dir() and (p / MANIFEST_FILE).is_file()
        )
        manifests: list[Manifest] = []
        seen: dict[str, Path] = {}
        for folder in folders:
            try:
                _check_inside(folder, root)
                manifest = read_manifest(folder)
                self._check_manifest(manifest, seen)
            except PluginError as exc:
                if strict:
                    raise
                self._record_refusal(exc.plugin or folder.name, "", "dir", str(folder), str(exc))
                continue
            seen[manifest.name] = folder
            manifests.append(manifest)
        loaded: list[PluginEntry] = []
        for manifest in manifests:
            try:
                loaded.append(self._load_manifest(manifest, import_timeout))
            except PluginError as exc:
                if strict:
                    for entry in loaded:
                        self._entries.pop(entry.name, None)
                    raise
                self._record_refusal(
                    manifest.name, manifest.version, "dir", str(manifest.folder), str(exc)
                )
        return loaded

    def _check_manifest(self, manifest: Manifest, seen: dict[str, Path]) -> None:
        name = manifest.name
        if name in seen:
            raise PluginError(
                f"plugin {name!r} ({manifest.folder}) refused: duplicate name, also declared "
                f"by {seen[name]}",
                plugin=name,
            )
        with self._lock:
            self._check_admissible(name, manifest.dangerous)

    def _load_manifest(self, manifest: Manifest, import_timeout: float | None) -> PluginEntry:
        provider = instantiate_manifest(manifest, import_timeout=import_timeout)
        try:
            self.register(
                provider,
                source="dir",
                location=str(manifest.folder),
                dangerous=manifest.dangerous,
                description=manifest.description or None,
            )
        except PluginError:
            forget_entry(manifest)
            raise
        return self._entries[manifest.name]

    # -- entry points -----------------------------------------------------------------------

    def load_entry_points(
        self, group: str = ENTRY_POINT_GROUP, *, strict: bool = False
    ) -> list[PluginEntry]:
        """Register plugins advertised by installed distributions in entry-point ``group``.

        An entry point may name a class (instantiated with no arguments), a provider instance,
        or a factory returning one. Blocked names are skipped before loading.

        Raises:
            PluginError: (strict only) an entry point failed to load or was refused.
        """
        loaded: list[PluginEntry] = []
        import importlib.metadata  # imported on use: it costs ~20 ms at ``import ctxengine``

        for ep in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
            dist = getattr(ep.dist, "name", "") or ""
            where = f"{dist}:{ep.value}" if dist else ep.value
            if ep.name in self._blocked:
                continue
            try:
                provider = instantiate_entry_point(ep)
                self.register(provider, source="entry-point", location=where)
            except PluginError as exc:
                if strict:
                    raise
                self._record_refusal(exc.plugin or ep.name, "", "entry-point", where, str(exc))
                continue
            loaded.append(self._entries[provider.name])
        return loaded


default_registry: Final = Registry()
"""The module-level registry that :func:`register` and :func:`load_plugins` fill."""


def register(provider: Any) -> Any:
    """Register ``provider`` in the default registry; see :meth:`Registry.register`.

    Raises:
        PluginError: the provider is refused.
    """
    return default_registry.register(provider)


def load_plugins(directory: str | Path, *, strict: bool = True) -> list[PluginEntry]:
    """Load a plugins folder into the default registry; see :meth:`Registry.load_plugins`.

    Raises:
        PluginError: the folder is missing, or (strict) a plugin was refused.
    """
    return default_registry.load_plugins(directory, strict=strict)


def load_entry_points(group: str = ENTRY_POINT_GROUP, *, strict: bool = False) -> list[PluginEntry]:
    """Load entry-point plugins into the default registry; see :meth:`Registry.load_entry_points`.

    Raises:
        PluginError: (strict only) an entry point failed to load or was refused.
    """
    return default_registry.load_entry_points(group, strict=strict)


def _withheld(plugin: str, kind: FaultKind, what: str, faults: list[PluginFault] | None) -> str:
    message = f"{what}; the text it was given is withheld"
    logger.warning("ctxengine plugin %s: redact_text %s", plugin, message)
    return withheld(plugin, kind, message, faults)
