"""GlobalBatches: stacking, balancing, padding, resume; Mix -> Pack -> GlobalBatches -> Producer -> 2 ranks."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torchdata.nodes import IterableWrapper

import torch_tgb as tgb
from torch_tgb.datapipes import GlobalBatches, Mix, Pack
from torch_tgb.errors import LayoutError
from torch_tgb.layout import RaggedRows
from torch_tgb.testing.resume import run_resume_test
from torch_tgb.transforms import linear, row_costs


def documents(name_base: int, lengths: list[int]) -> list[dict[str, torch.Tensor]]:
    """Documents whose tokens are unique across the test: base + running index."""
    out, pos = [], name_base
    for n in lengths:
        out.append({"tokens": torch.arange(pos, pos + n, dtype=torch.int64)})
        pos += n
    return out


def skewed_lengths(seed: int, n: int, hi: int) -> list[int]:
    rng = np.random.default_rng(seed)
    return [int(x) for x in np.clip(rng.lognormal(2.5, 1.0, n), 1, hi)]


def pipeline(balance: str | None, *, dp: int = 2, gbs: int = 8, seq_len: int = 32, window: int = 16,
             rows: str = "arrays") -> GlobalBatches:
    web = IterableWrapper(documents(1_000_000, skewed_lengths(0, 60, 80)))
    code = IterableWrapper(documents(2_000_000, skewed_lengths(1, 40, 80)))
    mixed = Mix(
        {"web": web, "code": code},
        linear({"web": 0.8, "code": 0.2}, {"web": 0.2, "code": 0.8}, 60),
        seed=5,
        exhausted="renormalize",
    )
    packed = Pack(mixed, seq_len, window=window, method="bfd", rows=rows)
    layout = tgb.Layout.token_rows(dp) if rows == "tokens" else tgb.Layout(dp=dp)
    return GlobalBatches(packed, global_batch_size=gbs, layout=layout, balance=balance, alpha=4.0)


@pytest.mark.parametrize("method", [None, "greedy", "kk"])
def test_batches_are_equal_count_slices_with_recorded_order_and_costs(method: str | None) -> None:
    node = pipeline(method)
    for batch in node:
        assert batch["input_ids"].shape == (8, 32) and batch["cu_seqlens"].shape == (8, 33)
        if method is None:
            assert "row_index" not in batch
            continue
        order = batch["row_index"]
        assert sorted(order.tolist()) == list(range(8))
        for d in range(2):  # rows keep their arrival order inside a slice
            part = order[d * 4 : (d + 1) * 4]
            assert torch.equal(part, part.sort().values)
        ids = batch["document_ids"]
        want = row_costs([torch.bincount(r[r >= 0]).tolist() if (r >= 0).any() else [] for r in ids], alpha=4.0)
        assert np.allclose(batch["row_cost"].numpy(), want)
        stats = node.stats()
        assert stats.slice_costs == pytest.approx(
            [float(batch["row_cost"][:4].sum()), float(batch["row_cost"][4:].sum())]
        )


@pytest.mark.parametrize("micro_batches", [1, 2])
@pytest.mark.parametrize("rows", ["arrays", "tokens"])
def test_stats_are_the_sums_of_each_slice_and_micro_batch(micro_batches: int, rows: str) -> None:
    """slice_costs, imbalance and micro_imbalance: the batch's own row costs summed per slice and micro-batch."""
    web = IterableWrapper(documents(1_000_000, skewed_lengths(3, 80, 60)))
    packed = Pack(web, 32, window=16, method="bfd", rows=rows)
    layout = tgb.Layout.token_rows(2) if rows == "tokens" else tgb.Layout(dp=2)
    node = GlobalBatches(packed, global_batch_size=8, layout=layout, balance="kk", micro_batches=micro_batches)
    seen = []
    for batch in node:
        costs = batch["row_cost"].numpy()
        slices = costs.reshape(2, -1).sum(axis=1)
        micros = costs.reshape(2 * micro_batches, -1).sum(axis=1)
        stats = node.stats()
        assert stats.slice_costs == pytest.approx(slices.tolist())
        assert stats.imbalance == pytest.approx(slices.max() / slices.mean())
        assert stats.micro_imbalance == pytest.approx(micros.max() / micros.mean())
        assert stats.backbone_imbalance == pytest.approx(slices.max() / slices.mean())  # text rows: backbone = cost
        seen.append(slices.max() / slices.mean())
    assert len(seen) > 3 and node.stats().mean_imbalance == pytest.approx(np.mean(seen))


