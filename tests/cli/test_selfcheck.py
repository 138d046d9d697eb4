"""The storage self-check that `tgb demo` falls back to."""

from __future__ import annotations

import pytest

from torch_tgb.cli._selfcheck import storage_self_check
from torch_tgb.errors import StorageError
from torch_tgb.storage import MemoryStore, open_store


def test_self_check_passes_on_memory_and_local(tmp_path):
    for store in (MemoryStore("selfcheck-test"), open_store(str(tmp_path / "ns"))):
        result = storage_self_check(store, threads=4, rounds=5)
        assert result.ok and result.race_winners_ok == 5
        assert store.list("_tgb_selfcheck/") == []


class _RacyStore(MemoryStore):
    """put_if_absent that always claims success: the bug the self-check must catch."""

    def put_if_absent(self, key, data):
        self.put(key, data)
        return True


def test_self_check_catches_non_atomic_create():
    with pytest.raises(StorageError, match="winners"):
        storage_self_check(_RacyStore("selfcheck-racy"), threads=3, rounds=2)
