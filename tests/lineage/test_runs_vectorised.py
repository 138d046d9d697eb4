"""The committer's per-version work, vectorised (lineage/_runs.py): ``summary_of`` over all spans at once equals
a span-by-span count, and ``merge_entries`` (one stable sort, or none, where the entries are in order already)
equals a full sort by (hash, step, row)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.lineage._runs import ENTRY, MIX_STEPS, merge_entries, summary_of
from torch_tgb.transforms.provenance import pack_extent, record_hash, unit_key

steps_strategy = st.lists(
    st.tuples(st.integers(0, 3 * MIX_STEPS),
              st.lists(st.tuples(st.integers(0, 2), st.integers(0, 3), st.integers(0, 5), st.integers(0, 2),
                                 st.integers(0, 40)), max_size=12),
              st.integers(0, 4)),
    max_size=6, unique_by=lambda s: s[0])


def _steps(drawn):
    out = []
    for step, spans, extra_rows in drawn:
        rows = [[unit_key(7 + src, unit), rec, int(pack_extent(start, n))] for src, unit, rec, start, n in spans]
        values = np.array(rows, dtype=np.int64).reshape(-1, 3)
        offsets = np.array([0, len(values)] + [len(values)] * extra_rows, dtype=np.int64)
        out.append((step, values, offsets))
    return out


def _reference(lo, hi, steps):
    """The summary counted span by span."""
    out = {"lo": lo, "hi": hi, "steps": [0, 0], "sources": {}, "mix": {}, "rows": 0, "tgbs": 0}
    if steps:
        out["steps"] = [min(s for s, _, _ in steps), max(s for s, _, _ in steps) + 1]
    for step, values, offsets in steps:
        out["rows"] += len(offsets) - 1
        out["tgbs"] += 1
        for unit, _, extent in values.tolist():
            name = f"{unit >> 32:08x}"
            start, n = extent >> 24, extent & ((1 << 24) - 1)
            counts = out["sources"].setdefault(name, {"spans": 0, "tokens": 0, "documents": 0})
            counts["spans"] += 1
            counts["tokens"] += n
            counts["documents"] += int(start == 0)
            mix = out["mix"].setdefault(str(step // MIX_STEPS), {})
            mix[name] = mix.get(name, 0) + n
    return out


@settings(max_examples=60, deadline=None)
@given(steps_strategy)
def test_summary_counts_every_span(drawn) -> None:
    steps = _steps(drawn)
    assert summary_of(3, 4, steps) == _reference(3, 4, steps)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4), st.integers(0, 4)), max_size=40), st.booleans())
def test_merge_sorts_by_hash_step_row(triples, in_step_order) -> None:
    if in_step_order:  # as a delta's entries are built: (step, row) ascending
        triples = sorted(triples, key=lambda t: (t[1], t[2]))
    entries = np.array(triples, dtype=ENTRY)
    got = merge_entries([entries])
    assert got.tolist() == sorted(entries.tolist())


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 3), st.lists(st.integers(0, 3), min_size=1, max_size=4)), max_size=5),
       st.sampled_from([1, 2]))
def test_entries_of_several_steps_are_each_step_s_entries(drawn, dp) -> None:
    from torch_tgb.lineage._runs import entries_of, steps_entries

    steps = []
    for k, (seed, counts) in enumerate(drawn):
        counts = counts * dp  # rows: a multiple of dp
        n = sum(counts)
        values = np.stack([np.full(n, unit_key(seed, 0)), np.arange(n) * seed, np.zeros(n, np.int64)], axis=1)
        steps.append((10 * k + seed, values, np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)))
    together = steps_entries(steps, dp)
    expected = []
    for step, values, offsets in steps:  # span by span: (hash, step, dp slice << 16 | row in the slice)
        per = (len(offsets) - 1) // dp
        for r in range(len(offsets) - 1):
            for unit, record, _ in values[offsets[r] : offsets[r + 1]].tolist():
                h = int(record_hash(np.array([unit]), np.array([record]))[0])
                expected.append((h, step, (r // per) << 16 | (r % per)))
    assert together.tolist() == expected
    if steps:
        assert entries_of(*steps[0], dp).tolist() == [e for e in expected if e[1] == steps[0][0]]
