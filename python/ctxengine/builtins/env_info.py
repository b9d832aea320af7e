"""`env_info`: current time, timezone and platform as a ``sys.env`` grain."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from datetime import datetime, timedelta, tzinfo
from pathlib import Path
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from ..collect.scene import ContextScene
from ..errors import PluginError
from ..grain import ContextGrain

__all__ = ("EnvInfoProvider", "local_timezone_name")

Resolution = Literal["second", "minute", "hour", "day"]
_FORMATS: dict[str, str] = {
    "second": "%Y-%m-%d %H:%M:%S",
    "minute": "%Y-%m-%d %H:%M",
    "hour": "%Y-%m-%d %H:00",
    "day": "%Y-%m-%d",
}


def local_timezone_name() -> str | None:
    """IANA name of the local timezone (``TZ``, then ``/etc/localtime``), or ``None``."""
    tz = os.environ.get("TZ", "").lstrip(":")
    if tz and "/" in tz:
        return tz
    try:
        target = Path("/etc/localtime").resolve()
    except OSError:
        return None
    parts = target.parts
    if "zoneinfo" in parts:
        return "/".join(parts[parts.index("zoneinfo") + 1 :]) or None
    return None


def _utc_offset(delta: timedelta | None) -> str:
    minutes = int((delta or timedelta()).total_seconds() // 60)
    sign = "+" if minutes >= 0 else "-"
    return f"UTC{sign}{abs(minutes) // 60:02d}:{abs(minutes) % 60:02d}"


class EnvInfoProvider:
    """Current time, timezone and platform, so the model knows "now" and where it runs.

    The time is rounded to ``resolution`` (default: minute). The grain is near the top of the
    prompt, so a value that changes every turn invalidates the provider's prompt cache for
    everything after it: use ``resolution="day"`` when cache hits matter more than the clock.

    Args:
        timezone: IANA name (``"Asia/Shanghai"``); default: the machine's local timezone.
        resolution: ``second``, ``minute``, ``hour`` or ``day``.
        include_platform: Add OS, architecture and Python version.
        clock: Returns the current aware datetime (for tests); default ``datetime.now``.
        priority: Plugin and grain priority.

    Raises:
        PluginError: unknown timezone or resolution.
    """

    name = "env_info"
    version = "1.0.0"

    def __init__(
        self,
        *,
        timezone: str | None = None,
        resolution: Resolution = "minute",
        include_platform: bool = True,
        clock: Callable[[tzinfo | None], datetime] | None = None,
        priority: int = 5,
    ) -> None:
        if resolution not in _FORMATS:
            raise PluginError(
                f"resolution must be one of {', '.join(_FORMATS)}; got {resolution!r}",
                plugin=self.name,
            )
        self.priority = priority
        self.enabled = True
        self.resolution = resolution
        self.include_platform = include_platform
        self._clock = clock or (lambda tz: datetime.now(tz))
        self.timezone_name = timezone or local_timezone_name()
        try:
            self._tz: tzinfo | None = ZoneInfo(self.timezone_name) if self.timezone_name else None
        except (ZoneInfoNotFoundError, ValueError):
            raise PluginError(f"unknown timezone {timezone!r}", plugin=self.name) from None

    def describe(self) -> str:
        """The text of the grain."""
        now = self._clock(self._tz)
        if now.tzinfo is None:
            now = now.astimezone()
        zone = self.timezone_name or now.tzname() or "local"
        lines = [
            f"Current time: {now.strftime(_FORMATS[self.resolution])} ({now.strftime('%A')})",
            f"Timezone: {zone} ({_utc_offset(now.utcoffset())})",
        ]
        if self.include_platform:
            py = ".".join(map(str, sys.version_info[:3]))
            lines.append(
                f"Platform: {platform.system() or 'unknown'} {platform.release()} "
                f"({platform.machine() or 'unknown'}), Python {py}"
            )
        return "\n".join(lines)

    async def collect(self, scene: ContextScene) -> list[ContextGrain]:
        """Return one ``sys.env`` grain (lifespan ``turn``, window ``instruction``)."""
        return [
            ContextGrain(
                node_id="sys.env",
                origin=self.name,
                content=self.describe(),
                priority=self.priority,
                lifespan="turn",
                meta={"timezone": self.timezone_name, "resolution": self.resolution},
            )
        ]
