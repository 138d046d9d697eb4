"""The parsed-version cache is bounded by versions and by entries: a reader of many small TGBs stays small."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from _manifest_helpers import commit, entries, started
from torch_tgb.manifest import Manifest, Version
from torch_tgb.manifest._cache import VersionCache
from torch_tgb.storage import MemoryStore


def _version(number: int, n: int) -> Version:
    return Version(number, "ab" * 8, 0, entries("p0", 0, n), {})


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(0, 50)), max_size=60), st.integers(1, 8), st.integers(1, 120))
def test_cache_keeps_the_most_recent_within_both_bounds(puts, size, max_entries) -> None:
    cache = VersionCache(size, max_entries=max_entries)
    used: list[int] = []  # least recently used first
    lengths: dict[int, int] = {}
    for number, n in puts:
        cache.put(_version(number, n))
        used = [u for u in used if u != number] + [number]
        lengths[number] = n
        while len(used) > size or (sum(lengths[u] for u in used) > max_entries and len(used) > 1):
            used.pop(0)
        assert [u for u in sorted(lengths) if u in cache] == sorted(used)
        assert number in cache  # the newest put is always kept, however large
        assert cache.newest == max(lengths)


def test_a_reader_of_big_versions_keeps_at_most_the_entry_bound(monkeypatch) -> None:
    from torch_tgb.manifest import _cache

    monkeypatch.setattr(_cache, "MAX_CACHED_ENTRIES", 300)
    store = MemoryStore(f"cache-{uuid.uuid4().hex}")
    committer = started(store, "p0")
    for _ in range(10):
        commit(committer, 100)
    reader = Manifest(store)
    for step in range(0, 1000, 37):  # every version read once, in step order
        assert reader.entry(step).offset == step
    cached = [reader._versions.get(n) for n in range(1, reader.latest_version() + 1)]
    assert 0 < sum(len(v.entries) for v in cached if v is not None) <= 300
    store.destroy()
