"""What a committer's refresh costs in requests (issue 42: ≤ 10 manifest requests per successful commit).

The refresh reads on from the hint (or its view) rather than probing with
existence checks and then reading the newest version: the read that finds
the newest is the read of it. A slot found taken a while ago is as stale as
the view, so the next refresh starts from the hint too. Counted, never timed.
"""

from __future__ import annotations

import uuid

from _manifest_helpers import commit, started

from torch_tgb.manifest import Manifest
from torch_tgb.manifest._reads import put_hint
from torch_tgb.storage import MemoryStore
from torch_tgb.testing.counting import CountingStore


def _log(versions: int) -> MemoryStore:
    store = MemoryStore(f"requests-{uuid.uuid4().hex}")
    c = started(store, "p0", snapshot_every=10_000)
    for _ in range(versions):
        commit(c, 1)
    return store


def _manifest(store: MemoryStore) -> tuple[Manifest, CountingStore]:
    """A committer's manifest in its steady state: the namespace's key layout known (learnt once per manifest,
    from dataset.json or the first object found), its requests counted from here."""
    counting = CountingStore(store)
    m = Manifest(counting)
    m.key_layout()
    counting.reset()
    return m, counting


def test_a_refresh_reads_on_from_the_hint_and_the_newest_is_read_once() -> None:
    store = _log(12)
    put_hint(store, 10)  # lags the newest (12) by two commits in flight
    m, counting = _manifest(store)
    _, newest = m.newest_for_commit(3, expected=9)
    assert newest == 12
    assert counting.calls["exists"] == 0  # no existence checks: reads of 11, 12 and the missing 13
    assert m.try_read_version(12) is not None
    logs = {k: n for k, n in counting.range_keys.items() if k.startswith("_tgb/log/")}
    assert sorted(logs.values()) == [1, 1, 1] and len(logs) == 3  # 11, 12, 13: each once, 12 not again
    assert counting.total == 4  # + the hint
    store.destroy()


def test_a_slot_found_taken_long_ago_starts_from_the_hint() -> None:
    """``at_least`` (the slot a conflict found taken) is only a lower bound: with others committing since,
    the hint is newer and the refresh reads on from there, not from the old slot."""
    store = _log(30)
    put_hint(store, 29)
    m, counting = _manifest(store)
    _, newest = m.newest_for_commit(5, expected=20, at_least=6)
    assert newest == 30
    assert counting.total == 3  # hint, version 30, the missing 31 (before: a gallop of existence checks from 6)
    store.destroy()


def test_with_others_idle_one_read_settles_it() -> None:
    store = _log(4)
    m, counting = _manifest(store)
    _, newest = m.newest_for_commit(4, expected=0)
    assert newest == 4 and counting.total == 1  # the missing version 5
    store.destroy()
