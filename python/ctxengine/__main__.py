"""The program: ``python -m ctxengine`` and the ``ctxengine`` script (``run``).

Only the program keeps Ctrl-C ignored once the command is done, while the process exits:
:func:`ctxengine.cli.main`, which scripts and tests call in-process, puts the caller's SIGINT
handler back. A Ctrl-C while the command line is imported (``ctxengine.cli`` and what it
imports), before it takes Ctrl-C in hand, is the same one line and status 130, not a
traceback. One before this module runs (the interpreter starting, ``import ctxengine``) is
Python's own ``KeyboardInterrupt``.
"""

from __future__ import annotations

import sys

from ._interrupts import EXIT_INTERRUPTED, ignore_interrupts, say_interrupted


def run() -> int:
    """Run the command line as the program; returns the exit status."""
    try:
        from .cli import main

        return main(program=True)
    except KeyboardInterrupt:  # before the command line took Ctrl-C in hand
        while True:  # a second Ctrl-C meanwhile is taken, not raised
            try:
                ignore_interrupts()
                break
            except KeyboardInterrupt:
                continue
        say_interrupted()
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(run())
