"""A process of an ``end_to_end.py`` run: a role forked from the orchestrator, pinned to its node's cores.

Forked (not spawned): the orchestrator has imported torch, torch_tgb and the
roles once, so a trainer or producer starts in milliseconds instead of the
seconds a fresh interpreter takes (which would dominate the quick mode). The
orchestrator keeps torch at one thread and never starts Ray itself, so a fork
inherits no OpenMP pool and no Ray state. The child pins itself first
(``os.sched_setaffinity``), optionally starts its own session (a fleet driver,
so that the Ray cluster it starts can be stopped with it), then runs the role.

The role and the orchestrator talk over a pipe: the role sends ``"READY"``
once built and waits for ``"GO"``; a trainer sends ``("KILL", t)`` at its kill
step.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

#: what a child runs: ``run(role, cfg)`` (``_e2e_runs.run_role``)
Run = Callable[[str, dict[str, Any]], None]

_CTX = mp.get_context("fork")
_conn: Connection | None = None  # the child's end of its pipe (set in the child only)


def _child(run: Run, role: str, cfg: dict[str, Any], cores: list[int], conn: Connection, session: bool) -> None:
    global _conn
    if session:
        os.setsid()
    os.sched_setaffinity(0, set(cores))
    _conn = conn
    run(role, cfg)


def send(message: Any) -> None:
    """From a role: a message to the orchestrator (nothing when the role was not started by it)."""
    if _conn is not None:
        _conn.send(message)


def ready() -> bool:
    """From a role: say READY and wait for GO (True), or the orchestrator's end (False)."""
    if _conn is None:
        return True
    _conn.send("READY")
    try:
        return _conn.recv() == "GO"
    except EOFError:
        return False


class Proc:
    """``run(role, cfg)`` in a forked child on ``cores``; see the module docstring."""

    def __init__(self, run: Run, role: str, cfg: dict[str, Any], cores: list[int], *, session: bool = False) -> None:
        self.role = role
        self.conn, child = _CTX.Pipe()
        self.process = _CTX.Process(target=_child, args=(run, role, cfg, sorted(cores), child, session),
                                    name=f"e2e-{role}")
        self.process.start()
        child.close()
        self.session = session

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int | None:
        self.process.join(timeout)
        return self.process.exitcode

    def await_ready(self, timeout: float) -> bool:
        """Wait for the role's READY; False if it ended first (or did not say it in time)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.conn.poll(0.05):
                try:
                    return self.conn.recv() == "READY"
                except EOFError:
                    return False
            if self.poll() is not None:
                return False
        return False

    def go(self) -> None:
        self.conn.send("GO")

    def messages(self, timeout: float) -> list[Any]:
        """What the role sent within ``timeout`` seconds (empty at its end)."""
        out = []
        try:
            while self.conn.poll(timeout):
                out.append(self.conn.recv())
                timeout = 0
        except (EOFError, OSError):
            pass
        return out

    def signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL the child (a fleet driver: its whole session, the Ray cluster it started included)."""
        if self.session:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            self.signal(signal.SIGKILL)
        self.process.join(10)
