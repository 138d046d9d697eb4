"""Registration of N producers started together: registration objects against the epoch bump in the log (issue 42).

N real committers (threads of one process) call ``start()`` at once on a
``CountingStore`` over a ``LatencyStore`` (rtt 20 ms, as ``dac_scale.py``)
over a ``MemoryStore``. Three rules, interleaved round by round:

- ``bump, at once``: the epoch bump as a log version, a lost slot retried at
  once (before issue 42);
- ``bump, backoff``: the same with the random exponential backoff
  (``manifest/_backoff.py``, issue 42's first fix);
- ``objects``: today's ``Committer.start``: one conditional create of
  ``_tgb/epochs/<producer>/<epoch>`` each, no version (docs/protocol.md,
  *Registering*).

The bump rules run only up to ``--max-bump-n`` (their cost grows as N²
requests or N × 2 round trips; ``dac_scale.py``'s model gives them at 1,024).
Figures: requests in all and per producer, conditional creates per producer,
versions written, seconds from the barrier until the last ``start()``
returned; medians over the rounds, with min and max.

    python benchmarks/registration.py [--rounds 3] [--ns 8,64,256,1024] [--max-bump-n 64]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from _common import add_results_arg, results_dir, save
from _log_bump import LogBumpCommitter

from torch_tgb.manifest import Committer, Manifest
from torch_tgb.manifest._backoff import Backoff
from torch_tgb.manifest.keys import LOG_PREFIX
from torch_tgb.storage import LatencyStore, MemoryStore
from torch_tgb.testing.counting import CountingStore

RTT = 0.020


def _bump(backoff: Backoff) -> Callable[[Manifest, str], Committer]:
    def make(manifest: Manifest, pid: str) -> Committer:
        committer = LogBumpCommitter(manifest, pid)
        committer.registration_backoff = backoff
        return committer
    return make


RULES: dict[str, Callable[[Manifest, str], Committer]] = {
    "bump, at once": _bump(Backoff(0.0, 0.0)),
    "bump, backoff": _bump(Backoff()),
    "objects": Committer,
}


def register_together(n: int, make: Callable[[Manifest, str], Committer]) -> dict[str, Any]:
    """``n`` committers made by ``make`` call ``start()`` at once; what it cost."""
    memory = MemoryStore(f"registration-{uuid.uuid4().hex}")
    store = CountingStore(LatencyStore(memory, rtt=RTT, bandwidth=0))
    committers = [make(Manifest(store), f"p{i:04d}") for i in range(n)]
    barrier = threading.Barrier(n + 1)
    errors: list[BaseException] = []
    finished: list[float] = []

    def body(c: Committer) -> None:
        try:
            barrier.wait()
            c.start()
            finished.append(time.perf_counter())
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=body, args=(c,), daemon=True) for c in committers]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    try:
        if errors:
            raise errors[0]
        return {"requests": store.total, "requests_per_producer": store.total / n,
                "creates_per_producer": store.calls["put_if_absent"] / n,
                "versions": len(memory.list(LOG_PREFIX)), "seconds": max(finished) - started}
    finally:
        memory.destroy()


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"rounds": runs}
    for field in ("requests", "requests_per_producer", "creates_per_producer", "versions", "seconds"):
        values = [r[field] for r in runs]
        out[field] = {"median": statistics.median(values), "min": min(values), "max": max(values)}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ns", default="8,64,256,1024")
    parser.add_argument("--max-bump-n", type=int, default=64, help="the bump rules only up to this N")
    add_results_arg(parser)
    args = parser.parse_args(argv)
    ns = [int(x) for x in args.ns.split(",")]
    runs: dict[tuple[int, str], list[dict[str, Any]]] = {}
    for round_ in range(args.rounds):
        for n in ns:
            for rule, make in RULES.items():
                if rule != "objects" and n > args.max_bump_n:
                    continue
                result = register_together(n, make)
                runs.setdefault((n, rule), []).append(result)
                print(f"round {round_} N={n:5d} {rule:14}: {result['requests']:,} requests "
                      f"({result['creates_per_producer']:.1f} creates/producer), {result['versions']} versions, "
                      f"{result['seconds']:.2f} s", flush=True)
    rows = [{"n": n, "rule": rule, **_summary(r)} for (n, rule), r in runs.items()]
    save(results_dir(args), "registration", {
        "store": f"threads of one process on a CountingStore over a LatencyStore (rtt {RTT * 1e3:g} ms) over a "
                 "MemoryStore",
        "rtt_s": RTT, "rounds": args.rounds, "max_bump_n": args.max_bump_n, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
