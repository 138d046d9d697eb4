"""Simulated nodes for ``end_to_end.py``: CPU sets, pinning, and CPU seconds counted per process and per core.

A node is a set of cores. A process is put on a node with
``os.sched_setaffinity`` before it runs anything (``_e2e_proc``); its
children (DataLoader workers, a Ray cluster started by a pinned driver)
inherit the set. CPU time is counted two ways: per process
(``utime + stime`` from ``/proc/<pid>/stat``, which covers every thread) and
per core (busy jiffies of each core in ``/proc/stat``, which also counts
anything else that ran there: the figure that shows a run was disturbed).
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterable, Sequence
from typing import Any

TICK = os.sysconf("SC_CLK_TCK")


def available_cpus() -> list[int]:
    return sorted(os.sched_getaffinity(0))


def split_nodes(cpus: Sequence[int], trainer: int) -> tuple[list[int], list[int]]:
    """The trainer node T (the first ``trainer`` cores) and the producer node P (the rest)."""
    if not 0 < trainer < len(cpus):
        raise SystemExit(f"need at least one core for each node: {len(cpus)} cores, trainer cores {trainer}")
    return list(cpus[:trainer]), list(cpus[trainer:])


def process_cpu_s(pid: int) -> float | None:
    """User + system seconds of process ``pid`` (all its threads); None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15 of stat)


def core_busy_s() -> dict[int, float]:
    """Busy seconds of each core since boot (everything but idle and iowait), from ``/proc/stat``."""
    out = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *values = line.split()
            if name.startswith("cpu") and name != "cpu":
                v = [int(x) for x in values]
                out[int(name[3:])] = (sum(v[:8]) - v[3] - v[4]) / TICK  # minus idle, iowait; guest is in user
    return out


def busy_between(before: dict[int, float], after: dict[int, float], cores: Iterable[int]) -> float:
    return sum(after[c] - before[c] for c in cores)


def loadavg() -> list[float]:
    return list(os.getloadavg())


def snapshot(pids: Sequence[int]) -> dict[str, Any]:
    """CPU seconds of ``pids`` and of every core, now (a window is the difference of two)."""
    return {"pids": {pid: process_cpu_s(pid) for pid in pids}, "cores": core_busy_s()}


def window_cpu(first: dict[str, Any], last: dict[str, Any], cores: Iterable[int]) -> dict[str, float]:
    """CPU seconds between two snapshots: of the processes (alive in both) and busy on ``cores``."""
    ours = 0.0
    for pid, t0 in first["pids"].items():
        t1 = last["pids"].get(pid)
        if t0 is not None and t1 is not None:
            ours += t1 - t0
    return {"processes_s": ours, "cores_busy_s": busy_between(first["cores"], last["cores"], cores)}


def ours_s() -> float:
    """CPU seconds of this process and of its children that have been waited for (the roles of past runs)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def wait_quiet(*, max_cores: float, window: float, timeout: float) -> dict[str, float]:
    """Wait until the machine's busy time over ``window`` seconds is at most ``max_cores`` (nothing of ours runs
    between runs, so it is other jobs'), for ``timeout`` seconds at most. Returns the wait and the last busy."""
    start = time.monotonic()
    while True:
        b0, t0 = core_busy_s(), time.monotonic()
        time.sleep(window)
        busy = sum(core_busy_s().values()) - sum(b0.values())
        cores = busy / (time.monotonic() - t0)
        if cores <= max_cores or time.monotonic() - start > timeout:
            return {"waited_s": time.monotonic() - start, "busy_cores": cores}
