"""Ctrl-C during long work: the first one ends the work cleanly after the item in hand, a second one at once.

A producer killed by ``KeyboardInterrupt`` in the middle of an append cannot
commit what it wrote, so its mark stays ``open`` ("still being written") until
a rerun. :func:`stop_on_interrupt` turns the first SIGINT into an event the
loop checks between batches: the loop ends, what was appended is committed
and the producer closes (mark ``closed``), and the command exits 130. A
second Ctrl-C raises ``KeyboardInterrupt`` right away (the old behaviour).
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["INTERRUPTED_EXIT", "stop_on_interrupt"]

#: the exit code of a command ended by Ctrl-C (128 + SIGINT), as shells report it
INTERRUPTED_EXIT = 130


@contextlib.contextmanager
def stop_on_interrupt(stop: threading.Event, what: str) -> Iterator[threading.Event]:
    """While open, the first SIGINT sets ``stop`` (and says so on stderr), a second raises KeyboardInterrupt.

    ``what`` names what the first Ctrl-C lets finish (``"the TGB in hand"``).
    Outside the main thread (where no signal handler can be set) nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            signal.signal(signal.SIGINT, previous)
            raise KeyboardInterrupt
        stop.set()
        # plain write, not the bar's lock: a handler runs between any two bytecodes of the main thread
        sys.stderr.write(f"\ntgb: interrupted: finishing {what}, committing and closing (Ctrl-C again to stop at "
                         "once, leaving the producer open)\n")
        sys.stderr.flush()

    signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)