def test_balancing_lowers_the_largest_slice_cost() -> None:
    worst = {}
    for method in (None, "kk"):
        node = pipeline(method, dp=4, gbs=16, seq_len=64, window=64)
        worst[method] = [max(node.stats().slice_costs) for _ in node]
    assert sum(worst["kk"]) < 0.9 * sum(worst[None])


def test_short_last_batch_is_padded_not_dropped() -> None:
    rows = Pack(IterableWrapper(documents(0, [5, 7, 3])), 8, window=4, rows="arrays")
    batches = list(GlobalBatches(rows, global_batch_size=4, layout=tgb.Layout(dp=2), balance="greedy"))
    assert len(batches) == 1
    b = batches[0]
    real = b["document_ids"] >= 0
    assert sorted(b["input_ids"][real].tolist()) == list(range(15))
    pad = ~real.any(dim=1)
    assert int(pad.sum()) == 2
    assert (b["labels"][pad] == -100).all() and (b["cu_seqlens"][pad][:, 0] == 0).all()
    assert (b["cu_seqlens"][pad][:, 1:] == 8).all() and (b["max_seqlen"][pad] == 8).all()
    assert (b["row_cost"][pad] == 0).all()


def test_errors() -> None:
    rows = Pack(IterableWrapper(documents(0, [5])), 8)
    with pytest.raises(LayoutError, match="global_batch_size=6 is not divisible by dp=4"):
        GlobalBatches(rows, global_batch_size=6, layout=tgb.Layout(dp=4))
    with pytest.raises(ValueError, match="unknown balance"):
        GlobalBatches(rows, global_batch_size=4, layout=tgb.Layout(dp=4), balance="lpt")
    plain = IterableWrapper([{"x": torch.zeros(3)}] * 2)
    with pytest.raises(LayoutError, match="document_ids"):
        next(GlobalBatches(plain, global_batch_size=2, layout=tgb.Layout(dp=2), balance="kk"))
    by_callable = GlobalBatches(
        plain, global_batch_size=2, layout=tgb.Layout(dp=2), balance="kk", cost=lambda row: float(row["x"].sum())
    )
    assert next(by_callable)["row_cost"].tolist() == [0.0, 0.0]


def test_resume_through_mix_pack_global_batches() -> None:
    full = run_resume_test(lambda: pipeline("kk"), stop_after=2)
    assert len(full) >= 4
    run_resume_test(lambda: pipeline("greedy"), stop_after=len(full) - 1)


@pytest.mark.parametrize("rows", ["tokens", "arrays"])
def test_end_to_end_two_ranks_see_every_token_once(tmp_path, rows: str) -> None:
    ns = str(tmp_path / "ns")
    layout = tgb.Layout.token_rows(2) if rows == "tokens" else tgb.Layout(dp=2)
    node = pipeline("kk", dp=2, gbs=8, rows=rows)
    costs = []
    with tgb.Producer(ns, producer_id="p0", layout=layout, commit_policy="fixed:2") as p:
        for offset, batch in enumerate(node):
            p.append(batch, offset=offset)
            costs.append(node.stats().slice_costs)
        p.close(seal=True)
    seen: Counter[int] = Counter()
    steps = 0
    for rank in range(2):
        ds = tgb.TGBDataset(ns, mesh=tgb.Mesh(dp_rank=rank, dp_size=2), prefetch=0, derive=("labels", "document_ids"))
        for step, batch in enumerate(ds):
            seen.update(batch["input_ids"][batch["document_ids"] >= 0].tolist())
            assert float(batch["row_cost"].sum()) == pytest.approx(costs[step][rank])  # slice costs as reported
            steps += 1
    assert steps == 2 * len(costs)
    web = documents(1_000_000, skewed_lengths(0, 60, 80))
    code = documents(2_000_000, skewed_lengths(1, 40, 80))
    want = Counter(t for d in web + code for t in d["tokens"].tolist())
    assert seen == want  # every document's tokens exactly once (renormalize drains both sources)


