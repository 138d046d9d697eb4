"""A real storage self-check: put/get, ranges, and a put_if_absent race.

This is what ``tgb demo`` runs when the full pipeline (producer, consumer,
reclaimer) is not importable in this build. Everything it prints is measured.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass

from torch_tgb.errors import StorageError
from torch_tgb.storage import ObjectStore

__all__ = ["SelfCheckResult", "storage_self_check"]


@dataclass(frozen=True)
class SelfCheckResult:
    store: str
    threads: int
    rounds: int
    race_winners_ok: int  # rounds with exactly one put_if_absent winner whose bytes are stored
    puts: int
    gets: int
    seconds: float

    @property
    def ok(self) -> bool:
        return self.race_winners_ok == self.rounds


def storage_self_check(store: ObjectStore, *, threads: int = 4, rounds: int = 20) -> SelfCheckResult:
    """Exercise ``store``: round-trip, range read, delete, and ``threads`` racing creators per round.

    Raises :class:`StorageError` naming the key on any wrong answer.
    """
    started = time.perf_counter()
    payload = os.urandom(4096)
    key = "_tgb_selfcheck/roundtrip.bin"
    store.put(key, payload)
    if store.get(key) != payload:
        raise StorageError(f"{store.url}: self-check: {key!r} read back different bytes")
    if store.get_range(key, 100, 200) != payload[100:200]:
        raise StorageError(f"{store.url}: self-check: range read of {key!r} returned wrong bytes")
    if store.size(key) != len(payload):
        raise StorageError(f"{store.url}: self-check: size of {key!r} is wrong")
    puts, gets = 1, 2
    ok_rounds = 0
    for r in range(rounds):
        race_key = f"_tgb_selfcheck/race-{r:04d}.bin"
        barrier = threading.Barrier(threads)
        wins: list[int] = []
        errors: list[BaseException] = []
        lock = threading.Lock()

        def contend(i: int) -> None:
            try:
                barrier.wait()
                if store.put_if_absent(race_key, f"writer-{i}".encode()):
                    with lock:
                        wins.append(i)
            except BaseException as e:  # surfaced below, in the main thread
                with lock:
                    errors.append(e)

        workers = [threading.Thread(target=contend, args=(i,)) for i in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        puts += threads
        if errors:
            raise StorageError(f"{store.url}: self-check: put_if_absent on {race_key!r} failed: {errors[0]!r}")
        stored = store.get(race_key)
        gets += 1
        if len(wins) == 1 and stored == f"writer-{wins[0]}".encode():
            ok_rounds += 1
        else:
            raise StorageError(
                f"{store.url}: self-check: put_if_absent on {race_key!r} had {len(wins)} winners "
                f"(expected exactly 1); stored {stored[:20]!r}"
            )
    store.delete(store.list("_tgb_selfcheck/"))
    if store.list("_tgb_selfcheck/"):
        raise StorageError(f"{store.url}: self-check: delete left keys under '_tgb_selfcheck/'")
    return SelfCheckResult(
        store=store.url,
        threads=threads,
        rounds=rounds,
        race_winners_ok=ok_rounds,
        puts=puts,
        gets=gets,
        seconds=time.perf_counter() - started,
    )
