"""plan_reads: with any (D, C) written and (D', C') reading, ranks see exactly the global batches.

Every token of the synthetic batches encodes (tgb step, row, position), so the
tests can check "no overlap, no gap" exactly.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from torch_tgb.errors import LayoutError
from torch_tgb.layout import Layout, Mesh, cp_ranges, plan_reads

ROWS_PER_SLICE = 2


def _global_batch(step: int, batch: int, seq: int) -> dict[str, torch.Tensor]:
    rows = torch.arange(batch) + step * batch
    tok = rows[:, None] * seq + torch.arange(seq)[None, :]
    return {"tok": tok, "row": rows.clone(), "lab": -tok}


def _read(layout: Layout, mesh: Mesh, step: int, seq: int, *, dp_split: str, cp_order: str | None = None, start: int = 0):
    """Run the plan for one consumer step against in-memory cut slices."""
    plan = plan_reads(layout, mesh, dp_split=dp_split, cp_order=cp_order)
    reads = plan.reads(step)
    cache: dict[int, list] = {}
    tensors = []
    for piece in reads.pieces:
        g = start + piece.tgb
        if g not in cache:
            cache[g] = layout.cut(_global_batch(g, layout.dp * ROWS_PER_SLICE, seq))
        tensors.append(cache[g][piece.dp * layout.cp + piece.cp].tensors)
    return plan, reads.assemble(tensors)


@st.composite
def topologies(draw):
    d = draw(st.integers(1, 4))
    c = draw(st.integers(1, 3))
    k = draw(st.integers(1, 3))
    d_read = draw(st.sampled_from([d * k] + ([d // k] if d % k == 0 else [])))
    c_read = draw(st.integers(1, 4))
    order = draw(st.sampled_from(["contiguous", "zigzag"]))
    read_order = draw(st.sampled_from([None, "contiguous", "zigzag"]))
    split = draw(st.sampled_from(["merge", "spread"]))
    return d, c, order, d_read, c_read, read_order, split


@settings(max_examples=150, deadline=None)
@given(topo=topologies())
def test_union_is_exactly_the_global_batches(topo):
    d, c, order, d_read, c_read, read_order, split = topo
    layout = Layout(dp=d, cp=c, seq_keys=("tok", "lab"), cp_order=order)
    want_order = read_order or order
    seq = math.lcm(2 * c, 2 * c_read) * 2
    batch = d * ROWS_PER_SLICE
    plan0 = plan_reads(layout, Mesh(0, d_read, 0, c_read), dp_split=split, cp_order=read_order)
    # enough consumer steps to cover 2 * lcm TGBs completely
    n_tgbs = 2 * plan0.tgbs_per_step
    n_steps = n_tgbs // plan0.tgbs_per_step * plan0.steps_per_tgb
    seen_rows: list[int] = []
    for step in range(n_steps):
        step_rows: set[int] = set()
        for r in range(d_read):
            replica = []
            for cr in range(c_read):
                plan, out = _read(layout, Mesh(r, d_read, cr, c_read), step, seq, dp_split=split, cp_order=read_order)
                assert plan.tgbs_per_step == plan0.tgbs_per_step and plan.steps_per_tgb == plan0.steps_per_tgb
                replica.append(out)
            rows = replica[0]["row"]
            for out in replica:
                # CP ranks of one replica hold the same samples...
                assert torch.equal(out["row"], rows)
                assert torch.equal(out["lab"], -out["tok"])
            # ...and complementary token chunks, each in the order the reader's cp_order asks for
            positions = torch.cat([out["tok"] - rows[:, None] * seq for out in replica], dim=1)
            expected = torch.cat(
                [torch.arange(int(lo * seq), int(hi * seq)) for cr in range(c_read) for lo, hi in cp_ranges(c_read, want_order)[cr]]
            )
            assert torch.equal(positions, expected.expand_as(positions))
            assert not (step_rows & set(rows.tolist())), "two dp ranks read the same sample"
            step_rows |= set(rows.tolist())
        # one consumer step = a contiguous block of the global sample stream
        lo, hi = min(step_rows), max(step_rows)
        assert len(step_rows) == hi - lo + 1
        tgb, sub = plan0.position(step)
        assert lo == tgb * batch + sub * (hi - lo + 1)
        assert plan0.step_at(tgb, sub) == step
        seen_rows.extend(step_rows)
    # no gap, no overlap over the covered TGBs
    assert sorted(seen_rows) == list(range(n_tgbs * batch))


def test_same_topology_reads_one_slice_whole():
    layout = Layout(dp=4, cp=2, seq_keys=("tok",))
    plan = plan_reads(layout, Mesh(2, 4, 1, 2))
    reads = plan.reads(7)
    assert [(p.tgb, p.dp, p.cp) for p in reads.pieces] == [(7, 2, 1)]
    assert plan.tgbs_per_step == plan.steps_per_tgb == 1 and plan.seq_amplification == 1.0
    piece = {"tok": torch.zeros(2, 4), "row": torch.zeros(2)}
    out = reads.assemble([piece])
    assert out["tok"] is piece["tok"]  # no copy at all


def test_dp_scale_up_and_down():
    layout = Layout(dp=2)
    up = plan_reads(layout, Mesh(3, 4))
    assert up.tgbs_per_step == 2 and [(p.tgb, p.dp) for p in up.reads(5).pieces] == [(11, 1)]
    merge = plan_reads(Layout(dp=4), Mesh(1, 2))
    assert [(p.tgb, p.dp) for p in merge.reads(3).pieces] == [(3, 2), (3, 3)]
    spread = plan_reads(Layout(dp=4), Mesh(1, 2), dp_split="spread")
    assert spread.steps_per_tgb == 2
    assert [(p.tgb, p.dp) for s in range(4) for p in spread.reads(s).pieces] == [(0, 1), (0, 3), (1, 1), (1, 3)]
    assert spread.position(3) == (1, 1) and spread.step_at(1, 1) == 3


def test_cp_split_amplification_and_views():
    layout = Layout(dp=1, cp=1, seq_keys=("tok",))
    plan = plan_reads(layout, Mesh(0, 1, 1, 2))
    assert plan.seq_amplification == 2.0
    piece = {"tok": torch.arange(8).reshape(1, 8)}
    out = plan.reads(0).assemble([piece])
    assert out["tok"].tolist() == [[4, 5, 6, 7]]
    assert out["tok"].data_ptr() == piece["tok"].data_ptr() + 4 * 8  # a view
    merge = plan_reads(Layout(cp=4, seq_keys=("tok",)), Mesh(0, 1, 0, 2))
    assert len(merge.reads(0).pieces) == 2 and merge.seq_amplification == 1.0


def test_no_seq_keys_reads_one_cp_slice():
    plan = plan_reads(Layout(dp=1, cp=2), Mesh(0, 1, 2, 3))
    assert [(p.dp, p.cp) for p in plan.reads(0).pieces] == [(0, 0)]


def test_errors():
    with pytest.raises(LayoutError, match="multiple"):
        plan_reads(Layout(dp=4), Mesh(0, 6))
    with pytest.raises(LayoutError, match="multiple"):
        plan_reads(Layout(dp=4), Mesh(0, 3))
    with pytest.raises(LayoutError, match="dp_split"):
        plan_reads(Layout(dp=4), Mesh(0, 2), dp_split="scatter")
    with pytest.raises(LayoutError, match="cp_order"):
        plan_reads(Layout(dp=4), Mesh(0, 2), cp_order="spiral")
    plan = plan_reads(Layout(dp=1), Mesh(0, 2))
    with pytest.raises(LayoutError, match="step boundary"):
        plan.step_at(1)
    with pytest.raises(LayoutError):
        plan.reads(-1)
    bad = plan_reads(Layout(cp=1, seq_keys=("tok",)), Mesh(0, 1, 0, 4))
    with pytest.raises(LayoutError, match="not divisible"):
        bad.reads(0).assemble([{"tok": torch.zeros(1, 6)}])
    with pytest.raises(LayoutError, match="needs 1 pieces"):
        bad.reads(0).assemble([])


@settings(max_examples=25, deadline=None)
@given(topo=topologies())
def test_plan_over_real_objects_matches_direct_slicing(topo):
    """Write with Layout.cut + write_tgb, read with plan + SliceReader: the same tensors as the in-memory path."""
    from torch_tgb.format import SliceReader, read_footer, write_tgb
    from torch_tgb.storage import MemoryStore

    d, c, order, d_read, c_read, read_order, split = topo
    layout = Layout(dp=d, cp=c, seq_keys=("tok", "lab"), cp_order=order)
    seq = math.lcm(2 * c, 2 * c_read) * 2
    store = MemoryStore("projection-objects")
    store.destroy()
    plan = plan_reads(layout, Mesh(d_read - 1, d_read, c_read - 1, c_read), dp_split=split, cp_order=read_order)
    footers = {}
    for g in range(plan.tgbs_per_step):
        key = f"data/p/{g}.tgb"
        write_tgb(store, key, layout.cut(_global_batch(g, d * ROWS_PER_SLICE, seq)), layout=layout)
        footers[g] = read_footer(store, key)
    reader = SliceReader(store)
    for step in range(plan.steps_per_tgb):
        reads = plan.reads(step)
        got = reads.assemble([reader.read(f"data/p/{p.tgb}.tgb", footers[p.tgb], footers[p.tgb].slice(p.dp, p.cp)) for p in reads.pieces])
        _, want = _read(layout, Mesh(d_read - 1, d_read, c_read - 1, c_read), step, seq, dp_split=split, cp_order=read_order)
        assert got.keys() == want.keys()
        for name in want:
            assert torch.equal(got[name], want[name]), name


@settings(max_examples=60, deadline=None)
@given(rows=st.integers(1, 5), width=st.integers(2, 9), extra=st.booleans(), layout=st.sampled_from(
    ["contiguous", "offset", "transposed", "every_other_column"]))
def test_whole_token_rows_take_the_short_way_to_the_same_batch(rows, width, extra, layout):
    """A one-piece, one-chunk ``labels_from`` step (the common token-rows read) skips the general join; its
    views (``as_strided``) are the slices', whatever the rows' strides and storage offset."""
    from fractions import Fraction

    from torch_tgb.layout._projection import Piece, Segment, StepReads

    tokens = {"contiguous": lambda: torch.arange(rows * width).view(rows, width),
              "offset": lambda: torch.arange(rows * width + 3)[3:].view(rows, width),
              "transposed": lambda: torch.arange(rows * width).view(width, rows).t(),
              "every_other_column": lambda: torch.arange(rows * width * 2).view(rows, 2 * width)[:, ::2]}[layout]()
    piece = {"input_ids": tokens, "seq_lens": torch.arange(rows)}
    if extra:
        piece["position_ids"] = torch.arange(rows * (width - 1)).view(rows, width - 1)
    reads = StepReads(pieces=(Piece(0, 0, 0),), parts=((Segment(0, Fraction(0), Fraction(1)),),),
                      seq_keys=("input_ids", "position_ids"), labels_from="input_ids")
    assert reads.whole_rows
    fast, general = reads.assemble([piece]), reads._part(reads.parts[0], [piece])
    assert fast.keys() == general.keys()
    for name in general:
        assert torch.equal(fast[name], general[name]), name
        assert fast[name].stride() == general[name].stride(), name
    assert torch.equal(fast["labels"], tokens[:, 1:]) and torch.equal(fast["input_ids"], tokens[:, :-1])


def test_whole_token_rows_of_one_column_say_what_is_wrong():
    from fractions import Fraction

    from torch_tgb.layout._projection import Piece, Segment, StepReads

    reads = StepReads(pieces=(Piece(0, 0, 0),), parts=((Segment(0, Fraction(0), Fraction(1)),),),
                      seq_keys=("input_ids",), labels_from="input_ids")
    with pytest.raises(LayoutError, match="labels_from key 'input_ids'"):
        reads.assemble([{"input_ids": torch.zeros(3, 1, dtype=torch.int64)}])
