"""Counting a test process's open file descriptors (Linux ``/proc``)."""

from __future__ import annotations

import os

#: What the event loops of plugins hold (an epoll instance and a socket pair each): a dropped
#: engine's plugin loop closes them on its own thread, at any moment of a later test, so they
#: are left out of a count taken around a command.
_LOOPS = ("anon_inode:[eventpoll]", "socket:")


def open_descriptors() -> int:
    """Open descriptors, those of event loops left out (see :data:`_LOOPS`)."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # closed while listed
            continue
        count += not target.startswith(_LOOPS)
    return count
