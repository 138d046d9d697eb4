"""Run an action that might hang (a hostile namespace) in a thread, and fail the test if it does."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest


def within(seconds: float, action: Callable[[], object], on_hang: Callable[[], None] | None = None) -> object:
    """What ``action`` returned or raised; fails the test if it is still running after ``seconds``.

    ``on_hang`` runs before failing, e.g. to release a thread stuck on a FIFO.
    """
    out: list[object] = []

    def run() -> None:
        try:
            out.append(action())
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        if on_hang is not None:
            on_hang()
        pytest.fail(f"{action} still running after {seconds}s (hung?)")
    return out[0]
