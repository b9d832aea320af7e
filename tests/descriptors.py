"""Counting a test process's open file descriptors (Linux ``/proc``)."""

from __future__ import annotations

import gc
import os
import threading


def open_descriptors() -> int:
    """Open descriptors, once the plugin threads of engines dropped before have ended (an
    engine's plugin loop stops when the engine is collected, and closes its descriptors on its
    own thread: counted while they end, the count would move under the command measured)."""
    gc.collect()
    for thread in threading.enumerate():
        if thread.name.startswith("ctxengine plugin "):
            thread.join(timeout=30)
    return len(os.listdir("/proc/self/fd"))
