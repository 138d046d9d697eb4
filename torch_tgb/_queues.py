"""Handing items between threads through a bounded queue without blocking past a stop."""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

__all__ = ["POLL_S", "put_unless"]

#: how often a thread blocked on a full queue looks whether it should stop
POLL_S = 0.05


def put_unless(q: queue.Queue[Any], item: Any, stopped: Callable[[], bool]) -> bool:
    """Put ``item`` into ``q``, waiting for room; False, and nothing put, once ``stopped()`` says so."""
    while not stopped():
        try:
            q.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False
