"""The program: ``python -m ctxengine`` and the ``ctxengine`` script (``run``).

A Ctrl-C while the command line is imported (``ctxengine.cli`` and what it imports), before
:func:`ctxengine.cli.main` takes it in hand, is the same one line and status 130, not a
traceback. One before this module runs (the interpreter starting, ``import ctxengine``) is
Python's own ``KeyboardInterrupt``.
"""

from __future__ import annotations

import signal
import sys

#: :data:`ctxengine.cli.INTERRUPTED`, which may not be imported yet.
_INTERRUPTED = "ctxengine: interrupted"


def run() -> int:
    """Run the command line as the program; returns the exit status."""
    try:
        from .cli import main

        return main()
    except KeyboardInterrupt:  # before main() took Ctrl-C in hand
        while True:  # a second Ctrl-C meanwhile is taken, not raised
            try:
                signal.signal(signal.SIGINT, signal.SIG_IGN)  # first raises one pending
                break
            except KeyboardInterrupt:
                continue
        try:
            sys.stderr.write(_INTERRUPTED + "\n")
            sys.stderr.flush()
        except (AttributeError, OSError, ValueError):  # no stderr
            pass
        return 130


if __name__ == "__main__":
    sys.exit(run())
