"""Turning a validated manifest or an entry point into a provider instance."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import PluginError
from .manifest import IMPORT_TIMEOUT, Manifest, forget_entry, import_entry

if TYPE_CHECKING:
    import importlib.metadata

__all__ = ("instantiate_entry_point", "instantiate_manifest")


def instantiate_manifest(
    manifest: Manifest, *, import_timeout: float | None = IMPORT_TIMEOUT
) -> Any:
    """Import the entry file, create the provider and apply the manifest to it.

    The manifest is authoritative: ``name``/``version`` are set when the class leaves them out
    and must agree when it defines them; ``priority``/``enabled`` from the manifest override
    the class's. On failure the plugin's modules are removed from :data:`sys.modules`.

    Raises:
        PluginError: the import or the constructor raised, the import did not finish within
            ``import_timeout`` seconds, or name/version disagree.
    """
    cls = import_entry(manifest, timeout=import_timeout)
    try:
        provider = cls()
        _apply_manifest(provider, manifest)
    except PluginError:
        forget_entry(manifest)
        raise
    except Exception as exc:
        forget_entry(manifest)
        raise PluginError(
            f"plugin {manifest.name!r} ({manifest.folder}) refused: creating "
            f"{manifest.class_name}() raised {type(exc).__name__}: {exc}",
            plugin=manifest.name,
        ) from exc
    return provider


def _apply_manifest(provider: Any, manifest: Manifest) -> None:
    where = f"plugin {manifest.name!r} ({manifest.folder}) refused"
    for attr, value in (("name", manifest.name), ("version", manifest.version)):
        current = getattr(provider, attr, None)
        if current is None:
            setattr(provider, attr, value)
        elif current != value:
            raise PluginError(
                f"{where}: manifest {attr} {value!r} differs from the class's {attr} {current!r}",
                plugin=manifest.name,
            )
    defaults: dict[str, Any] = {"priority": 100, "enabled": True}
    for attr, override in (("priority", manifest.priority), ("enabled", manifest.enabled)):
        if override is not None:
            setattr(provider, attr, override)
        elif not hasattr(provider, attr):
            setattr(provider, attr, defaults[attr])


def instantiate_entry_point(ep: importlib.metadata.EntryPoint) -> Any:
    """Load an entry point: a class is instantiated, a factory called, an instance used as is.

    Raises:
        PluginError: loading or instantiating raised.
    """
    try:
        obj = ep.load()
        if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "collect")):
            obj = obj()
    except Exception as exc:
        raise PluginError(
            f"plugin {ep.name!r} refused: loading entry point {ep.value!r} "
            f"raised {type(exc).__name__}: {exc}",
            plugin=ep.name,
        ) from exc
    return obj
