"""The lineage index (lineage/index.py, _runs.py, _compact.py): lookups equal a brute-force scan, before and
after any compaction, and a run read by fence and block finds every entry."""

from __future__ import annotations

import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import CorruptObject
from torch_tgb.lineage._compact import compact
from torch_tgb.lineage._runs import ENTRY, decode_run, encode_run, entries_of, merge_summaries, split_row, summary_of
from torch_tgb.lineage.index import LineageIndex
from torch_tgb.storage import MemoryStore
from torch_tgb.transforms.provenance import pack_extent, record_hash, unit_key


def _step(rng: np.random.Generator, rows: int, records: int) -> tuple[np.ndarray, np.ndarray]:
    counts = rng.integers(0, 4, size=rows)
    n = int(counts.sum())
    values = np.zeros((n, 3), dtype=np.int64)
    values[:, 0] = unit_key(3, 1)
    values[:, 1] = rng.integers(0, records, size=n)
    values[:, 2] = pack_extent(0, rng.integers(1, 50, size=n))
    return values, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def _namespace(versions: int, steps_per: int, rows: int, records: int, seed: int) -> tuple[LineageIndex, list]:
    rng = np.random.default_rng(seed)
    index = LineageIndex(MemoryStore(f"lineage-{uuid.uuid4().hex}"), where="mem: ")
    truth = []  # (record, step, dp, row)
    step = 0
    for v in range(1, versions + 1):
        steps = []
        for _ in range(steps_per):
            values, offsets = _step(rng, rows, records)
            steps.append((step, values, offsets))
            per = rows // 2
            for r in range(rows):
                for rec in values[offsets[r] : offsets[r + 1], 1].tolist():
                    truth.append((rec, step, r // per, r % per))
            step += 1
        entries = np.concatenate([entries_of(s, vals, offs, 2) for s, vals, offs in steps])
        index.write_delta(v, entries, summary_of(v, v, steps))
    return index, truth


def _found(index: LineageIndex, records: list[int]) -> list[tuple[int, int, int, int]]:
    hashes = record_hash(np.full(len(records), unit_key(3, 1)), np.array(records))
    by_hash = dict(zip(hashes.tolist(), records))
    entries, _ = index.lookup(hashes)
    return sorted((by_hash[int(e["h"])], int(e["step"]), *split_row(int(e["row"]))) for e in entries)


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 30), st.integers(1, 4), st.integers(0, 2**16), st.lists(st.integers(0, 60), min_size=1,
                                                                             max_size=12))
def test_lookups_equal_a_brute_force_scan_whatever_was_compacted(versions, steps_per, seed, records) -> None:
    index, truth = _namespace(versions, steps_per, rows=4, records=60, seed=seed)
    expected = sorted(t for t in truth if t[0] in set(records))
    assert _found(index, records) == expected
    while compact(index, min_deltas=3, base=40) is not None:  # tiny levels: several, overflowing
        assert _found(index, records) == expected
    assert _found(index, records) == expected
    state = index.state()
    assert state.indexed == versions and len(state.deltas) < 3
    assert sum(int(r.summary["rows"]) for r in state.catalog.runs) + sum(
        int(index.read_delta(v)[1]["rows"]) for v in state.deltas) == versions * steps_per * 4


def test_a_compaction_that_loses_the_generation_leaves_nothing_behind() -> None:
    from torch_tgb.storage._wrapper import ForwardingStore

    class Raced(ForwardingStore):  # another compaction created the generation first
        def put_if_absent(self, key, data):
            return False if key.startswith("_tgb/lineage/catalog/") else self.inner.put_if_absent(key, data)

    index, _ = _namespace(8, 1, rows=2, records=10, seed=1)
    raced = LineageIndex(Raced(index.store), where="mem: ")
    assert compact(raced, min_deltas=1) is None
    assert not index.store.list("_tgb/lineage/runs/") and not index.store.list("_tgb/lineage/catalog/")
    assert len(index.state().deltas) == 8


def test_runs_round_trip_and_a_damaged_run_is_refused() -> None:
    values = np.array([[unit_key(1, 0), 5, pack_extent(0, 3)]], dtype=np.int64)
    entries = entries_of(7, values, np.array([0, 1, 1]), 2)
    data = encode_run(entries, summary_of(3, 3, [(7, values, np.array([0, 1, 1]))]))
    got, summary = decode_run(data, what="x")
    assert got.tolist() == entries.tolist() and summary["tgbs"] == 1 and summary["rows"] == 2
    assert merge_summaries([summary, summary])["sources"][f"{1:08x}"]["tokens"] == 6
    bad = bytearray(data)
    bad[30] ^= 1
    with pytest.raises(CorruptObject):
        decode_run(bytes(bad), what="x")
    assert ENTRY.itemsize == 16
