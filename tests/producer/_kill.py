"""The SIGKILL driver the producer-kill tests share: logged sources, kill rounds, and the resume-log check."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable, Sequence
from typing import Any

from torchdata.nodes import BaseNode

FORK = multiprocessing.get_context("fork")


class Logged(BaseNode[Any]):
    """Passes a source through, logging ``reset <documents before>`` and ``line(doc)`` per document read."""

    def __init__(self, source: BaseNode[Any], log: str, line: Callable[[Any], str], delay_s: float = 0.0) -> None:
        super().__init__()
        self.source, self.log, self.line, self.delay_s = source, log, line, delay_s

    def _write(self, line: str) -> None:
        with open(self.log, "a") as f:
            f.write(line + "\n")

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        super().reset(initial_state)
        self.source.reset(initial_state)
        self._write(f"reset {self.source.state_dict()['stats']['records']}")

    def next(self) -> Any:
        time.sleep(self.delay_s)
        doc = next(self.source)
        self._write(self.line(doc))
        return doc

    def get_state(self) -> dict[str, Any]:
        return self.source.state_dict()


def reads(log: str) -> list[str]:
    if not os.path.exists(log):
        return []
    with open(log) as f:
        return f.read().splitlines()


def kill_and_finish(
    target: Callable[..., None], args: Callable[[int], tuple], logs: Sequence[str], *, rounds: int,
    reads_between: tuple[int, int], rng: random.Random,
) -> int:
    """``rounds`` rounds of one child per log, each SIGKILLed after reading a random number more
    documents; then every child runs to the end (exit 0). Returns the kills that landed mid-run."""
    kills = 0
    for _ in range(rounds):
        procs = []
        for i, log in enumerate(logs):
            p = FORK.Process(target=target, args=args(i))
            p.start()
            procs.append((p, len(reads(log)) + rng.randint(*reads_between)))
        deadline = time.monotonic() + 60
        for (p, goal), log in zip(procs, logs):
            while p.is_alive() and len(reads(log)) < goal and time.monotonic() < deadline:
                time.sleep(0.005)
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
                kills += 1
            p.join()
    for i in range(len(logs)):
        p = FORK.Process(target=target, args=args(i))
        p.start()
        p.join(120)
        assert p.exitcode == 0, f"producer {i} exited with {p.exitcode}"
    return kills


def check_reads_resume(lines: list[str], order: list[str], who: str) -> None:
    """Each run read on from the position its committed state names, never from the start again."""
    resets = [(k, int(line.split()[1])) for k, line in enumerate(lines) if line.startswith("reset")]
    assert resets[0][1] == 0 and len(resets) >= 2
    for (k, pos), (k_next, _) in zip(resets, resets[1:] + [(len(lines), 0)]):
        run_reads = lines[k + 1 : k_next]
        assert run_reads == order[pos : pos + len(run_reads)], f"{who} run from document {pos}"
    later = [pos for _, pos in resets[1:]]
    assert later == sorted(later) and any(pos > 0 for pos in later)
