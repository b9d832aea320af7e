"""Ctrl-C as a command ends: the one line on stderr, the exit status, SIGINT ignored.

Shared by the program (:mod:`ctxengine.__main__`, which needs them before it imports the
command line) and :mod:`ctxengine.cli`. It imports nothing the package has not loaded already
(``signal``, ``sys``, ``typing``), so the program starts no slower for it.
"""

from __future__ import annotations

import signal
import sys
from typing import Final

#: The exit status of an interrupted command.
EXIT_INTERRUPTED: Final = 130
#: The one line on stderr of an interrupted command (exit status 130).
INTERRUPTED: Final = "ctxengine: interrupted"


def ignore_interrupts() -> bool:
    """Ignore SIGINT from now on; whether one came (and was taken) while it was being set.

    A ``KeyboardInterrupt`` can still be raised as this is called, before it runs: callers
    that must not let one out call it again until it returns."""
    came = False
    while True:
        try:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # first raises one that is pending
            return came
        except KeyboardInterrupt:
            came = True
        except ValueError:  # not the main thread: nothing to do
            return came


def say_interrupted() -> None:
    """Write :data:`INTERRUPTED` on stderr, if there is one to write to."""
    try:
        sys.stderr.write(INTERRUPTED + "\n")
        sys.stderr.flush()
    except (AttributeError, OSError, ValueError):  # no stderr, or a closed one
        pass