def test_token_rows_batches_carry_seq_lens_and_cost_by_them() -> None:
    """Token rows: input_ids [B, S + 1] at their width, ragged seq_lens, costs Σ len² + alpha·len from them."""
    node = pipeline("kk", rows="tokens")
    for batch in node:
        assert batch["input_ids"].shape == (8, 33) and batch["input_ids"].dtype == torch.uint32
        lens = batch["seq_lens"]
        assert isinstance(lens, RaggedRows) and len(lens) == 8 and all(t.dtype == torch.int32 for t in lens)
        want = [float((x.long() ** 2).sum() + 4.0 * x.long().sum()) for x in lens]
        assert np.allclose(batch["row_cost"].numpy(), want)


class _RowByRow(Pack):
    """Pack without its block path: GlobalBatches then takes rows one ``next()`` at a time."""

    take_rows = None  # type: ignore[assignment]


@settings(max_examples=25, deadline=None)
@given(lengths=st.lists(st.integers(0, 70), min_size=1, max_size=60), method=st.sampled_from(["bfd", "concat", "none"]),
       balance=st.sampled_from([None, "greedy", "kk"]), dp=st.sampled_from([1, 2]), micro=st.sampled_from([1, 2]),
       window=st.integers(1, 9), stop=st.integers(0, 6))
def test_rows_taken_in_blocks_make_the_batches_and_states_of_rows_taken_one_by_one(
    lengths, method, balance, dp, micro, window, stop
) -> None:
    """Pack.take_rows (blocks of views) and next() (a dict per row) give equal batches, states and resumes."""

    def node(pack: type[Pack]) -> GlobalBatches:
        docs = IterableWrapper(documents(7, lengths))
        packed = pack(docs, 16, window=window, method=method, token_dtype=torch.uint16)
        return GlobalBatches(packed, global_batch_size=4 * dp, layout=tgb.Layout.token_rows(dp), balance=balance,
                             alpha=2.0, micro_batches=micro)

    def run(n: GlobalBatches, state: dict | None = None) -> list[tuple[dict, dict]]:
        n.reset(state)
        out = []
        for batch in n:
            out.append((batch, n.state_dict()))
        return out

    blocks, rows = run(node(Pack)), run(node(_RowByRow))
    assert len(blocks) == len(rows)
    if not blocks:  # empty documents only: no rows
        return
    for (a, sa), (b, sb) in zip(blocks, rows):
        assert list(a) == list(b) and sa == sb
        for key in a:
            if isinstance(a[key], RaggedRows):  # both paths join a ragged key's rows
                assert isinstance(b[key], RaggedRows) and len(a[key]) == len(b[key]), key
                assert a[key].values.dtype == b[key].values.dtype and all(
                    torch.equal(x, y) for x, y in zip(a[key], b[key])), key
            else:
                assert a[key].dtype == b[key].dtype and torch.equal(a[key], b[key]), key
    at = min(stop, len(blocks) - 1)
    resumed = run(node(Pack), blocks[at][1])  # a resume through blocks goes on as the uninterrupted run
    assert len(resumed) == len(blocks) - at - 1
    for (a, _), (b, _) in zip(resumed, blocks[at + 1 :]):
        assert all(torch.equal(x, y) for x, y in zip(a["input_ids"], b["input_ids"]))
